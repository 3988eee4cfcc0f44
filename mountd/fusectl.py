"""A mount's FUSE connection, through fusectl: found, probed, aborted.

A daemon killed (``kill -9``) while the kernel holds a request of its mount
can stay a zombie: one of its threads is in the kernel, sending an
invalidation that waits on a lock (a directory's, a page's) held by that
request, which only the dead daemon could answer.  The process then never
finishes exiting, its ``/dev/fuse`` stays open, the kernel never ends the
connection, and every program that touches the mount waits for good
(``fusermount3 -u -z`` does not help).  Writing to the connection's
``abort`` file in fusectl ends every request it holds with ENOTCONN; the
stuck thread then returns and the daemon's exit completes.

Two users: the daemon starts a watchdog (this module run as a script,
``Watchdog``) that aborts its connection once the daemon is dead, and
``swfs umount`` aborts the connection of a mount whose daemon is dead or
does not answer before it unmounts it lazily.

Standard library only: the command line imports it without pyfuse3, and
the watchdog is a small process.  Nothing here makes a request to the mount
but ``probe``, which does in a child process it may abandon.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Literal

CONNECTIONS = Path("/sys/fs/fuse/connections")
FSTYPE = "fuse.swfs"
PR_SET_PDEATHSIG = 1

Probe = Literal["live", "dead", "hung"]


class FusectlError(Exception):
    """The connection could not be aborted; the message names the path and the cause."""


def canonical(mnt: str | os.PathLike[str]) -> Path:
    """``mnt`` as /proc/self/mountinfo spells it, found without a request to
    the mount itself (its parent is resolved, not the mount point)."""
    p = Path(os.path.abspath(mnt))
    if p.parent == p:
        return p
    return Path(os.path.realpath(p.parent)) / p.name


def _unescape(field: str) -> str:
    # mountinfo writes ' ', '\t', '\n' and '\\' as octal escapes.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def connection(mnt: str | os.PathLike[str], *, fstype: str | None = FSTYPE) -> int | None:
    """The FUSE connection number of the mount at ``mnt`` (the minor number
    of its device: its folder in fusectl), or None when nothing of
    ``fstype`` (any FUSE file system with None) is mounted there.  The top
    mount counts when several are stacked."""
    found = mount_entry(mnt, fstype=fstype)
    return None if found is None else found[1]


def mount_entry(
    mnt: str | os.PathLike[str], *, fstype: str | None = FSTYPE
) -> tuple[int, int] | None:
    """(mount id, connection number) of the FUSE mount at ``mnt``, as
    ``connection`` finds it."""
    target = str(canonical(mnt))
    try:
        lines = Path("/proc/self/mountinfo").read_text(errors="surrogateescape").splitlines()
    except OSError:
        return None
    found = None
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail or _unescape(fields[4]) != target:
            continue
        kind = tail[0]
        if (kind == fstype) if fstype else (kind == "fuse" or kind.startswith("fuse.")):
            found = (int(fields[0]), int(fields[2].split(":")[1]))
        else:
            found = None  # something else is mounted over it
    return found


def ensure_mounted() -> None:
    """Mount fusectl at CONNECTIONS if it is not (needs root; otherwise a no-op)."""
    if os.path.ismount(CONNECTIONS) or not CONNECTIONS.is_dir() or os.geteuid() != 0:
        return
    subprocess.run(
        ["mount", "-t", "fusectl", "none", str(CONNECTIONS)], capture_output=True, check=False
    )


def can_abort() -> bool:
    """Whether this process can reach fusectl (mounted, or root to mount it)."""
    return os.geteuid() == 0 or os.path.ismount(CONNECTIONS)


def abort(conn: int) -> None:
    """End every request of FUSE connection ``conn`` with ENOTCONN: the
    mount answers nothing any more, its daemon's stuck threads return."""
    ensure_mounted()
    path = CONNECTIONS / str(conn) / "abort"
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write("1")
    except FileNotFoundError:
        if not os.path.ismount(CONNECTIONS):
            raise FusectlError(
                f"{CONNECTIONS}: fusectl is not mounted (as root: "
                f"`mount -t fusectl none {CONNECTIONS}`)"
            ) from None
        raise FusectlError(f"{path}: no such connection (it has ended)") from None
    except OSError as exc:
        raise FusectlError(f"{path}: {exc.strerror}") from None


def probe(mnt: str | os.PathLike[str], timeout: float) -> Probe:
    """Whether the daemon of the mount at ``mnt`` answers a request (a
    statfs, which the kernel never answers from its caches): ``live``,
    ``dead`` (ENOTCONN: its connection has ended) or ``hung`` (no answer
    within ``timeout`` seconds).  Asked in a child process, killed if it
    waits; this process never waits on the mount."""
    target = str(canonical(mnt))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(r)
            try:
                os.statvfs(target)
            except OSError as exc:
                code = exc.errno or 255
            os.write(w, b"%d" % code)
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout)
        out = os.read(r, 16) if ready else None
    finally:
        os.close(r)
        if out is None:
            os.kill(pid, signal.SIGKILL)
        _reap(pid, 5.0)
    if out is None:
        return "hung"
    if out and int(out) == errno.ENOTCONN:
        return "dead"
    return "live"


def _reap(pid: int, limit: float) -> None:
    # A child killed while it waits on a FUSE request ends at once; one in an
    # uninterruptible wait is left to init rather than waited on for good.
    deadline = time.monotonic() + limit
    while True:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
                continue
        return


def dead_process(pid: int) -> bool:
    """Whether process ``pid`` is gone or a zombie (its main thread has
    exited; another may still be stuck in the kernel)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[-1].startswith((b"Z", b"X"))
    except OSError:
        return True


class Watchdog:
    """The daemon's side of the watchdog: a small process, started once the
    mount is made, that aborts the connection if the daemon dies without
    standing it down (``stand_down`` on a clean stop)."""

    def __init__(self, mountpoint: Path, conn: int) -> None:
        r, w = os.pipe()
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                # The module alone, as a script: no site, no package (0.04 s to start).
                [sys.executable, "-I", "-S", __file__, str(os.getpid()), str(conn), mountpoint],
                stdin=r,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # no terminal signal for it
            )
        finally:
            os.close(r)
        self._pipe: IO[bytes] | None = os.fdopen(w, "wb", buffering=0)

    def stand_down(self) -> None:
        """The daemon stops cleanly: the watchdog leaves the connection be."""
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                self._pipe.write(b"x")
            self._pipe.close()
            self._pipe = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
            self.proc = None


def watch(daemon: int, conn: int, mountpoint: str, stand_down: int = 0) -> int:
    """The watchdog: wait until the daemon (its parent, pid ``daemon``) has
    died; unless it stood down first (``x`` on ``stand_down``) or its
    descriptors were closed (EOF: its connection ended with them), abort
    connection ``conn`` if it is still the same mount at ``mountpoint``."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # a signal wakes the select below
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    mine = mount_entry(mountpoint)
    # Signalled when the thread that started us ends: the daemon's main
    # thread, which a kill ends even when another thread stays stuck.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGUSR1, 0, 0, 0)
    while not dead_process(daemon):
        ready, _, _ = select.select([stand_down, wake_r], [], [], 5.0)
        if stand_down in ready:
            return 0  # x: it stood down; EOF: its descriptors, the connection's too, are closed
        if wake_r in ready:
            os.read(wake_r, 64)
    # Its last threads may still be exiting: their end closes the pipe.
    if _said(stand_down, 2.0) is not None:
        return 0
    if mine is None or mount_entry(mountpoint) != mine or mine[1] != conn:
        return 0  # unmounted meanwhile (or never seen)
    try:
        abort(conn)
    except FusectlError as exc:
        print(f"swfs watchdog: {mountpoint}: the daemon died; {exc}", file=sys.stderr)
        return 1
    print(
        f"swfs watchdog: {mountpoint}: the daemon (pid {daemon}) died; "
        f"aborted its FUSE connection {conn}",
        file=sys.stderr,
    )
    return 0


def _said(fd: int, timeout: float) -> bytes | None:
    """What the daemon wrote on ``fd`` within ``timeout`` seconds: ``x``
    (it stood down), b"" (EOF: its descriptors are closed) or None."""
    ready, _, _ = select.select([fd], [], [], timeout)
    return os.read(fd, 1) if ready else None


def main(argv: list[str]) -> int:
    daemon, conn, mountpoint = int(argv[0]), int(argv[1]), argv[2]
    return watch(daemon, conn, mountpoint)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
