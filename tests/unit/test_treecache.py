"""The close hash by what changed (swfs.treecache): after writes and
truncates made through it, a file is rehashed by the leaves they touched,
and the result is blake3 of the file's bytes; any change made some other
way (behind the mount: a plain write, a truncate, a change while a hash
runs) is seen, and the file is hashed whole.  The reference is always
``blake3.blake3(bytes)`` of the file as read."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from swfs.store import b3tree, treecache
from swfs.store.fsutil import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE
from tests.b3lib import library_path, using
from tests.sparseutil import make_sparse

MiB = 1024 * 1024
LEAF = b3tree.LEAF


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return library_path(tmp_path_factory)


@pytest.fixture(autouse=True)
def lib(lib_path: Path) -> Iterator[b3tree.Library]:
    with using(str(lib_path)):
        got = b3tree.library()
        assert got is not None, b3tree.why_not()
        yield got


class File:
    """A file open for writing, hashed by a cache of its own."""

    def __init__(self, path: Path, cache: treecache.TreeCache) -> None:
        self.path = path
        self.cache = cache
        self.fd = os.open(path, os.O_RDWR)
        st = os.fstat(self.fd)
        self.key = (st.st_dev, st.st_ino)

    def close(self) -> None:
        os.close(self.fd)

    def write(self, off: int, data: bytes) -> None:
        assert self.cache.write(self.key, self.fd, off, data) == len(data)

    def truncate(self, size: int) -> None:
        self.cache.truncate(self.key, self.fd, size)

    def fallocate(self, mode: int, off: int, length: int) -> None:
        self.cache.fallocate(self.key, self.fd, mode, off, length)

    def hash(self) -> str:
        return self.cache.hash_fd(self.fd)

    def truth(self) -> str:
        return blake3.blake3(self.path.read_bytes()).hexdigest()


@pytest.fixture
def cache() -> treecache.TreeCache:
    return treecache.TreeCache()


def opened(tmp_path: Path, cache: treecache.TreeCache, size: int, seed: int = 0) -> File:
    path = tmp_path / f"f{seed}"
    path.write_bytes(random.Random(seed).randbytes(size))
    return File(path, cache)


def test_a_one_byte_edit_rehashes_one_leaf(
    tmp_path: Path, cache: treecache.TreeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = opened(tmp_path, cache, 32 * MiB + 5)
    try:
        assert f.hash() == f.truth()
        assert cache.cached(f.key) == f.truth()
        read: list[int] = []
        real = os.preadv

        def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
            n = real(fd, buffers, offset)
            read.append(n)
            return n

        monkeypatch.setattr(os, "preadv", preadv)
        leaves = cache.stats["leaves"]
        f.write(17 * MiB + 3, b"!")
        assert f.hash() == f.truth()
        assert cache.stats["incremental"] == 1
        assert cache.stats["leaves"] - leaves == 1
        assert sum(read) == LEAF
    finally:
        f.close()


def test_random_writes_and_truncates_hash_to_blake3_of_the_bytes(
    tmp_path: Path, cache: treecache.TreeCache
) -> None:
    rng = random.Random(20261201)
    for round_ in range(6):
        path = tmp_path / f"r{round_}"
        size = rng.randrange(5 * MiB, 40 * MiB)
        if round_ % 2:
            make_sparse(path, size, {rng.randrange(size): b"island" * 100})
        else:
            path.write_bytes(rng.randbytes(size))
        f = File(path, cache)
        try:
            assert f.hash() == f.truth()
            for _ in range(25):
                size = os.fstat(f.fd).st_size
                op = rng.random()
                if op < 0.6:
                    n = rng.choice([1, 7, 1024, 4096, rng.randrange(1, 3 * MiB)])
                    f.write(rng.randrange(size + LEAF), rng.randbytes(n))
                elif op < 0.8:
                    f.truncate(rng.randrange(size // 2, size + 5 * MiB))
                else:
                    f.write(size, rng.randbytes(rng.randrange(1, 2 * LEAF)))  # append
                if rng.random() < 0.5:
                    assert f.hash() == f.truth()
            assert f.hash() == f.truth()
        finally:
            f.close()
    # Most of those hashes reused leaves: the test exercised the cache.
    assert cache.stats["incremental"] > 40


def test_fallocate_punch_zero_and_grow_hash_to_blake3_of_the_bytes(
    tmp_path: Path, cache: treecache.TreeCache
) -> None:
    """fallocate through the cache (the write session's, for fallocate(2) on
    the mount): holes punched, ranges zeroed, the size grown or kept; each
    hash reuses the leaves it did not touch."""
    keep, punch, zero = FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE
    modes = [0, keep, punch | keep, zero, zero | keep]
    rng = random.Random(20261205)
    f = opened(tmp_path, cache, 9 * MiB + 77, seed=5)
    try:
        assert f.hash() == f.truth()
        for _ in range(30):
            size = os.fstat(f.fd).st_size
            mode = rng.choice(modes)
            off = rng.randrange(size + 2 * LEAF)
            length = rng.choice([1, 4096, LEAF, rng.randrange(1, 3 * MiB)])
            try:
                f.fallocate(mode, off, length)
            except OSError as exc:  # a mode this file system lacks
                pytest.skip(f"fallocate mode {mode:#x}: {exc}")
            assert f.hash() == f.truth()
    finally:
        f.close()
    assert cache.stats["incremental"] > 20


def test_a_write_behind_the_cache_is_seen(tmp_path: Path, cache: treecache.TreeCache) -> None:
    f = opened(tmp_path, cache, 24 * MiB)
    try:
        f.hash()
        f.write(1 * MiB, b"through the mount")
        os.pwrite(f.fd, b"behind the mount", 20 * MiB)  # another leaf, same size
        f.write(2 * MiB, b"through the mount again")
        assert f.hash() == f.truth()
        assert cache.stats["incremental"] == 0
        # And after a whole hash, the next edit is by leaves again.
        f.write(3 * MiB, b"x")
        assert f.hash() == f.truth()
        assert cache.stats["incremental"] == 1
    finally:
        f.close()


def test_a_change_after_the_last_write_is_seen(tmp_path: Path, cache: treecache.TreeCache) -> None:
    f = opened(tmp_path, cache, 24 * MiB)
    other = os.open(f.path, os.O_RDWR)
    try:
        f.hash()
        f.write(1 * MiB, b"through the mount")
        os.pwrite(other, b"behind", 22 * MiB + 9)
        assert f.hash() == f.truth()
        f.write(1 * MiB, b"again")
        os.ftruncate(other, 23 * MiB)  # a truncate by someone else
        assert f.hash() == f.truth()
        f.write(1 * MiB, b"and again")
        os.pwrite(other, b"same size", 5 * MiB)
        assert f.hash() == f.truth()
        assert cache.stats["incremental"] == 0
    finally:
        os.close(other)
        f.close()


def test_a_change_between_hash_and_first_write_is_seen(
    tmp_path: Path, cache: treecache.TreeCache
) -> None:
    f = opened(tmp_path, cache, 24 * MiB)
    try:
        f.hash()
        with open(f.path, "r+b") as other:
            other.seek(10 * MiB)
            other.write(b"edited in SRC")
        f.write(0, b"then through the mount")
        assert f.hash() == f.truth()
    finally:
        f.close()


def test_a_write_while_hashing_is_never_cached(
    tmp_path: Path, cache: treecache.TreeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = opened(tmp_path, cache, 24 * MiB)
    try:
        f.hash()
        first = cache.cached(f.key)
        real = b3tree.fill_leaves
        done: list[bool] = []

        def fill(*args: object, **kw: object) -> None:
            real(*args, **kw)  # type: ignore[arg-type]
            if not done:
                done.append(True)
                f.write(6 * MiB, b"written while hashed")

        monkeypatch.setattr(b3tree, "fill_leaves", fill)
        f.write(1, b"edit")
        torn = f.hash()  # of no version: the engine's stat check drops it
        assert torn != f.truth()
        assert cache.cached(f.key) == first  # not stored
        monkeypatch.setattr(b3tree, "fill_leaves", real)
        assert f.hash() == f.truth()
    finally:
        f.close()


def test_a_new_inode_under_the_same_number_is_not_confused(
    tmp_path: Path, cache: treecache.TreeCache
) -> None:
    f = opened(tmp_path, cache, 12 * MiB, seed=1)
    f.hash()
    f.close()
    # Same path, same size, same inode number if the filesystem reuses
    # it: only the stat (ctime) tells them apart.
    os.unlink(f.path)
    f.path.write_bytes(random.Random(2).randbytes(12 * MiB))
    g = File(f.path, cache)
    try:
        g.write(0, b"x")
        assert g.hash() == g.truth()
    finally:
        g.close()


def test_only_a_few_files_are_kept(tmp_path: Path) -> None:
    cache = treecache.TreeCache(files=3)
    files = [opened(tmp_path, cache, 5 * MiB, seed=i) for i in range(5)]
    try:
        for f in files:
            f.hash()
        assert [cache.cached(f.key) is not None for f in files] == [False] * 2 + [True] * 3
        assert len(cache._inodes) == 3
    finally:
        for f in files:
            f.close()


def test_writes_without_an_entry_leave_nothing_behind(
    tmp_path: Path, cache: treecache.TreeCache
) -> None:
    f = opened(tmp_path, cache, 1 * MiB)
    try:
        for i in range(100):
            f.write(i, b"x")
        f.truncate(10)
        assert cache._inodes == {}
        assert f.hash() == f.truth()  # small: whole
    finally:
        f.close()


def test_verify_mode_catches_a_wrong_tree_and_answers_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = treecache.TreeCache(verify=True)
    f = opened(tmp_path, cache, 9 * MiB)
    try:
        f.hash()
        real = b3tree.fill_leaves

        def broken(
            lib: b3tree.Library, fd: int, size: int, cvs: bytearray, todo: list[int]
        ) -> None:
            real(lib, fd, size, cvs, todo)
            cvs[0] ^= 1

        monkeypatch.setattr(b3tree, "fill_leaves", broken)
        f.write(4 * MiB, b"y")
        assert f.hash() == f.truth()
        assert cache.cached(f.key) is None
    finally:
        f.close()
