"""Through a real mount: a sparse file keeps its holes in SRC and in the
store, and its versions read back byte for byte, holes included, from
``.versions`` and through ``swfs restore``."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

import pytest

from swfs.api import STORE_NAME
from swfs.store.blobs import BlobStore
from tests.mountutil import swfs, workspace
from tests.sparseutil import SLACK, MiB, allocated, holds, read_hash, stream_hash

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
        reason="needs /dev/fuse and fusermount3",
    ),
]

SIZE = 256 * MiB
V1 = {0: b"boot sector" * 40, 100 * MiB + 777: os.urandom(300_000), SIZE - 7: b"the end"}
V2 = {**V1, 180 * MiB: b"second write"}


def poll(cond: Callable[[], bool], what: str, bound: float = 120.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_sparse_file_through_the_mount_keeps_its_holes() -> None:
    with workspace(["--version-interval", "0"]) as m:
        path = m.mnt / "disk.img"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, SIZE)
            for offset, data in V1.items():
                os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        vdir = m.mnt / ".versions" / "disk.img"
        poll(lambda: vdir.is_dir() and len(os.listdir(vdir)) >= 1, "version 1")
        # SRC holds the data, not 256 MiB of zeros.
        assert os.stat(m.src / "disk.img").st_size == SIZE
        assert allocated(m.src / "disk.img") < SLACK

        fd = os.open(path, os.O_WRONLY)  # in place: version 1 is kept first
        try:
            for offset, data in V2.items():
                if offset not in V1:
                    os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
        poll(lambda: len(os.listdir(vdir)) >= 2, "version 2")
        names = sorted(os.listdir(vdir))
        first, second = vdir / names[0], vdir / names[1]
        h1, h2 = stream_hash(SIZE, V1), stream_hash(SIZE, V2)
        # The recorded names are blake3 of the full streams, zeros included.
        assert os.getxattr(first, "user.sw.hash").decode().endswith(h1)
        assert os.getxattr(second, "user.sw.hash").decode().endswith(h2)
        assert os.getxattr(path, "user.sw.hash").decode().endswith(h2)

        # The kept version holds no hole bytes.
        blobs = BlobStore(m.src / STORE_NAME / "blobs")
        manifest = blobs.manifest(h1)
        assert manifest is not None
        assert manifest.size == SIZE
        assert sum(e.length for e in manifest.extents) < 1 * MiB
        assert blobs.total_bytes() < 1 * MiB

        # .versions reads it back byte for byte; its reassembled copy is sparse.
        assert os.stat(first).st_size == SIZE
        holds(first, SIZE, V1)
        assert read_hash(first) == h1
        assert allocated(blobs.cache / h1) < SLACK

        # A restore puts it back with its holes.
        swfs("restore", m.mnt, "disk.img@1", timeout=240)
        poll(lambda: read_hash(m.src / "disk.img") == h1, "the restored bytes")
        holds(m.src / "disk.img", SIZE, V1)
        assert allocated(m.src / "disk.img") < SLACK
        holds(path, SIZE, V1)  # and the mount shows it
