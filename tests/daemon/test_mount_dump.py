"""SIGUSR1 makes a live daemon write its trio task tree and parse queue to
its log, and the mount goes on serving."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mountd.dump import MARK
from tests.mountutil import needs_fuse, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(180)]


def _poll(cond: Callable[[], bool], limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_sigusr1_dumps_tasks_and_queue() -> None:
    def populate(src: Path) -> None:
        (src / "notes.md").write_text("# Notes\nthe quarterly figure is 1200\n")

    with workspace(populate=populate) as m:
        assert MARK not in m.log()
        os.kill(m.proc.pid, signal.SIGUSR1)
        assert _poll(lambda: f"end of {MARK}" in m.log()), m.log()[-3000:]
        dump = m.log().split(MARK, 1)[1]
        # The task tree: the FUSE main loop, the invalidator and the change
        # feed are there, each with the frame it waits in.
        for name in ("pyfuse3", "Invalidator.run", "ChangeFeed.run"):
            assert name in dump, dump
        assert "    at " in dump
        assert "parse queue:" in dump
        # Still serving.
        assert m.alive()
        assert "1200" in (m.mnt / ".parsed" / "notes.md" / "content.txt").read_text()
