"""Through a real mount: the hash recorded at close after a one-byte edit
of a big file, after a change made in SRC behind an open writer, and for a
new sparse file and its edits, is blake3 of the file's bytes (read from SRC
by blake3-py alone), while the daemon's dump shows the edits were hashed by
leaves (swfs.treecache)."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from mountd.dump import MARK
from tests.b3lib import library_path, using
from tests.mountutil import Mount, swfs, workspace

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
        reason="needs /dev/fuse and fusermount3",
    ),
]

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return library_path(tmp_path_factory)


def poll(cond: Callable[[], bool], what: str, bound: float = 120.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def truth(path: Path) -> str:
    return blake3.blake3(path.read_bytes()).hexdigest()


def recorded(path: Path) -> str:
    return os.getxattr(path, "user.sw.hash").decode()


def assert_recorded(m: Mount, rel: str) -> None:
    swfs("sync", m.mnt)
    got, want = recorded(m.mnt / rel), truth(m.src / rel)
    assert got.endswith(want), f"{rel}: recorded {got}, bytes hash to {want}"


def dump(m: Mount) -> str:
    """The daemon's log after a fresh SIGUSR1 dump."""
    ends = m.log().count(f"end of {MARK}")
    os.kill(m.proc.pid, signal.SIGUSR1)
    poll(lambda: m.log().count(f"end of {MARK}") > ends, "the daemon's dump")
    return m.log()


def incremental_hashes(m: Mount) -> int:
    """How many close hashes the daemon made by leaves (its SIGUSR1 dump)."""
    found = re.findall(r"close hash by leaves: .*incremental=(\d+)", dump(m))
    assert found, m.log()[-2000:]
    return int(found[-1])


def populate(src: Path) -> None:
    (src / "big.bin").write_bytes(random.Random(7).randbytes(24 * MiB + 5))


def test_close_hashes_by_leaves_are_blake3_of_the_bytes(lib_path: Path) -> None:
    with using(str(lib_path)), workspace(["--version-interval", "0"], populate=populate) as m:
        assert_recorded(m, "big.bin")  # hashed whole by the first scan
        # A one-byte edit.
        with open(m.mnt / "big.bin", "r+b") as f:
            f.seek(13 * MiB + 5)
            f.write(b"!")
        assert_recorded(m, "big.bin")
        assert incremental_hashes(m) >= 1

        # A change in SRC behind an open writer, in a leaf it never wrote.
        fd = os.open(m.mnt / "big.bin", os.O_RDWR)
        try:
            os.pwrite(fd, b"through the mount", 1 * MiB)
            behind = os.open(m.src / "big.bin", os.O_RDWR)
            try:
                os.pwrite(behind, b"behind the mount", 20 * MiB)
            finally:
                os.close(behind)
            os.pwrite(fd, b"through the mount again", 2 * MiB)
        finally:
            os.close(fd)
        assert_recorded(m, "big.bin")

        # A new sparse file, then edits in place.
        disk = m.mnt / "disk.img"
        fd = os.open(disk, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 256 * MiB)
            os.pwrite(fd, b"boot sector", 0)
            os.pwrite(fd, b"superblock", 128 * MiB)
        finally:
            os.close(fd)
        assert_recorded(m, "disk.img")
        assert os.stat(m.src / "disk.img").st_blocks * 512 < 8 * MiB  # still sparse
        before = incremental_hashes(m)
        fd = os.open(disk, os.O_RDWR)
        try:
            os.pwrite(fd, b"journal", 256 * MiB - 4096)
        finally:
            os.close(fd)
        assert_recorded(m, "disk.img")
        fd = os.open(disk, os.O_RDWR)
        try:
            os.ftruncate(fd, 200 * MiB + 3)
            os.pwrite(fd, b"x", 100 * MiB)
        finally:
            os.close(fd)
        assert_recorded(m, "disk.img")
        assert incremental_hashes(m) >= before + 2


def test_a_kernel_passthrough_writer_is_hashed_whole(lib_path: Path) -> None:
    """Writes the kernel passes through (where it does: root, libfuse 3.17)
    never reach the write session nor its leaf cache: the close must see
    that by the stat and hash whole."""
    from mountd.fastpath import passthrough_unavailable

    why = passthrough_unavailable()
    if why is not None:
        pytest.skip(f"no kernel passthrough here: {why}")
    extra = ["--passthrough", "on", "--version-interval", "0"]
    with using(str(lib_path)), workspace(extra, populate=populate) as m:
        assert_recorded(m, "big.bin")  # hashed by leaves: their CVs are kept
        with open(m.mnt / "big.bin", "rb") as reader:  # passed through (big)
            assert reader.read(5) == (m.src / "big.bin").read_bytes()[:5]
            with open(m.mnt / "big.bin", "r+b") as writer:  # so is its writer
                writer.seek(9 * MiB + 1)
                writer.write(b"passed through")
        assert_recorded(m, "big.bin")
        assert (m.src / "big.bin").read_bytes()[9 * MiB + 1 :].startswith(b"passed through")
