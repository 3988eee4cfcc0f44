"""Through a real mount: a version costs what changed, and reads back exact."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from swfs.api import STORE_NAME
from swfs.store.blobs import BlobStore
from tests.mountutil import workspace

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
        reason="needs /dev/fuse and fusermount3",
    ),
]

MiB = 1024 * 1024


def poll(cond: Callable[[], bool], what: str, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_ten_one_byte_edits_cost_a_fraction_and_read_back_exact() -> None:
    original = random.Random(20).randbytes(10 * MiB)

    def populate(src: Path) -> None:
        (src / "big.bin").write_bytes(original)

    # Every close a version: the burst policy is tested on its own.
    with workspace(["--version-interval", "0"], populate=populate) as m:
        blobs = BlobStore(m.src / STORE_NAME / "blobs")
        vdir = m.mnt / ".versions" / "big.bin"
        expected = [original]
        content = bytearray(original)
        rng = random.Random(21)
        for i in range(10):
            at = rng.randrange(len(content))
            content[at] ^= 0xA5
            with open(m.mnt / "big.bin", "r+b") as f:
                f.seek(at)
                f.write(bytes([content[at]]))
            expected.append(bytes(content))
            poll(lambda n=i + 2: len(os.listdir(vdir)) >= n, f"version {i + 2}")
        names = sorted(os.listdir(vdir))
        assert len(names) == 11, names
        for name, data in zip(names, expected, strict=True):
            got = (vdir / name).read_bytes()
            assert len(got) == len(data), name
            assert got == data, name
            assert (
                os.getxattr(vdir / name, "user.sw.hash")
                .decode()
                .endswith(blake3.blake3(data).hexdigest())
            )
        # Ten preserved versions (the eleventh is the file itself): the first
        # costs the whole incompressible file once, the other nine a chunk or
        # two each, far from the 100 MiB of whole copies.
        stored = blobs.total_bytes()
        assert stored < 10 * MiB + 9 * 1 * MiB, stored
        assert stored - 10 * MiB < 5 * MiB, stored


def test_sparse_file_is_kept_sparse_and_reads_back() -> None:
    size = 2 * 1024 * MiB
    with workspace(["--version-interval", "0"]) as m:
        path = m.mnt / "disk.img"
        with open(path, "wb") as f:
            f.truncate(size)
            f.seek(MiB)
            f.write(b"first data")
        with open(path, "r+b") as f:
            f.seek(size - 100)
            f.write(b"second data")
        vdir = m.mnt / ".versions" / "disk.img"
        poll(lambda: len(os.listdir(vdir)) >= 2, "two versions")
        blobs = BlobStore(m.src / STORE_NAME / "blobs")
        assert blobs.total_bytes() < 1 * MiB  # not 2 GiB
        first = vdir / sorted(os.listdir(vdir))[0]
        with open(first, "rb") as f:
            f.seek(MiB)
            assert f.read(10) == b"first data"
            f.seek(size - 100)
            assert f.read(100) == bytes(100)
        assert first.stat().st_size == size
