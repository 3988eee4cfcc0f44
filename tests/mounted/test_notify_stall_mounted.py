"""Kernel invalidations do not wait behind a lookup the daemon has not answered.

An entry invalidation (FUSE_NOTIFY_INVAL_ENTRY) takes its parent
directory's lock in the kernel, and a lookup in that directory holds it
until the daemon replies: a lookup of a unit of a view still being parsed
waits for the parse, up to ``--wait-timeout``.  An invalidation of an entry
in that folder waits as long; the invalidations of other folders' entries
(files removed, renamed or replaced behind the mount) and of other files'
pages must not wait with it.  The wait timeout is long (120 s); what the
test waits for has a generous bound well under it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mountd import fusectl
from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(400), needs_fuse]

WAIT = 120  # --wait-timeout: how long the held lookup waits for its parse
BOUND = 45.0  # seconds for what the test waits on: generous, and well under WAIT


def poll(cond: Callable[[], bool], what: str, bound: float = BOUND) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.05)


def waiting(mnt: Path) -> int:
    """Requests of the mount the daemon has not answered yet (fusectl)."""
    conn = fusectl.connection(mnt)
    if conn is None:
        return 0
    try:
        return int((fusectl.CONNECTIONS / str(conn) / "waiting").read_text())
    except (OSError, ValueError):
        return 0


def inval_entry_held(m: Mount) -> bool:
    """A thread of the daemon waits in the kernel to invalidate an entry."""
    for task in glob.glob(f"/proc/{m.proc.pid}/task/*/wchan"):
        with contextlib.suppress(OSError):
            if Path(task).read_text().strip() == "fuse_reverse_inval_entry":
                return True
    return False


def waits_for_daemon(thread: threading.Thread) -> bool:
    """``thread`` (of this process) waits in the kernel for the daemon's reply."""
    try:
        wchan = Path(f"/proc/self/task/{thread.native_id}/wchan").read_text()
    except OSError:
        return False
    return wchan == "request_wait_answer"


def steadily(cond: Callable[[], bool], hold: float = 1.0) -> Callable[[], bool]:
    """``cond`` as a poll condition that holds once ``cond`` has held for
    ``hold`` seconds on end (not a request of a moment ago)."""
    since: list[float] = []

    def check() -> bool:
        if not cond():
            since.clear()
            return False
        since[:1] = since[:1] or [time.monotonic()]
        return time.monotonic() - since[0] >= hold

    return check


def populate(src: Path) -> None:
    (src / "other.txt").write_text("first bytes\n")
    (src / "gone.txt").write_text("removed behind the mount\n")
    (src / "moved.txt").write_text("renamed behind the mount\n")
    (src / "replaced.txt").write_text("replaced behind the mount\n")
    (src / "new.txt").write_text("new\n")


def _stat(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.stat(path)


def _size(path: Path) -> int:
    """The size of ``path``; -1 if it cannot be stat'ed."""
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def test_a_held_lookup_holds_back_only_its_own_folder() -> None:
    fusectl.ensure_mounted()
    if not os.path.ismount(fusectl.CONNECTIONS):
        pytest.skip("needs fusectl (to see the held lookup)")
    extra = ["--wait-timeout", str(WAIT), "--parse-timeout", "600", "--rescan-interval", "3600"]
    with workspace(extra, populate=populate) as m:
        # The kernel keeps other.txt's pages while this stays open, and the
        # entries of the files changed below.
        fd = os.open(m.mnt / "other.txt", os.O_RDONLY)
        held: threading.Thread | None = None
        try:
            assert os.pread(fd, 100, 0) == b"first bytes\n"
            for name in ("gone.txt", "moved.txt", "replaced.txt"):
                assert _size(m.mnt / name) > 0
            # A document whose parse waits for the test (no .go gate yet).
            (m.mnt / "report.gated").write_text("the report\n")
            view = m.mnt / ".parsed" / "report.gated"
            poll(view.exists, "the pending view appears")
            assert os.listdir(view) == ["pending.md"]
            os.stat(view / "pending.md")  # the kernel holds the entry
            # A lookup the daemon answers only when the parse ends: it holds
            # the view folder's lock in the kernel.
            before = waiting(m.mnt)
            held = threading.Thread(target=_stat, args=(view / "content.txt",), daemon=True)
            held.start()
            poll(
                steadily(lambda: waiting(m.mnt) > before and waits_for_daemon(held)),
                "the lookup waits for the daemon",
            )
            # The document changes: its view's entries are invalidated, among
            # them pending.md in the held folder, which waits for the lookup.
            (m.mnt / "report.gated").write_text("the report, second draft\n")
            poll(lambda: inval_entry_held(m), "an entry invalidation waits for the lookup")
            # Behind the mount, in another folder (the root): a file removed,
            # one renamed, one replaced, one written.
            (m.src / "gone.txt").unlink()
            (m.src / "moved.txt").rename(m.src / "moved-away.txt")
            (m.src / "new.txt").rename(m.src / "replaced.txt")
            (m.src / "other.txt").write_text("second bytes\n")
            poll(lambda: _size(m.mnt / "gone.txt") < 0, "gone.txt is gone through the mount")
            poll(lambda: _size(m.mnt / "moved.txt") < 0, "moved.txt is gone through the mount")
            poll(lambda: _size(m.mnt / "replaced.txt") == 4, "replaced.txt is the new file")
            poll(lambda: os.pread(fd, 100, 0) == b"second bytes\n", "other.txt's new bytes")
            assert held.is_alive(), "the lookup was answered early: the test showed nothing"
        finally:
            os.close(fd)
            (m.src / "report.gated.go").write_text("")  # the parse ends, the lookup returns
        swfs("sync", m.mnt)
        held.join(BOUND)
        assert not held.is_alive()
        poll(lambda: not inval_entry_held(m), "the held entry invalidation is sent after all")
        poll(
            lambda: "second draft" in (view / "content.txt").read_text(),
            "the view of the second draft",
        )
