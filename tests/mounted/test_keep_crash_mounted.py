"""A daemon killed between keeping a file's old bytes and writing the new
ones, or right after the write, loses nothing: after a remount the old
version reads back byte for byte and ``swfs check`` exits 0.

The daemon kills itself at the step under test (``SWFS_TEST_KILL_AT``, a
fault-injection hook of ``swfs.history.writesession``).  On ext4 (or tmpfs)
the old bytes are chunked; with ``SWFS_TEST_REFLINK_DIR`` naming a folder on
xfs or btrfs, the test runs there too, where they are cloned by range
(``BlobStore.clone_fd``)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from blake3 import blake3

from swfs.history.writesession import KILL_AT_ENV
from tests.mountutil import lazy_unmount, needs_fuse, start_mount, swfs, wait_until, workdir

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]

MiB = 1 << 20
# Three pieces of clone_fd's grid, the last one short.
OLD = random.Random(38).randbytes(9 * MiB + 123)
NEW = b"overwritten in place" * 200
AT = MiB + 5


def _shown(mnt: Path, name: str) -> dict[str, str]:
    vdir = mnt / ".versions" / name
    out = {}
    with contextlib.suppress(FileNotFoundError):
        for v in os.listdir(vdir):
            out[v] = os.getxattr(vdir / v, "user.sw.hash").decode()
    return out


def _root(fs: str, request: pytest.FixtureRequest) -> Path:
    if fs == "tmp":
        return workdir()
    where = request.getfixturevalue("reflink_dir")  # tests/conftest.py
    if isinstance(where, str):
        pytest.skip(where)
    d = Path(tempfile.mkdtemp(prefix="swfs-test-", dir=where))
    d.chmod(0o755)
    return d


@pytest.mark.parametrize("fs", ["tmp", "reflink"])
@pytest.mark.parametrize("step", ["kept", "written"])
def test_a_crash_between_keeping_and_writing_loses_nothing(
    step: str, fs: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    root = _root(fs, request)
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "big.bin").write_bytes(OLD)
    old_hash = blake3(OLD).hexdigest()
    monkeypatch.setenv(KILL_AT_ENV, f"{step}:big.bin")
    m = start_mount(src, mnt)
    m2 = None
    try:
        swfs("sync", mnt)
        assert old_hash in _shown(mnt, "big.bin").values()
        with contextlib.suppress(OSError):  # the daemon dies under the write
            fd = os.open(mnt / "big.bin", os.O_WRONLY)
            try:
                os.pwrite(fd, NEW, AT)
            finally:
                os.close(fd)
        wait_until("the daemon to kill itself", lambda: m.proc.poll() is not None, timeout=60)
        lazy_unmount(mnt)
        want = OLD[:AT] + NEW + OLD[AT + len(NEW) :] if step == "written" else OLD
        assert (src / "big.bin").read_bytes() == want
        swfs("check", src)
        monkeypatch.delenv(KILL_AT_ENV)
        m2 = start_mount(src, mnt)
        swfs("sync", mnt, timeout=120)
        shown = _shown(mnt, "big.bin")
        names = [v for v, h in shown.items() if h == old_hash]
        assert names, shown
        assert blake3((mnt / ".versions" / "big.bin" / names[0]).read_bytes()).hexdigest() == (
            old_hash
        )
        assert blake3(want).hexdigest() in shown.values()
        if fs == "reflink":  # kept by clones of ranges (chunk codec c), not copies
            chunks = (src / ".swfs" / "blobs" / "chunks").glob("*/*")
            assert any(c.read_bytes()[:1] == b"c" for c in chunks)
        swfs("check", mnt)
    finally:
        for mount in (m, m2):
            if mount is not None:
                mount.stop()
        lazy_unmount(mnt)
        shutil.rmtree(root, ignore_errors=True)
