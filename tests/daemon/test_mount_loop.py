"""Engine work never runs on the daemon's trio loop: while a slow
``.review/ALL.diff`` is being computed, every other request is answered.

The engine wrapper's diff blocks on a gate file (``tests/enginewrap.py``), so
"slow" is a state the test holds, not a duration it measures."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MountFactory

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240)]

BOUND = 60.0  # generous: a busy machine is slow, a frozen loop never answers


def _poll(cond: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


class _Reader(threading.Thread):
    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc


def test_slow_all_diff_does_not_freeze_other_requests(mount_tree: MountFactory) -> None:
    def setup(src: Path) -> None:
        (src.parent / "slow-diff").touch()
        (src / "later.txt").write_text("never looked up before the diff\n")

    m = mount_tree({"a.txt": "alpha\n", "d/b.txt": "beta\n"}, setup=setup)
    gate = m.src.parent
    (m.mnt / "a.txt").write_text("alpha changed\n")  # something for the diff to show
    diff = _Reader(lambda: (m.mnt / ".review" / "ALL.diff").read_bytes())
    diff.start()
    try:
        assert _poll((gate / "diff-started").exists), "the diff never started"

        def others() -> tuple[os.stat_result, list[str], str, list[str]]:
            st = os.stat(m.mnt / "later.txt")  # a lookup the kernel cannot answer alone
            listing = sorted(os.listdir(m.mnt / "d"))
            text = (m.mnt / "d" / "b.txt").read_text()
            units = os.listdir(m.mnt / ".parsed" / "d" / "b.txt")
            return st, listing, text, units

        other = _Reader(others)
        other.start()
        other.join(BOUND)
        assert not other.is_alive(), "requests froze while the diff was being computed"
        assert other.error is None, other.error
        assert isinstance(other.result, tuple)
        st, listing, text, units = other.result
        assert st.st_size == len("never looked up before the diff\n")
        assert listing == ["b.txt"]
        assert text == "beta\n"
        assert units == ["content.txt"]
        # All of that was answered while the diff was still being computed.
        assert diff.is_alive()
        assert not (gate / "diff-go").exists()
    finally:
        (gate / "diff-go").touch()
    diff.join(BOUND)
    assert not diff.is_alive()
    assert diff.error is None, diff.error
    assert isinstance(diff.result, bytes)
    assert b"alpha changed" in diff.result
