"""Real `swfs mount -f` workspaces for the reliability tests.

One helper so that every mounted test tears down the same way: SIGTERM, then
SIGKILL, then a lazy unmount, whatever state the daemon is in.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mountd.launch import mounted_swfs
from swfs.views import sandbox
from tests import evilparsers
from tests.mountutil import lazy_unmount, wait_for_mount, workdir

REPO = Path(__file__).resolve().parent.parent
SWFS = str(Path(sys.executable).with_name("swfs"))

needs_fuse = pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
    reason="needs /dev/fuse and fusermount3",
)


def swfs(
    *args: str | Path, check: bool = True, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [SWFS, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"swfs {args}: exit {proc.returncode}: {proc.stderr}")
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
class RealMount:
    root: Path
    src: Path
    mnt: Path
    proc: subprocess.Popen[bytes]
    args: tuple[str, ...] = field(default=())

    @property
    def log_path(self) -> Path:
        return self.root / "daemon.log"

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
            self.proc.terminate()
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


def start_mount(
    src: Path, mnt: Path, *extra: str, rescan: str = "1", timeout: float = 60
) -> RealMount:
    log = (src.parent / "daemon.log").open("ab")
    proc = subprocess.Popen(
        [SWFS, "mount", "-f", "--rescan-interval", rescan, *extra, str(src), str(mnt)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=daemon_env(src),
    )
    log.close()
    m = RealMount(src.parent, src, mnt, proc, tuple(extra))
    try:
        wait_for_mount(mnt, proc, timeout)
    except BaseException:
        m.stop()
        raise
    return m


@contextlib.contextmanager
def workspace(
    extra: Sequence[str] = (), *, populate: object = None, sync: bool = True
) -> Iterator[RealMount]:
    """A fresh SRC (filled by ``populate(src)``), mounted; always torn down."""
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    src.chmod(0o755)
    mnt.chmod(0o755)
    if callable(populate):
        populate(src)
    m: RealMount | None = None
    try:
        m = start_mount(src, mnt, *extra)
        if sync:
            swfs("sync", mnt)
        yield m
    finally:
        if m is not None:
            m.stop()
        lazy_unmount(mnt)
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def full_store_mount(seed: int) -> Iterator[tuple[RealMount, bytes]]:
    """A mount whose store (``--store``) is a 4 MiB tmpfs, over SRC holding
    ``big.bin`` (6 MiB of random bytes, which the store cannot keep) and
    ``small.txt``; yields the mount and big.bin's bytes.  Needs root."""
    from tests.tmpfs import small_tmpfs

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = workdir()
    src, mnt, store = root / "src", root / "mnt", root / "store"
    for d in (src, mnt, store):
        d.mkdir()
    original = random.Random(seed).randbytes(6 * 1024 * 1024)
    (src / "big.bin").write_bytes(original)
    (src / "small.txt").write_text("small\n")
    m: RealMount | None = None
    try:
        with small_tmpfs(store, "4m", mode="0700"):
            try:
                m = start_mount(src, mnt, "--store", str(store))
                swfs("sync", mnt)
                yield m, original
            finally:
                if m is not None:
                    m.stop()
                lazy_unmount(mnt)
    finally:
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def full_src_mount(size: str, *extra: str) -> Iterator[RealMount]:
    """A mount of a SRC that is a tmpfs of ``size`` (``48m``), its store in
    it (``SRC/.swfs``, the default): filling SRC fills the store's disk
    too.  ``small.txt`` is in SRC at the mount.  Needs root."""
    from tests.tmpfs import small_tmpfs

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    for d in (src, mnt):
        d.mkdir()
    m: RealMount | None = None
    try:
        with small_tmpfs(src, size, mode="0755"):
            (src / "small.txt").write_text("small\n")
            try:
                m = start_mount(src, mnt, *extra)
                swfs("sync", mnt)
                yield m
            finally:
                if m is not None:
                    m.stop()
                lazy_unmount(mnt)
    finally:
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


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
    import json

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

    from tests.mountutil import ensure_test_user

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
