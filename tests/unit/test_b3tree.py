"""blake3 by subtrees (swfs.b3tree): the hash a file gets from its 1 MiB
leaves is blake3-py's hash of its bytes, for every shape of tree (exact
powers of two, odd tails, a last leaf of one byte or of one byte short),
holes included, which are never read; without the library (or with it
switched off) files hash whole, to the same hashes.  The reference is
always ``blake3.blake3(bytes)`` of the file as read."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from swfs.store import b3tree, fsutil, treecache
from tests.b3lib import library_path, using
from tests.sparseutil import make_sparse

KiB = 1024
MiB = 1024 * KiB
LEAF = b3tree.LEAF


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return library_path(tmp_path_factory)


@pytest.fixture
def lib(lib_path: Path) -> Iterator[b3tree.Library]:
    with using(str(lib_path)):
        got = b3tree.library()
        assert got is not None, b3tree.why_not()
        yield got


def data(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def reference(path: Path) -> str:
    return blake3.blake3(path.read_bytes()).hexdigest()


def file_hash(lib: b3tree.Library, path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        h, cvs = b3tree.hash_fd(lib, fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert len(cvs) == b3tree.CV * b3tree.leaf_count(os.stat(path).st_size)
    return h


TAILS = [1, 63, 64, 65, 1023, 1024, 1025, 2048, 4097, 65536, LEAF - 1, LEAF]


@pytest.mark.parametrize("tail", TAILS)
def test_a_last_leaf_of_any_length_joins_to_blake3(lib: b3tree.Library, tail: int) -> None:
    payload = data(LEAF + tail, tail)
    assert lib.hash_bytes(payload) == blake3.blake3(payload).hexdigest()


@pytest.mark.parametrize(
    "leaves_bytes",
    [
        2 * LEAF,
        3 * LEAF,
        4 * LEAF,
        4 * LEAF - 1,
        4 * LEAF + 1,
        5 * LEAF + 77,
        8 * LEAF,
        13 * LEAF + 999,
    ],
)
def test_trees_of_many_leaves_equal_blake3(lib: b3tree.Library, leaves_bytes: int) -> None:
    payload = data(leaves_bytes, leaves_bytes)
    assert lib.hash_bytes(payload) == blake3.blake3(payload).hexdigest()


def test_random_lengths_equal_blake3(lib: b3tree.Library) -> None:
    rng = random.Random(1616)
    big = rng.randbytes(24 * LEAF)
    for _ in range(25):
        n = rng.randrange(LEAF + 1, len(big))
        assert lib.hash_bytes(big[:n]) == blake3.blake3(big[:n]).hexdigest(), n


def test_a_different_byte_anywhere_changes_the_hash(lib: b3tree.Library) -> None:
    payload = bytearray(data(3 * LEAF + 5, 3))
    base = lib.hash_bytes(bytes(payload))
    for at in (0, LEAF - 1, LEAF, 2 * LEAF + 17, len(payload) - 1):
        payload[at] ^= 1
        assert lib.hash_bytes(bytes(payload)) != base
        assert lib.hash_bytes(bytes(payload)) == blake3.blake3(payload).hexdigest()
        payload[at] ^= 1


def test_zero_leaves_depend_on_their_place(lib: b3tree.Library) -> None:
    # A chunk's chaining value includes its index: zeros at two places
    # are two different CVs, each the CV of zeros read from memory.
    assert lib.leaves(None, LEAF, 3) != lib.leaves(None, LEAF, 4)
    assert lib.leaves(None, 2 * LEAF, 3) == lib.leaves_of(bytes(2 * LEAF), 3)
    assert lib.leaves(None, 777, 9) == lib.leaves_of(bytes(777), 9)


@pytest.mark.parametrize(
    "size",
    [
        LEAF + 1,
        2 * LEAF,
        4 * LEAF,
        7 * LEAF + 3,
        16 * LEAF,
        16 * LEAF + LEAF - 1,
        33 * LEAF + 12345,
    ],
)
def test_files_by_leaves_equal_blake3(lib: b3tree.Library, tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(data(size, size))
    assert file_hash(lib, path) == reference(path)


SPARSE = [
    # (size, {offset: bytes}): holes at the start, in the middle, at the
    # end, covering part of a leaf, a short last leaf inside a hole.
    (20 * MiB, {0: b"boot", 10 * MiB + 5: b"x" * 5000}),
    (20 * MiB + 333, {19 * MiB: b"tail" * 1000}),
    (9 * MiB, {3 * MiB - 10: b"across a leaf edge" * 3}),
    (64 * MiB + 1, {}),
    (12 * MiB, {i * MiB + 7: bytes([i + 1]) * 100 for i in range(12)}),
]


@pytest.mark.parametrize(("size", "pieces"), SPARSE)
def test_sparse_files_hash_their_zeros_without_reading_them(
    lib: b3tree.Library,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    size: int,
    pieces: dict[int, bytes],
) -> None:
    path = tmp_path / "sparse"
    make_sparse(path, size, pieces)
    read: list[int] = []
    real = os.preadv

    def preadv(fd: int, buffers: list[memoryview], offset: int) -> int:
        n = real(fd, buffers, offset)
        read.append(n)
        return n

    monkeypatch.setattr(os, "preadv", preadv)
    assert file_hash(lib, path) == reference(path)
    # Only leaves with data are read (whole leaves, where a filesystem
    # without SEEK_HOLE would read everything).
    ends = {(o + len(p) - 1) // LEAF for o, p in pieces.items()}
    leaves_with_data = {o // LEAF for o in pieces} | ends
    fd = os.open(path, os.O_RDONLY)
    try:
        knows_holes = size == 0 or list(fsutil.data_extents(fd, size)) != [(0, size)]
    finally:
        os.close(fd)
    if knows_holes:
        assert sum(read) <= len(leaves_with_data) * LEAF


def test_every_length_through_the_close_hash(lib: b3tree.Library, tmp_path: Path) -> None:
    """``treecache.hash_fd``, what a close records: small files whole, big
    ones by leaves, every one blake3 of its bytes."""
    cache = treecache.TreeCache()
    sizes = [0, 1, 1023, 1024, 1025, 4096, LEAF - 1, LEAF, LEAF + 1]
    sizes += [treecache.MIN_SIZE - 1, treecache.MIN_SIZE, treecache.MIN_SIZE + 1]
    sizes += [8 * MiB, 16 * MiB, 16 * MiB + 1, 21 * MiB - 1]
    big = data(max(sizes), 42)
    for size in sizes:
        path = tmp_path / f"f{size}"
        path.write_bytes(big[:size])
        fd = os.open(path, os.O_RDONLY)
        try:
            assert cache.hash_fd(fd) == blake3.blake3(big[:size]).hexdigest(), size
        finally:
            os.close(fd)
    assert cache.stats["tree"] == sum(s >= treecache.MIN_SIZE for s in sizes)


def test_switched_off_files_hash_whole_to_the_same_hashes(tmp_path: Path) -> None:
    with using("off"):
        assert b3tree.library() is None
        assert b3tree.why_not() == f"{b3tree.ENV}=off"
        cache = treecache.TreeCache()
        for size, pieces in [(9 * MiB, {5: b"data", 7 * MiB: b"more"}), (5 * MiB + 3, {})]:
            path = tmp_path / f"s{size}"
            make_sparse(path, size, pieces)
            fd = os.open(path, os.O_RDWR)
            try:
                key = (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
                assert cache.hash_fd(fd) == reference(path)
                cache.write(key, fd, 100, b"changed")  # tracked or not, plain writes
                assert cache.hash_fd(fd) == reference(path)
            finally:
                os.close(fd)
        assert cache.stats["whole"] == 4
        assert cache.stats["tree"] == cache.stats["incremental"] == 0


def test_a_library_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "libswfsb3.so"
    bogus.write_bytes(b"not an ELF file")
    with using(str(bogus)):
        assert b3tree.library() is None
        assert str(bogus) in (b3tree.why_not() or "")
        path = tmp_path / "f"
        path.write_bytes(data(6 * MiB, 6))
        fd = os.open(path, os.O_RDONLY)
        try:
            assert treecache.TreeCache().hash_fd(fd) == reference(path)
        finally:
            os.close(fd)


def test_a_missing_library_is_said_once_and_hashing_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with using(str(tmp_path / "absent.so")):
        with caplog.at_level("INFO", logger="swfs.store.b3tree"):
            assert b3tree.library() is None
            assert b3tree.library() is None
        said = [r for r in caplog.records if "blake3 subtrees unavailable" in r.getMessage()]
        assert len(said) == 1
        assert "is not built" in said[0].getMessage()


def test_the_build_refuses_without_sources(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(b3tree, "SOURCES_GLOB", str(tmp_path / "nothing-*"))
    with pytest.raises(b3tree.BuildError, match="librust-blake3-dev"):
        b3tree.build(tmp_path / "lib.so")
    assert not (tmp_path / "lib.so").exists()


def test_the_zero_table_is_checked_before_use(lib: b3tree.Library, tmp_path: Path) -> None:
    table = tmp_path / "lib.zeros"
    b3tree.write_zero_table(lib, table, leaves=12)
    raw = table.read_bytes()
    assert b3tree._load_zero_table(lib, table) is None
    assert b3tree._ZERO.get(11) == lib.leaves(None, LEAF, 11)
    # A flipped bit anywhere: refused.
    table.write_bytes(raw[:40] + bytes([raw[40] ^ 1]) + raw[41:])
    assert "damaged" in (b3tree._load_zero_table(lib, table) or "")
    # Whole and consistent, but not what this library computes: refused.
    body = bytearray(raw[: -b3tree.CV])
    body[16] ^= 1
    table.write_bytes(bytes(body) + blake3.blake3(bytes(body)).digest())
    assert "not this library's" in (b3tree._load_zero_table(lib, table) or "")


def test_a_sparse_file_with_a_known_zero_table_reads_and_hashes_only_its_data(
    lib: b3tree.Library, tmp_path: Path
) -> None:
    path = tmp_path / "disk.img"
    make_sparse(path, 64 * MiB, {0: b"boot", 40 * MiB: b"sb"})
    b3tree.write_zero_table(lib, tmp_path / "t.zeros", leaves=64)
    assert b3tree._load_zero_table(lib, tmp_path / "t.zeros") is None
    assert file_hash(lib, path) == reference(path)
