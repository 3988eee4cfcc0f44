"""A dead or hung daemon never leaves a mount that hangs its users.

A daemon killed while one of its threads is in the kernel, sending an entry
invalidation that waits on the directory lock of a lookup the daemon has
not answered, cannot finish exiting: its connection would live on and every
program touching the mount would wait for good.  Its watchdog
(mountd.fusectl) aborts the connection; ``swfs umount`` aborts the
connection of a dead or hung mount and unmounts it lazily; ``swfs mount``
refuses a mount point left by a dead daemon.

Every probe of a mount point runs in a child process with a timeout
(``fusectl.probe``), so a test never hangs on the mount it checks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd import fusectl
from mountd.launch import mounted_swfs
from tests.mountutil import (
    Mount,
    abort_connection,
    lazy_unmount,
    needs_fuse,
    start_mount,
    swfs,
    wait_until,
    workspace,
)

pytestmark = [
    pytest.mark.mount,
    needs_fuse,
    pytest.mark.skipif(
        os.geteuid() != 0 and not os.path.ismount(fusectl.CONNECTIONS),
        reason="aborting a connection needs fusectl mounted (or root to mount it)",
    ),
]

STUCK = "fuse_reverse_inval_entry"  # the kernel function a stuck notification waits in


def _wchans(pid: int) -> dict[int, str]:
    out = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                out[int(tid)] = Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
    return out


def _state(mnt: Path) -> str:
    return fusectl.probe(mnt, 30)


@contextlib.contextmanager
def _stuck_on_an_invalidation(m: Mount) -> Iterator[subprocess.Popen[bytes]]:
    """A daemon thread waits in the kernel to invalidate an entry of a
    directory whose lookup the daemon holds unanswered (a unit of a view
    whose gated parse has not run): yields the waiting lookup's process."""
    (m.mnt / "report.gated").write_text("the report\n")
    view = m.mnt / ".parsed" / "report.gated"
    wait_until("the pending view", view.exists, 60)
    os.stat(view / "pending.md")  # the kernel holds this entry
    looker = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; os.stat(sys.argv[1])", str(view / "content.txt")],
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            "the lookup waits for the parse",
            lambda: Path(f"/proc/{looker.pid}/wchan").read_text() == "request_wait_answer",
            60,
        )
        # A change of the file: its view's entries are invalidated, and the
        # notification waits for the lookup's directory lock.
        (m.mnt / "report.gated").write_text("the report, again\n")
        wait_until(
            "a daemon thread waits in " + STUCK,
            lambda: STUCK in _wchans(m.proc.pid).values(),
            60,
        )
        yield looker
    finally:
        if looker.poll() is None:
            looker.kill()
        looker.wait(60)


def _gated() -> list[str]:
    return ["--wait-timeout", "600", "--parse-timeout", "600"]


@pytest.mark.timeout(300)
def test_a_daemon_killed_in_a_stuck_invalidation_is_reaped_and_its_mount_answers() -> None:
    with workspace(_gated(), sync=False) as m:
        try:
            with _stuck_on_an_invalidation(m) as looker:
                os.kill(m.proc.pid, signal.SIGKILL)
                # The watchdog aborts the connection: the stuck thread returns,
                # the daemon's exit completes, the waiting lookup fails.
                m.proc.wait(90)
                assert looker.wait(60) != 0
            assert "aborted its FUSE connection" in m.log()
            assert _state(m.mnt) == "dead"
            proc = swfs("umount", m.mnt)
            assert "the daemon is gone" in proc.stderr
            assert str(m.mnt) in proc.stderr
            assert not mounted_swfs(m.mnt)
        finally:
            abort_connection(m.mnt)  # never a hung mount left behind


@pytest.mark.timeout(300)
def test_umount_aborts_a_hung_mount_and_unmounts_it() -> None:
    """A daemon that answers nothing (stopped): `swfs umount` aborts its
    connection and unmounts lazily; the program waiting on it gets an error."""
    with workspace() as m:
        (m.mnt / "a.txt").write_text("a\n")
        os.kill(m.proc.pid, signal.SIGSTOP)
        try:
            waiter = subprocess.Popen(
                [sys.executable, "-c", "import os, sys; os.statvfs(sys.argv[1])", str(m.mnt)],
                stderr=subprocess.DEVNULL,
            )
            proc = swfs("umount", m.mnt, timeout=120)
            assert f"{m.mnt}: the daemon did not answer" in proc.stderr
            assert "aborted its FUSE connection" in proc.stderr
            assert not mounted_swfs(m.mnt)
            assert waiter.wait(60) != 0
            assert (m.src / "a.txt").read_text() == "a\n"
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
            abort_connection(m.mnt)


@pytest.mark.timeout(300)
def test_umount_of_a_live_mount_is_a_clean_unmount() -> None:
    with workspace() as m:
        (m.mnt / "a.txt").write_text("a\n")
        proc = swfs("umount", m.mnt)
        assert proc.stderr == ""
        assert m.proc.wait(120) == 0  # the daemon stopped cleanly
        assert not mounted_swfs(m.mnt)
        assert "watchdog" not in m.log()  # stood down: nothing aborted


@pytest.mark.timeout(300)
def test_mount_refuses_a_dead_mount_point_and_remounts_after_umount() -> None:
    with workspace() as m:
        (m.mnt / "a.txt").write_text("before the kill\n")
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait(90)
        assert _state(m.mnt) == "dead"
        refused = swfs("mount", m.src, m.mnt, check=False)
        assert refused.returncode != 0
        assert f"{m.mnt}: still mounted by a daemon that is gone" in refused.stderr
        assert f"swfs umount {m.mnt}" in refused.stderr
        swfs("umount", m.mnt)
        m2 = start_mount(m.src, m.mnt)
        try:
            assert (m2.mnt / "a.txt").read_text() == "before the kill\n"
            swfs("check", m2.mnt)
        finally:
            m2.stop()


def _writers_busy(d: Path) -> bool:
    names = os.listdir(d)
    return all(any(n.startswith(f"w{k}-") for n in names) for k in range(4))


WRITER = """
import os, sys
d = sys.argv[1]
i = 0
try:
    while True:
        p = os.path.join(d, "w%s-%d" % (sys.argv[2], i % 20))
        with open(p, "w") as f:
            f.write("x" * 4096)
        os.listdir(d)
        if i % 3 == 0:
            os.unlink(p)
        i += 1
except OSError:
    pass
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_under_load_leaves_no_hung_mount() -> None:
    """Writers and listers busy in the mount (each change invalidates
    entries) when the daemon is killed: it is reaped, every writer ends,
    and `swfs umount` leaves the mount point ready for a new mount."""
    with workspace() as m:
        (m.mnt / "d").mkdir()
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, str(m.mnt / "d"), str(k)])
            for k in range(4)
        ]
        try:
            wait_until("every writer busy", lambda: _writers_busy(m.src / "d"), 120)
            os.kill(m.proc.pid, signal.SIGKILL)
            m.proc.wait(90)
            for w in writers:
                w.wait(90)
            assert _state(m.mnt) == "dead"
            swfs("umount", m.mnt)
            assert not mounted_swfs(m.mnt)
        finally:
            for w in writers:
                if w.poll() is None:
                    w.kill()
                    w.wait(60)
            abort_connection(m.mnt)
            lazy_unmount(m.mnt)
        m2 = start_mount(m.src, m.mnt)
        try:
            swfs("check", m2.mnt)
        finally:
            m2.stop()
