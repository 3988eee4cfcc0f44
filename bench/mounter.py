"""Mounting and unmounting for the benchmark, every step bounded by a timeout.

``RefMounter`` runs bench.refpassthrough in the foreground as a child process;
``SwfsMounter`` uses the product CLI (``swfs mount`` returns once the mount is
ready and leaves a daemon behind).  Every mount made here is registered so that
``unmount_all()`` can tear it down from a ``finally`` even after an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MOUNT_TIMEOUT = 120.0
UMOUNT_TIMEOUT = 60.0
REAP_TIMEOUT = 20.0


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why."""


class Unsupported(BenchError):
    """The mounter cannot run this workload (e.g. ``swfs`` lacks a command)."""


@dataclass
class Mount:
    source: Path
    mountpoint: Path
    pid: int | None = None  # the daemon serving the mount, when known
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)


_LIVE: dict[Path, tuple[Mounter, Mount]] = {}


def run_cmd(
    args: Sequence[str | Path], *, timeout: float, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command, capture its output; raise BenchError on failure or timeout."""
    argv = [str(a) for a in args]
    try:
        cp = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise BenchError(f"{' '.join(argv)}: timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise BenchError(f"{argv[0]}: {exc.strerror}") from None
    if check and cp.returncode != 0:
        tail = (cp.stderr or cp.stdout).strip().splitlines()[-3:]
        raise BenchError(f"{' '.join(argv)}: exit {cp.returncode}: {' | '.join(tail)}")
    return cp


def _unescape(field: str) -> str:
    """Mount points in /proc/self/mountinfo escape space, tab, newline and backslash."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def is_mounted(path: Path) -> bool:
    """Whether something is mounted on ``path``, read from the mount table: a dead
    FUSE daemon leaves ENOTCONN on its mount point, which os.path.ismount takes
    for "not a mount point"."""
    want = os.path.abspath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            return any(_unescape(line.split()[4]) == want for line in f)
    except (OSError, IndexError):
        return os.path.ismount(path)


def _wait_mounted(path: Path, timeout: float, proc: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + timeout
    while not is_mounted(path):
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{path}: mount daemon exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise BenchError(f"{path}: not mounted after {timeout:.0f} s")
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except OSError:
        return False
    return False


def _reap(pid: int, proc: subprocess.Popen[bytes] | None) -> None:
    """Wait for the daemon to exit; TERM, then KILL it if it lingers."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            log.warning("daemon %d still running after unmount; sending %s", pid, sig.name)
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + REAP_TIMEOUT / 2
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return
            elif not _alive(pid):
                return
            time.sleep(0.05)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)


def fuse_daemon_pid(mountpoint: Path) -> int | None:
    """The process serving ``mountpoint``: it holds /dev/fuse open and its command
    line names the mountpoint (other FUSE daemons on the machine are never picked,
    since an unmount may signal the pid found here)."""
    want = {str(mountpoint), os.path.realpath(mountpoint)}
    holders: list[int] = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if not any(os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/fuse" for fd in fds):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if any(a in want or a.rstrip("/") in want for a in argv):
            holders.append(pid)
    return min(holders) if holders else None


def proc_status_kb(pid: int, key: str) -> int | None:
    """A ``kB`` field of /proc/<pid>/status (VmHWM: peak resident set)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry))
    return out


def force_unmount(mountpoint: Path) -> None:
    """fusermount3 -u, then a lazy unmount if that did not work."""
    for args in (["fusermount3", "-u"], ["fusermount3", "-u", "-z"]):
        if not is_mounted(mountpoint):
            return
        try:
            run_cmd([*args, mountpoint], timeout=UMOUNT_TIMEOUT, check=False)
        except BenchError as exc:
            log.warning("%s", exc)
    if is_mounted(mountpoint):
        log.error("%s: still mounted after fusermount3 -u -z", mountpoint)


class Mounter(ABC):
    name = "?"
    is_swfs = False

    @abstractmethod
    def mount(self, source: Path, mountpoint: Path) -> Mount:
        """Mount ``source`` at ``mountpoint``; return once it answers."""

    @abstractmethod
    def _unmount(self, m: Mount) -> None:
        """Ask the mounter's own tool to unmount."""

    def settle(self, m: Mount) -> None:  # noqa: B027 (optional hook: nothing to wait for by default)
        """Wait until the daemon's background work for the mount is done."""

    def unmount(self, m: Mount) -> None:
        try:
            try:
                self._unmount(m)
            except BenchError as exc:
                log.warning("%s", exc)
            force_unmount(m.mountpoint)
            if m.pid is not None:
                _reap(m.pid, m.proc)
        finally:
            _LIVE.pop(m.mountpoint, None)

    @contextlib.contextmanager
    def mounted(self, source: Path, mountpoint: Path) -> Iterator[Mount]:
        mountpoint.mkdir(parents=True, exist_ok=True)
        if is_mounted(mountpoint):
            log.warning("%s: left mounted by an earlier run; unmounting", mountpoint)
            force_unmount(mountpoint)
        m = self.mount(source, mountpoint)
        try:
            yield m
        finally:
            self.unmount(m)


class RefMounter(Mounter):
    name = "ref"

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir

    def mount(self, source: Path, mountpoint: Path) -> Mount:
        self.logdir.mkdir(parents=True, exist_ok=True)
        with open(self.logdir / "refpassthrough.log", "ab") as logf:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.refpassthrough", str(source), str(mountpoint)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                cwd=Path(__file__).resolve().parent.parent,
            )
        m = Mount(source, mountpoint, proc.pid, proc)
        _LIVE[mountpoint] = (self, m)
        try:
            _wait_mounted(mountpoint, MOUNT_TIMEOUT, proc)
        except BaseException:
            self.unmount(m)
            raise
        return m

    def _unmount(self, m: Mount) -> None:
        run_cmd(["fusermount3", "-u", m.mountpoint], timeout=UMOUNT_TIMEOUT)


class SwfsMounter(Mounter):
    name = "swfs"
    is_swfs = True

    def __init__(self, *, sync_timeout: float, exe: Path | None = None) -> None:
        self.exe = exe or Path(sys.executable).parent / "swfs"
        self.sync_timeout = sync_timeout
        self.options: tuple[str, ...] = ()
        self._commands: dict[str, bool] = {}

    def has(self, command: str) -> bool:
        """Whether the installed ``swfs`` has ``command`` (``swfs CMD --help`` works)."""
        if command not in self._commands:
            ok = self.exe.exists()
            if ok:
                try:
                    ok = (
                        run_cmd([self.exe, command, "--help"], timeout=30, check=False).returncode
                        == 0
                    )
                except BenchError:
                    ok = False
            self._commands[command] = ok
        return self._commands[command]

    def require(self, *commands: str) -> None:
        missing = [c for c in commands if not self.has(c)]
        if missing:
            raise Unsupported(f"swfs lacks: {', '.join(missing)} ({self.exe})")

    def cmd(self, *args: str | Path, timeout: float) -> subprocess.CompletedProcess[str]:
        if self.options and args and args[0] == "mount":
            args = ("mount", *self.options, *args[1:])
        return run_cmd([self.exe, *args], timeout=timeout)

    def with_options(self, *options: str) -> SwfsMounter:
        """The same mounter, its mounts given ``options`` (``swfs mount``)."""
        other = SwfsMounter(sync_timeout=self.sync_timeout, exe=self.exe)
        other._commands = self._commands
        other.options = (*self.options, *options)
        return other

    def mount(self, source: Path, mountpoint: Path) -> Mount:
        self.require("mount", "umount")
        m = Mount(source, mountpoint)
        _LIVE[mountpoint] = (self, m)
        try:
            self.cmd("mount", source, mountpoint, timeout=MOUNT_TIMEOUT)
            _wait_mounted(mountpoint, 10.0, None)
            m.pid = fuse_daemon_pid(mountpoint)
            if m.pid is None:
                log.warning("%s: could not find the daemon's pid", mountpoint)
        except BaseException:
            self.unmount(m)
            raise
        return m

    def _unmount(self, m: Mount) -> None:
        if m.pid is None:
            m.pid = fuse_daemon_pid(m.mountpoint)
        self.cmd("umount", m.mountpoint, timeout=UMOUNT_TIMEOUT)

    def settle(self, m: Mount) -> None:
        # TARGET may be the folder or its mount point; the folder is asked so that
        # waiting does not depend on the mount's root xattrs answering.
        if self.has("sync"):
            self.cmd("sync", m.source, timeout=self.sync_timeout)


def unmount_all() -> None:
    """Tear down every mount this process made (used from ``finally``)."""
    for mounter, m in list(_LIVE.values()):
        log.warning("cleaning up mount %s", m.mountpoint)
        mounter.unmount(m)
