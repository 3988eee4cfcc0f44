"""Real mounts for tests: one way to start a daemon in a subprocess, wait for
its mount, and tear it down (SIGTERM, then SIGKILL, then a lazy unmount,
the daemon always reaped) whatever state it is in, so that no test leaves a
stale mount behind.

Two daemons, one launcher (``launch``): ``start`` serves SRC with the real
engine watched (hook calls logged, faults injected by file name: see
tests/enginewrap.py), ``start_mount`` runs ``swfs mount -f``.  ``workspace``
is a fresh SRC, mounted with ``swfs mount -f``, optionally on a small tmpfs
for the disk-full tests.

A mount starts only in a test that carries the ``mount`` marker (the
conftest tells this module which test runs), so ``make test-fast`` never
mounts.

``python -m tests.mountutil SRC MNT [--calls FILE] [--stale wait]`` serves SRC
at MNT in the foreground with the watched engine, its hook calls logged to
FILE.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from mountd import fusectl
from mountd.launch import mount, mounted_swfs
from mountd.options import MountOptions
from swfs.api import EngineAPI
from swfs.views import sandbox
from tests import evilparsers

REPO = Path(__file__).resolve().parent.parent
SWFS = str(Path(sys.executable).with_name("swfs"))
TEST_USER = "swfs-test"

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
    reason="needs /dev/fuse and fusermount3",
)

# Whether the running test carries the ``mount`` marker; None outside a
# pytest run (the daemon's own process, a script).  Set by tests/conftest.py.
mount_marked: bool | None = None


class MountFailed(Exception):
    pass


def errno_of(fn: Callable[[], object]) -> int:
    """The errno ``fn()`` fails with (0 if it does not fail)."""
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return 0


def wait_until(what: str, fn: Callable[[], bool], timeout: float = 90) -> None:
    """Poll ``fn`` until it holds (a busy machine gets the whole ``timeout``);
    fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def wait_for_mount(mnt: Path, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Until ``mnt`` is an swfs mount that answers; fail early if the daemon dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise MountFailed(f"daemon exited with {proc.returncode} before mounting")
        if mounted_swfs(mnt):
            os.stat(mnt)  # the first request: the kernel has finished INIT
            return
        time.sleep(0.05)
    raise MountFailed(f"{mnt} not mounted after {timeout} s")


def abort_connection(mnt: Path) -> None:
    """After its daemon was killed: abort the FUSE connection of ``mnt``
    (mountd.fusectl, what ``swfs umount`` does to a dead mount), found
    without a request to the mount."""
    conn = fusectl.connection(mnt, fstype=None)
    if conn is not None:
        with contextlib.suppress(fusectl.FusectlError):
            fusectl.abort(conn)


def lazy_unmount(mnt: Path) -> None:
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)


def swfs(
    *args: str | Path, check: bool = True, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [SWFS, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"swfs {args}: exit {proc.returncode}: {proc.stderr}{proc.stdout[-2000:]}"
        )
    return proc


def daemon_env(src: Path | None = None) -> dict[str, str]:
    """The daemon's environment: the test parsers installed; with ``src``,
    the gated test parser's gates (SRC, shown read-only to its sandbox)."""
    gates = {} if src is None else {evilparsers.GATES_ENV: str(src), sandbox.BIND_ENV: str(src)}
    return {
        **os.environ,
        **gates,
        "SWFS_EXTRA_PARSERS": evilparsers.SPEC,
        # The repository first; a caller's own entries after it.
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


@dataclass
class Mount:
    """A daemon serving ``src`` at ``mnt``; its log and (``start``'s daemon)
    its hook calls are files beside ``src``."""

    src: Path
    mnt: Path
    proc: subprocess.Popen[bytes]
    args: tuple[str, ...] = field(default=())

    @property
    def root(self) -> Path:
        return self.src.parent

    @property
    def log_path(self) -> Path:
        return self.root / "daemon.log"

    @property
    def calls_file(self) -> Path:
        return self.root / "calls.jsonl"

    def calls(self, *names: str) -> list[list[str]]:
        """The engine hooks called so far (only those named, if any)."""
        try:
            lines = self.calls_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line]
        return [c for c in out if not names or c[0] in names]

    def clear_calls(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.calls_file.unlink()

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None and mounted_swfs(self.mnt)

    def stop(self) -> None:
        """Unmount and reap the daemon, whatever state it is in."""
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: a clean unmount
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if mounted_swfs(self.mnt):
            lazy_unmount(self.mnt)

    def kill(self) -> None:
        """SIGKILL: the crash case.  The mount point is released lazily."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        lazy_unmount(self.mnt)


def workdir() -> Path:
    """A fresh directory any user can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="swfs-test-"))
    d.chmod(0o755)
    return d


def cleanup_dir(d: Path) -> None:
    if not any(mounted_swfs(p) for p in (d / "mnt",)):
        shutil.rmtree(d, ignore_errors=True)


def launch(
    cmd: Sequence[str | Path],
    src: Path,
    mnt: Path,
    *,
    timeout: float,
    env: dict[str, str] | None,
    args: Sequence[str] = (),
) -> Mount:
    """Run the daemon ``cmd`` (its output in SRC/../daemon.log) and wait
    until it serves ``mnt``; a daemon that does not is stopped and reaped."""
    if mount_marked is False:
        raise AssertionError("a test that mounts must carry the mount marker")
    with (src.parent / "daemon.log").open("ab") as log:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    m = Mount(src, mnt, proc, tuple(args))
    try:
        wait_for_mount(mnt, proc, timeout)
    except BaseException:
        m.stop()
        raise
    return m


def start(
    src: Path,
    mnt: Path,
    *,
    args: Sequence[str] = (),
    timeout: float = 120.0,  # generous: a loaded machine starts Python slowly
    env: dict[str, str] | None = None,
) -> Mount:
    """SRC served at MNT by the watched engine (``python -m tests.mountutil``)."""
    calls = src.parent / "calls.jsonl"
    cmd = [sys.executable, "-m", "tests.mountutil", src, mnt, "--calls", calls, *args]
    return launch(cmd, src, mnt, timeout=timeout, env=env, args=args)


def start_mount(
    src: Path,
    mnt: Path,
    *extra: str,
    rescan: str = "1",
    timeout: float = 60,
    verbose: bool = False,
) -> Mount:
    """SRC served at MNT by ``swfs mount -f`` (``swfs -v`` with ``verbose``)."""
    cmd = [SWFS, *(["-v"] if verbose else []), "mount", "-f", "--rescan-interval", rescan]
    cmd += [*extra, src, mnt]
    return launch(cmd, src, mnt, timeout=timeout, env=daemon_env(src), args=extra)


@contextlib.contextmanager
def workspace(
    extra: Sequence[str] = (),
    *,
    populate: object = None,
    sync: bool = True,
    verbose: bool = False,
    small_disk: tuple[Literal["src", "store"], str] | None = None,
) -> Iterator[Mount]:
    """A fresh SRC (filled by ``populate(src)``), mounted; always torn down.

    With ``small_disk=("store", "4m")`` the store (``--store``) is a tmpfs of
    that size; with ``("src", "48m")`` SRC is, its store in it (``SRC/.swfs``,
    the default), so filling SRC fills the store's disk too.  Needs root."""
    from tests.tmpfs import small_tmpfs

    if small_disk is not None and os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    src.chmod(0o755)
    mnt.chmod(0o755)
    m: Mount | None = None
    try:
        with contextlib.ExitStack() as stack:
            if small_disk is not None:
                where, size = small_disk
                disk = root / where
                disk.mkdir(exist_ok=True)
                stack.enter_context(
                    small_tmpfs(disk, size, mode="0755" if where == "src" else "0700")
                )
                if where == "store":
                    extra = ["--store", str(disk), *extra]
            if callable(populate):
                populate(src)
            try:
                m = start_mount(src, mnt, *extra, verbose=verbose)
                if sync:
                    swfs("sync", mnt)
                yield m
            finally:
                if m is not None:
                    m.stop()
                lazy_unmount(mnt)
    finally:
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def full_store_mount(seed: int) -> Iterator[tuple[Mount, bytes]]:
    """A mount whose store is a 4 MiB tmpfs, over SRC holding ``big.bin``
    (6 MiB of random bytes, which the store cannot keep) and ``small.txt``;
    yields the mount and big.bin's bytes.  Needs root."""
    original = random.Random(seed).randbytes(6 * 1024 * 1024)

    def populate(src: Path) -> None:
        (src / "big.bin").write_bytes(original)
        (src / "small.txt").write_text("small\n")

    with workspace(populate=populate, small_disk=("store", "4m")) as m:
        yield m, original


@contextlib.contextmanager
def full_src_mount(size: str, *extra: str) -> Iterator[Mount]:
    """A mount of a SRC that is a tmpfs of ``size`` (``48m``), its store in
    it: filling SRC fills the store's disk too.  ``small.txt`` is in SRC at
    the mount.  Needs root."""

    def populate(src: Path) -> None:
        (src / "small.txt").write_text("small\n")

    with workspace(extra, populate=populate, small_disk=("src", size)) as m:
        yield m


def fill_disk(directory: Path, name: str) -> int:
    """Write ``directory/name`` (random bytes, 1 MiB at a time, so that
    nothing compresses) until the disk is full; the bytes written."""
    r = random.Random(name)
    written = 0
    fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        while True:
            block = r.randbytes(1 << 20)
            try:
                n = os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            written += n
            if n < len(block):
                break
    finally:
        with contextlib.suppress(OSError):  # the close of a full disk's file may fail too
            os.close(fd)
    return written


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def vm_rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (parse workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


COUNTS_FILE = Path(os.environ.get("SWFS_REL_COUNTS", "/tmp/swfs-reliability-counts.jsonl"))


def report_count(config: pytest.Config, what: str, n: int) -> None:
    """Show an operation count in pytest's output and append it to COUNTS_FILE."""
    line = f"[swfs reliability] {what}: {n}"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)
    with contextlib.suppress(OSError), COUNTS_FILE.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"what": what, "n": n}) + "\n")


def unprivileged_ids() -> tuple[int, int] | None:
    """(uid, gid) of the unprivileged test user, created if need be."""
    import pwd

    user = ensure_test_user()
    if user is None:
        return None
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def run_as(ids: tuple[int, int], fn: Callable[[], object], timeout: float = 30) -> int:
    """Run ``fn()`` in a forked child with the given uid/gid: its errno, or 0."""
    import select

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
            try:
                fn()
            except OSError as exc:
                code = exc.errno or 255
            os.write(w, str(code).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], timeout)
        if not ready:
            os.kill(pid, 9)
            raise AssertionError(f"{fn} as {ids} hung for {timeout} s")
        out = os.read(r, 32)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not out:
        raise AssertionError(f"{fn} as {ids} died without answering")
    code = int(out)
    return code


def ensure_test_user() -> str | None:
    """Create the unprivileged test user (root only); None when impossible."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return None
    if subprocess.run(["id", TEST_USER], capture_output=True, check=False).returncode != 0:
        proc = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/bin/sh", TEST_USER],
            capture_output=True,
            check=False,
        )
        if proc.returncode not in (0, 9):  # 9: exists (a concurrent test made it)
            return None
    return TEST_USER


def as_user(user: str, *cmd: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *cmd], capture_output=True, check=False, timeout=30
    )


def _engine_factory(
    src: Path, calls: Path | None, crash_after: float | None
) -> AbstractContextManager[EngineAPI]:
    """The real engine, watched (hook calls logged, faults injected by name:
    see tests/enginewrap.py)."""
    from swfs.engine import Engine
    from tests.enginewrap import watched

    return watched(lambda: Engine.open(src), calls=calls, crash_after=crash_after)()  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.mountutil")
    p.add_argument("src", type=Path)
    p.add_argument("mnt", type=Path)
    p.add_argument("--calls", type=Path)
    p.add_argument("--stale", choices=("serve", "wait"), default="serve")
    p.add_argument("--debug", action="store_true")
    p.add_argument("--crash-after", type=float, help="background work crashes after N seconds")
    p.add_argument("--wait-timeout", type=float, help="seconds a read of a pending unit waits")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if a.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    waits = {} if a.wait_timeout is None else {"pending_wait": a.wait_timeout}
    mount(
        lambda: _engine_factory(a.src, a.calls, a.crash_after),
        a.src,
        a.mnt,
        MountOptions(stale=a.stale, debug=a.debug, **waits),
        foreground=True,
        log_file=None,
    )


if __name__ == "__main__":
    main()
