"""fallocate(2), SEEK_DATA/SEEK_HOLE and O_TMPFILE through a real mount
(issue 36), on a default mount, a ``--staged`` one and one with
``--passthrough=off``, driven by the tools that use them: ``fallocate(1)``,
``os.posix_fallocate``, ``cp``, ``tar -S``, ``os.lseek`` and an O_TMPFILE
file linked in with linkat.

Each change is made in a plain folder of the same file system too, and the
mount must give the same bytes and holes.  History: a fallocate that changes
what the file reads as (a hole punched, a range zeroed, the size grown) is a
write: the version before it keeps its bytes, and a new one is recorded at
close; an allocation within the size records nothing.  A linked-in
O_TMPFILE file is an ordinary recorded file; one never linked leaves
nothing behind.  ``swfs check`` passes after each.

Needs the pyfuse3 ``make install`` builds (vendor/pyfuse3);
with stock pyfuse3 the mount answers EOPNOTSUPP as before and these skip.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mountd import binding
from swfs.store.fsutil import (
    FALLOC_FL_KEEP_SIZE,
    FALLOC_FL_PUNCH_HOLE,
    FALLOC_FL_ZERO_RANGE,
    hash_bytes,
)
from tests.mounted.test_walk_requests import _counts, _delta
from tests.mountutil import Mount, needs_fuse, swfs, workdir, workspace
from tests.sparseutil import SLACK, MiB, allocated, data_ranges, read_hash

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(300),
    needs_fuse,
    pytest.mark.skipif(
        not binding.FILE_OPS,
        reason="stock pyfuse3: no fallocate or lseek (make install builds vendor/pyfuse3)",
    ),
]

KINDS = {
    "default": (),
    "staged": ("--staged",),
    "passthrough-off": ("--passthrough", "off"),
}
ORIGINAL = os.urandom(3 * MiB + 123)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000


def poll(cond: Callable[[], object], what: str, bound: float = 120.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {bound} s: {what}")
        time.sleep(0.05)


@pytest.fixture(params=list(KINDS))
def mounted(request: pytest.FixtureRequest) -> Iterator[Mount]:
    def populate(src: Path) -> None:
        (src / "data.bin").write_bytes(ORIGINAL)
        (src / "notes").mkdir()
        (src / "notes" / "readme.md").write_text("# Readme\nthe figure is 42\n")

    with workspace(("--version-interval", "0", *KINDS[request.param]), populate=populate) as m:
        yield m


@pytest.fixture
def plain() -> Iterator[Path]:
    """A plain folder on the file system the mounts' SRC is on."""
    d = workdir()
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def versions(m: Mount, rel: str) -> list[str]:
    d = m.mnt / ".versions" / rel
    return sorted(os.listdir(d)) if d.is_dir() else []


def settled_versions(m: Mount, rel: str) -> list[str]:
    swfs("sync", m.mnt)
    return versions(m, rel)


def check(m: Mount) -> None:
    proc = swfs("check", m.mnt, check=False, timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{m.log()[-3000:]}"


def fallocate_tool(path: Path, *args: str) -> None:
    subprocess.run(["fallocate", *args, str(path)], check=True, capture_output=True, timeout=60)


def fallocate_fd(fd: int, mode: int, off: int, length: int) -> None:
    if _libc.fallocate(fd, mode, off, length) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def link_in(fd: int, path: Path) -> None:
    """linkat(fd, "", AT_EMPTY_PATH) (root, or CAP_DAC_READ_SEARCH), else
    through /proc/self/fd."""
    if _libc.linkat(fd, b"", AT_FDCWD, os.fsencode(path), AT_EMPTY_PATH) == 0:
        return
    os.link(f"/proc/self/fd/{fd}", path, follow_symlinks=True)


def proc_link_works(folder: Path) -> bool:
    """Whether linkat of /proc/self/fd/N works here at all (a sandbox's
    /proc may answer EXDEV for any folder)."""
    fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        os.link(f"/proc/self/fd/{fd}", folder / "probe", follow_symlinks=True)
    except OSError:
        return False
    finally:
        os.close(fd)
    os.unlink(folder / "probe")
    return True


@pytest.mark.skipif(shutil.which("fallocate") is None, reason="needs fallocate(1) (util-linux)")
def test_fallocate_modes_record_as_writes(mounted: Mount, plain: Path) -> None:
    m = mounted
    mine, theirs = m.mnt / "data.bin", plain / "data.bin"
    theirs.write_bytes(ORIGINAL)
    assert settled_versions(m, "data.bin") == [f"0001-{hash_bytes(ORIGINAL)[:16]}.bin"]
    states = [ORIGINAL]

    def step(what: str, *args: str, changes: bool = True) -> None:
        for path in (theirs, mine):
            fallocate_tool(path, *args)
        want = theirs.read_bytes()
        assert mine.read_bytes() == want, what
        assert data_ranges(mine) == data_ranges(theirs), what
        if not changes:
            assert want == states[-1]
            assert settled_versions(m, "data.bin")[-1].startswith(f"{len(states):04d}-"), what
            return
        states.append(want)
        n = len(states)
        poll(lambda: len(versions(m, "data.bin")) == n, f"version {n} after {what}")
        got = versions(m, "data.bin")
        assert got[-1].startswith(f"{n:04d}-{hash_bytes(want)[:16]}"), (what, got)
        # Every earlier version kept its bytes (kept before the change).
        for i, name in enumerate(got):
            assert (m.mnt / ".versions" / "data.bin" / name).read_bytes() == states[i], (what, i)

    # An allocation within the size (and past it, keeping the size): no write.
    step("allocate, keep size", "-n", "-o", "0", "-l", str(8 * MiB), changes=False)
    step("punch a hole", "-p", "-o", str(MiB), "-l", str(256 * 1024))
    step("zero a range", "-z", "-o", str(2 * MiB + 4096), "-l", str(64 * 1024))
    step("allocate, growing", "-o", "0", "-l", str(5 * MiB))
    assert mine.stat().st_size == 5 * MiB

    # os.posix_fallocate grows a file as fallocate(1) does.
    for path in (theirs, mine):
        fd = os.open(path, os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 6 * MiB, MiB)
        finally:
            os.close(fd)
    states.append(theirs.read_bytes())
    assert mine.read_bytes() == states[-1]
    poll(lambda: len(versions(m, "data.bin")) == len(states), "a version after posix_fallocate")

    # A punched hole in a file written and not yet closed: one version at close.
    fd = os.open(mine, os.O_RDWR)
    try:
        os.pwrite(fd, b"written first", 0)
        fallocate_fd(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4 * MiB, 8192)
        fallocate_fd(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 3 * MiB, 100)
    finally:
        os.close(fd)
    want = bytearray(states[-1])
    want[0:13] = b"written first"
    want[4 * MiB : 4 * MiB + 8192] = bytes(8192)
    want[3 * MiB : 3 * MiB + 100] = bytes(100)
    assert mine.read_bytes() == bytes(want)
    states.append(bytes(want))
    poll(lambda: len(versions(m, "data.bin")) == len(states), "one version for the session")
    assert settled_versions(m, "data.bin")[-1].startswith(
        f"{len(states):04d}-{hash_bytes(bytes(want))[:16]}"
    )
    check(m)
    assert m.alive()


def test_seek_hole_and_data_serve_sparse_copies(mounted: Mount, plain: Path) -> None:
    m = mounted
    size = 64 * MiB
    pieces = {0: b"head" * 1000, 32 * MiB + 17: os.urandom(100_000), size - 5: b"tail!"}
    for folder in (m.mnt, plain):
        fd = os.open(folder / "disk.img", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
            for off, data in pieces.items():
                os.pwrite(fd, data, off)
        finally:
            os.close(fd)
    mine, theirs = m.mnt / "disk.img", plain / "disk.img"
    ranges = data_ranges(theirs)
    assert len(ranges) > 1  # the plain folder's file system has holes to find
    assert data_ranges(mine) == ranges

    fd = os.open(mine, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_HOLE) == ranges[0][1]
        assert os.lseek(fd, ranges[0][1], os.SEEK_DATA) == ranges[1][0]
        with pytest.raises(OSError, match="No such device or address") as exc:
            os.lseek(fd, size, os.SEEK_DATA)
        assert exc.value.errno == errno.ENXIO
    finally:
        os.close(fd)

    # cp: with --sparse=always it makes holes of zeros it reads; by default
    # (auto) only where SEEK_HOLE says the source has them.
    for how in ("--sparse=always", "--sparse=auto"):
        copy = plain / f"copy{how}.img"
        before = _counts(m)
        subprocess.run(["cp", how, str(mine), str(copy)], check=True, timeout=120)
        assert read_hash(copy) == read_hash(theirs), how
        assert allocated(copy) < SLACK, how
        asked = _delta(before, _counts(m))
        assert asked.get("lseek", 0) > 0, f"cp {how} asked no SEEK_DATA"
        # Each answered in pyfuse3's callback, without a coroutine (mountd.reply).
        assert asked.get("nowait_lseek", 0) == asked["lseek"], asked

    # tar -S: the archive holds the data, not 64 MiB of zeros; it found the
    # holes by SEEK_HOLE.
    archive = plain / "disk.tar"
    before = _counts(m)
    subprocess.run(
        ["tar", "-S", "-cf", str(archive), "-C", str(m.mnt), "disk.img"], check=True, timeout=120
    )
    assert archive.stat().st_size < SLACK
    assert _delta(before, _counts(m)).get("lseek", 0) > 0, "tar -S asked no SEEK_HOLE"
    out = plain / "out"
    out.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    assert read_hash(out / "disk.img") == read_hash(theirs)

    poll(lambda: len(versions(m, "disk.img")) >= 1, "a version of the sparse file")
    # A generated file has no holes: data up to its size.
    swfs("sync", m.mnt)
    unit = m.mnt / ".parsed" / "notes" / "readme.md" / "content.txt"
    fd = os.open(unit, os.O_RDONLY)
    try:
        n = os.fstat(fd).st_size
        assert (os.lseek(fd, 0, os.SEEK_DATA), os.lseek(fd, 0, os.SEEK_HOLE)) == (0, n)
    finally:
        os.close(fd)
    check(m)


def test_tmpfile_linked_in_is_recorded_and_one_never_linked_leaves_nothing(
    mounted: Mount, plain: Path
) -> None:
    m = mounted
    if not binding.TMPFILE:
        # Built against a libfuse before 3.17: refused, as by a file system
        # without O_TMPFILE (programs then fall back to a named temp file).
        with pytest.raises(OSError, match="not supported") as exc:
            os.close(os.open(m.mnt / "notes", os.O_TMPFILE | os.O_WRONLY, 0o600))
        assert exc.value.errno == errno.EOPNOTSUPP
        pytest.skip("pyfuse3 built against a libfuse without tmpfile (3.17 needed)")
    staged = "--staged" in m.args
    folder = m.mnt / "notes"
    before = sorted(os.listdir(m.src / "notes"))

    # Written, linked in, written more, closed: one version, the final bytes.
    fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o640)
    try:
        assert os.fstat(fd).st_nlink == 0
        os.write(fd, b"made without a name\n")
        link_in(fd, folder / "made.txt")
        os.write(fd, b"and written after its link\n")
    finally:
        os.close(fd)
    made = b"made without a name\nand written after its link\n"
    assert (folder / "made.txt").read_bytes() == made
    assert (folder / "made.txt").stat().st_mode & 0o777 == 0o640 & ~_umask()
    poll(lambda: versions(m, "notes/made.txt"), "a version of the linked-in file")
    assert settled_versions(m, "notes/made.txt") == [f"0001-{hash_bytes(made)[:16]}.txt"]

    # fsync'd before its link: still recorded once it has a name.
    fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"synced first\n")
        os.fsync(fd)
        link_in(fd, folder / "synced.txt")
    finally:
        os.close(fd)
    poll(lambda: versions(m, "notes/synced.txt"), "a version of the file synced before its link")
    synced = hash_bytes(b"synced first\n")
    assert versions(m, "notes/synced.txt")[0].startswith(f"0001-{synced[:16]}")

    # The way most programs link one in, where this machine's /proc allows it.
    if proc_link_works(plain):
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
        try:
            os.write(fd, b"through /proc\n")
            os.link(f"/proc/self/fd/{fd}", folder / "proc.txt", follow_symlinks=True)
        finally:
            os.close(fd)
        poll(lambda: versions(m, "notes/proc.txt"), "a version of the file linked via /proc")

    # Never linked: nothing left in the tree, the store or the history.
    fd = os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    try:
        os.write(fd, os.urandom(2 * MiB))
        os.fsync(fd)
    finally:
        os.close(fd)
    shown = sorted(os.listdir(folder))
    assert {"made.txt", "synced.txt"} <= set(shown)
    assert len(shown) == len(before) + (3 if (folder / "proc.txt").exists() else 2)
    # O_EXCL: never to be linked (the kernel refuses, as on any file system).
    fd = os.open(folder, os.O_TMPFILE | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with pytest.raises(OSError, match="No such file|cross-device"):
            link_in(fd, folder / "excl.txt")
    finally:
        os.close(fd)
    assert not (folder / "excl.txt").exists()
    check(m)

    if staged:
        # Held in the store until commit; then an ordinary file of SRC.
        assert sorted(os.listdir(m.src / "notes")) == before
        swfs("commit", m.mnt)
        assert (m.src / "notes" / "made.txt").read_bytes() == made
        check(m)
    else:
        assert (m.src / "notes" / "made.txt").read_bytes() == made
        assert sorted(os.listdir(m.src / "notes")) == shown
    assert m.alive()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_passthrough_writer_fallocate_and_seek_reach_the_daemon() -> None:
    """With kernel passthrough on, a large binary file's reads and writes
    bypass the daemon; fallocate and SEEK_DATA/SEEK_HOLE still come to it
    (the kernel has no passthrough of either), so a punched hole is kept in
    history like any write."""
    from tests.mounted.test_passthrough_mounted import BIG, mounted, passthrough_state

    with mounted("--passthrough", "on") as m:
        state = passthrough_state(m)
        if state != "on":
            pytest.skip(f"kernel passthrough is off here: {state}")
        path = m.mnt / "big.bin"
        assert len(versions(m, "big.bin")) == 1
        before = _counts(m)
        reader = os.open(path, os.O_RDONLY)  # passed through (binary, > 128 KiB)
        try:
            writer = os.open(path, os.O_WRONLY)  # must pass through too
            try:
                fallocate_fd(writer, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MiB, 256 * 1024)
                hole = os.lseek(reader, 0, os.SEEK_HOLE)
                assert hole <= MiB
                assert os.lseek(reader, hole, os.SEEK_DATA) == MiB + 256 * 1024
            finally:
                os.close(writer)
            assert os.pread(reader, 16, MiB) == bytes(16)
        finally:
            os.close(reader)
        delta = _delta(before, _counts(m))
        assert delta.get("fallocate", 0) >= 1, delta
        assert delta.get("lseek", 0) >= 2, delta
        want = bytearray(BIG)
        want[MiB : MiB + 256 * 1024] = bytes(256 * 1024)
        poll(lambda: len(versions(m, "big.bin")) == 2, "a version after the punched hole")
        got = versions(m, "big.bin")
        assert got[1].startswith(f"0002-{hash_bytes(bytes(want))[:16]}")
        assert (m.mnt / ".versions" / "big.bin" / got[0]).read_bytes() == BIG
        assert "Traceback" not in m.log()
        check(m)
