"""The whole-file blake3 of a file with holes: hashed without reading the
holes (zeros from a shared mapping), and bit-identical to blake3 of every
byte the file reads as, wherever the holes start and end.  The reference
is ``blake3.blake3(data)`` of the file's bytes, read plainly."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from swfs.store import fsutil
from swfs.store.blobs import BlobStore
from tests.sparseutil import make_sparse as make

KiB = 1024
MiB = 1024 * KiB
B3_CHUNK = 1024  # blake3's chunk: the leaves of its tree


def reference(path: Path) -> str:
    return blake3.blake3(path.read_bytes()).hexdigest()


def after_first_pread(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> list[bool]:
    """Run ``change`` once, right after the hash's first read (the head)."""
    real_pread = os.pread
    done: list[bool] = []

    def pread(fd: int, n: int, offset: int) -> bytes:
        out = real_pread(fd, n, offset)
        if not done:
            done.append(True)
            change()
        return out

    monkeypatch.setattr(os, "pread", pread)
    return done


def hash_fd_of(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return fsutil.hash_fd(fd)
    finally:
        os.close(fd)


def has_holes(path: Path) -> bool:
    st = os.stat(path)
    return st.st_blocks * 512 < st.st_size


# Offsets chosen against every boundary the hashing code knows: blake3's
# 1 KiB chunks, the 4 KiB filesystem block, the 4 MiB head read in one go,
# the 16 MiB read size and the 64 MiB zero mapping (a hole longer than it
# is fed in several steps).
CASES: dict[str, tuple[int, dict[int, bytes]]] = {
    "holes-at-chunk-boundaries": (
        40 * MiB,
        {0: os.urandom(64 * KiB), 8 * MiB: os.urandom(B3_CHUNK * 16), 24 * MiB: b"z" * 4096},
    ),
    "holes-off-chunk-boundaries": (
        40 * MiB + 777,
        {
            123: os.urandom(5000),
            4 * MiB + 1: b"just past the head",
            5 * MiB + 1023: os.urandom(B3_CHUNK + 3),
            16 * MiB - 5: b"across the read size",
            40 * MiB + 700: b"last bytes",
        },
    ),
    "hole-longer-than-the-zero-map": (
        150 * MiB + 3,
        {0: b"boot sector", 70 * MiB + 517: os.urandom(9000), 150 * MiB - 2: b"end"},
    ),
    "hole-at-the-end": (90 * MiB + 5, {0: os.urandom(6 * MiB + 11)}),
    "data-at-the-end-only": (33 * MiB + 1, {33 * MiB - 4095: os.urandom(4096)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hash_fd_of_a_file_with_holes_is_blake3_of_its_bytes(tmp_path: Path, name: str) -> None:
    size, pieces = CASES[name]
    f = tmp_path / name
    make(f, size, pieces)
    assert hash_fd_of(f) == reference(f)
    # The same name from every other way swfs hashes a file.
    assert fsutil.hash_file(f) == reference(f)
    assert fsutil.hash_file(f, mmap=False) == reference(f)


def test_the_hole_path_is_taken(tmp_path: Path) -> None:
    """The cases above hash real holes (not data read as zeros) where the
    filesystem keeps them: the extents seen are the data written."""
    f = tmp_path / "f"
    make(f, 90 * MiB, {0: b"a" * 4096, 50 * MiB: b"b" * 4096})
    if not has_holes(f):
        pytest.skip("this filesystem keeps no holes")
    fd = os.open(f, os.O_RDONLY)
    try:
        extents = list(fsutil.data_extents(fd, 90 * MiB))
    finally:
        os.close(fd)
    assert sum(end - start for start, end in extents) < 2 * MiB
    assert hash_fd_of(f) == reference(f)


@pytest.mark.parametrize("size", [1, B3_CHUNK, 4 * MiB + 1, 100 * MiB + 1])
def test_a_file_that_is_all_hole(tmp_path: Path, size: int) -> None:
    f = tmp_path / "empty.img"
    make(f, size, {})
    assert hash_fd_of(f) == reference(f) == blake3.blake3(bytes(size)).hexdigest()


def test_blob_store_names_a_sparse_file_by_the_same_hash(tmp_path: Path) -> None:
    size, pieces = CASES["holes-off-chunk-boundaries"]
    f = tmp_path / "f"
    make(f, size, pieces)
    store = BlobStore(tmp_path / "blobs")
    fd = os.open(f, os.O_RDONLY)
    try:
        h = store.put_fd(fd)
    finally:
        os.close(fd)
    assert h == reference(f)
    assert store.read_bytes(h) == f.read_bytes()


def test_hash_zeros_feeds_exactly_n_zeros() -> None:
    for n in (0, 1, 1023, 1025, 64 * MiB, 64 * MiB + 1):
        hasher = blake3.blake3()
        fsutil.hash_zeros(hasher, n)
        assert hasher.hexdigest() == blake3.blake3(bytes(n)).hexdigest(), n


def test_a_file_changed_while_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data written into a hole and appended after hashing began (here:
    right after the head is read): the bytes past what was read are taken
    as they are now, never as the hole that was there, and the change
    shows in the file's stat, by which the engine drops such a hash."""
    f = tmp_path / "f"
    size = 20 * MiB
    make(f, size, {0: os.urandom(5 * MiB)})
    before = os.stat(f)

    def write() -> None:
        w = os.open(f, os.O_WRONLY)
        try:
            os.pwrite(w, b"written into the hole", 9 * MiB + 100)
            os.pwrite(w, b"appended", size)
        finally:
            os.close(w)

    changed = after_first_pread(monkeypatch, write)
    got = hash_fd_of(f)
    monkeypatch.undo()
    assert changed
    assert got == reference(f)  # every byte past the head read after the change
    after = os.stat(f)
    assert (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns)


def test_a_file_truncated_while_hashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut short after the head is read: the hash is of the bytes that were
    there to read, never of zeros assumed past the new end."""
    f = tmp_path / "f"
    make(f, 30 * MiB, {0: os.urandom(5 * MiB), 20 * MiB: b"tail data"})
    cut = after_first_pread(monkeypatch, lambda: os.truncate(f, 6 * MiB))
    got = hash_fd_of(f)
    monkeypatch.undo()
    assert cut
    assert got == reference(f)
