"""A world's files are reassembled into memory once, not on every open:
the memory files are kept by hash (``swfs.history.world.MemoryFiles``), least
recently used out beyond their limit, and each open gets its own
descriptor of the same bytes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.history import snapshots as history
from swfs.history import world as world_mod
from swfs.history.world import MemoryFiles, open_world


def _read(fd: int) -> bytes:
    try:
        return os.pread(fd, 1 << 20, 0)
    finally:
        os.close(fd)


def test_a_file_opened_again_is_not_reassembled(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i}.txt": f"file {i} as of the snapshot\n".encode() * 40 for i in range(5)}
    files["twin.txt"] = files["f0.txt"]  # same bytes: one memory file
    for name, data in files.items():
        (src / name).write_bytes(data)
    with Engine.open(src) as ws:
        ws.scan()
        history.take_snapshot(ws.workspace, "then")
    for name in files:
        (src / name).write_bytes(b"changed since\n")
    with open_world(src, src / ".swfs", "then") as world:
        for _ in range(3):
            for name, data in files.items():
                assert _read(world.open_file(name)) == data
        # Reassembled once per distinct blob (a miss), not per open.
        assert world.memory.misses == 5
        assert world.memory.hits == 3 * len(files) - 5
        # Two descriptors at once read independently (pread: no shared offset).
        a, b = world.open_file("f1.txt"), world.open_file("f1.txt")
        assert a != b
        assert _read(a) == _read(b) == files["f1.txt"]
    assert world.memory.used == 0  # closed with the world


def test_memory_files_keep_to_their_limit() -> None:
    def memfile(data: bytes) -> int:
        fd = os.memfd_create("test", os.MFD_CLOEXEC)
        os.pwrite(fd, data, 0)
        return fd

    cache = MemoryFiles(3 * 4096)

    def kept(h: str) -> bool:
        fd = cache.get(h)
        if fd is not None:
            os.close(fd)
        return fd is not None

    for i in range(5):
        _read(cache.put(f"h{i}", 100, memfile(b"x%d" % i)))
    assert cache.used == 3 * 4096
    assert not kept("h0")  # the oldest went
    assert not kept("h1")
    got = cache.get("h2")
    assert got is not None
    assert _read(got) == b"x2"
    _read(cache.put("h5", 100, memfile(b"x5")))  # h3 is now the least recent
    assert not kept("h3")
    assert [kept(h) for h in ("h2", "h4", "h5")] == [True] * 3
    # Too big to keep: handed back as is, nothing evicted for it.
    big = cache.put("big", 4 * 4096, memfile(b"big"))
    assert _read(big) == b"big"
    assert not kept("big")
    assert cache.used == 3 * 4096
    cache.close()
    assert cache.used == 0
    assert world_mod.MEMORY_CACHE_BYTES >= world_mod.MEMORY_FILE_MAX


def test_a_large_file_of_a_world_reads_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too large for a kept memory file, it is reassembled into the blob
    store's cache, unless the disk has no room: then into memory, for that
    open (reading history never needs free space)."""
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(300 << 10)
    (src / "big.bin").write_bytes(data)
    with Engine.open(src) as ws:
        ws.scan()
        history.take_snapshot(ws.workspace, "then")
    monkeypatch.setattr(world_mod, "MEMORY_FILE_MAX", 64 << 10)
    with open_world(src, src / ".swfs", "then") as world:
        refused: list[object] = []

        def full(*args: object) -> None:
            refused.append(args)
            raise OSError(errno.ENOSPC, "No space left on device (writing blob)")

        monkeypatch.setattr(world.blobs, "open", full)  # no room to reassemble into cache/
        assert _read(world.open_file("big.bin")) == data[: 1 << 20]
        assert refused  # it did try the blob store's cache first
        assert world.memory.used == 0  # not kept: it may be large
