"""Sparse files for tests: made with holes, checked byte for byte, hashed
as the full stream by blake3 alone (no swfs code)."""

from __future__ import annotations

import os
from pathlib import Path

import blake3

from swfs.store import fsutil

MiB = 1024 * 1024
# A file's allocation beyond its data: a filesystem block per extent end,
# and some slack for filesystems that allocate in bigger units.
SLACK = 4 * MiB


def stream_hash(size: int, pieces: dict[int, bytes]) -> str:
    """blake3 of the full byte stream, zeros fed as bytes: independent of
    any swfs code."""
    hasher = blake3.blake3()
    zeros = bytes(4 * MiB)
    pos = 0
    for offset in sorted(pieces):
        while pos < offset:
            step = min(len(zeros), offset - pos)
            hasher.update(zeros[:step])
            pos += step
        hasher.update(pieces[offset])
        pos = offset + len(pieces[offset])
    while pos < size:
        step = min(len(zeros), size - pos)
        hasher.update(zeros[:step])
        pos += step
    return hasher.hexdigest()


def make_sparse(path: Path, size: int, pieces: dict[int, bytes]) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        for offset, data in pieces.items():
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def holds(path: Path, size: int, pieces: dict[int, bytes]) -> None:
    """``path`` is ``size`` bytes: ``pieces`` and zeros, checked by reading
    the pieces, probing the holes and hashing the whole stream."""
    assert os.stat(path).st_size == size
    with open(path, "rb") as f:
        for offset, data in pieces.items():
            f.seek(offset)
            assert f.read(len(data)) == data, offset
        for probe in (4096, size // 5, size // 2 + 4096, size - 5000):
            if any(o <= probe + 1000 and probe < o + len(d) for o, d in pieces.items()):
                continue
            f.seek(probe)
            assert f.read(1000) == bytes(1000), probe
    assert read_hash(path) == stream_hash(size, pieces)


def read_hash(path: Path) -> str:
    """blake3 of what reading ``path`` returns (works on any file system,
    a FUSE mount included)."""
    hasher = blake3.blake3()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(4 * MiB):
            hasher.update(chunk)
    return hasher.hexdigest()


def data_ranges(path: Path) -> list[tuple[int, int]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return list(fsutil.data_extents(fd, os.fstat(fd).st_size))
    finally:
        os.close(fd)
