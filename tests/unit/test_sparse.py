"""Sparse files without FUSE: holes stay holes in the store, in a restore,
in a reset and in a reassembled version, and the name of a version is the
blake3 of the full byte stream, zeros included."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from swfs.api import RelPath
from swfs.check import run_checks
from swfs.engine import Engine
from swfs.history import snapshots as history
from swfs.store import fsutil, gc
from swfs.store.blobs import BlobStore
from swfs.workspace import Config
from tests.sparseutil import SLACK, MiB, allocated, data_ranges, holds, make_sparse, stream_hash

SIZE = 512 * MiB
# Where the data sits: a header, a block in the middle that straddles a
# FastCDC maximum, a tail a few bytes short of the end.
PIECES_V1 = {
    0: b"boot sector" * 40,
    200 * MiB + 12_345: random.Random(1).randbytes(700_000),
    SIZE - 9: b"trailer!!",
}
PIECES_V2 = {**PIECES_V1, 300 * MiB: b"written later"}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("a small file beside the image\n")
    return root


@pytest.fixture
def engine(src: Path) -> Iterator[Engine]:
    with Engine.open(src, config=Config(rescan_interval=0, version_interval=0)) as eng:
        eng.scan()
        yield eng


def write_in_place(eng: Engine, rel: str, pieces: dict[int, bytes]) -> None:
    """What a write through the mount does: keep the recorded bytes, change
    the file in place, record."""
    eng.workspace.preserve(RelPath(rel))
    fd = os.open(eng.src / rel, os.O_WRONLY)
    try:
        for offset, data in pieces.items():
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
    eng.workspace.record_write(RelPath(rel))


# -- the copy used by restore and reset


def test_copy_fd_copies_data_extents_and_keeps_holes(tmp_path: Path) -> None:
    make_sparse(tmp_path / "src", SIZE, PIECES_V1)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert fsutil.copy_fd(src, dst) == SIZE
    finally:
        os.close(src)
        os.close(dst)
    holds(tmp_path / "dst", SIZE, PIECES_V1)
    assert allocated(tmp_path / "dst") < SLACK
    assert data_ranges(tmp_path / "dst") == data_ranges(tmp_path / "src")


def test_copy_fd_of_a_file_that_is_all_hole(tmp_path: Path) -> None:
    make_sparse(tmp_path / "src", 64 * MiB, {})
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert fsutil.copy_fd(src, dst) == 64 * MiB
    finally:
        os.close(src)
        os.close(dst)
    assert os.stat(tmp_path / "dst").st_size == 64 * MiB
    assert allocated(tmp_path / "dst") == 0
    assert data_ranges(tmp_path / "dst") == []


# -- the store


def test_version_of_a_sparse_file_holds_no_hole_bytes(tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "blobs")
    make_sparse(tmp_path / "img", SIZE, PIECES_V1)
    fd = os.open(tmp_path / "img", os.O_RDONLY)
    try:
        h = store.put_fd(fd)
    finally:
        os.close(fd)
    assert h == stream_hash(SIZE, PIECES_V1)
    m = store.manifest(h)
    assert m is not None
    assert m.size == SIZE
    # The extents cover the data extents (whole filesystem blocks, cut into
    # chunks), never the holes.
    ranges = data_ranges(tmp_path / "img")
    data = sum(end - start for start, end in ranges)
    assert data < 1 * MiB
    for e in m.extents:
        assert any(lo <= e.offset and e.offset + e.length <= hi for lo, hi in ranges), e
    assert sum(e.length for e in m.extents) <= data
    assert store.total_bytes() < data + 256 * 1024
    # Reassembled for a reader that needs a path: the same holes.
    p = store.readable_path(h)
    holds(p, SIZE, PIECES_V1)
    assert allocated(p) < SLACK


# -- the engine: restore, reset, check, gc


def test_restore_of_a_sparse_version_recreates_its_holes(engine: Engine) -> None:
    rel = RelPath("disk.img")
    make_sparse(engine.src / rel, SIZE, PIECES_V1)
    engine.workspace.record_write(rel)
    write_in_place(engine, rel, PIECES_V2)
    versions = engine.history.versions(rel)
    assert [v.hash for v in versions] == [
        stream_hash(SIZE, PIECES_V1),
        stream_hash(SIZE, PIECES_V2),
    ]
    assert engine.workspace.blobs.total_bytes() < SLACK  # version 1 kept, without its holes
    engine.history.restore(rel, versions[0].number)
    holds(engine.src / rel, SIZE, PIECES_V1)
    assert allocated(engine.src / rel) < SLACK
    assert engine.history.versions(rel)[-1].hash == stream_hash(SIZE, PIECES_V1)


def test_reset_recreates_holes(engine: Engine) -> None:
    rel = RelPath("disk.img")
    make_sparse(engine.src / rel, SIZE, PIECES_V1)
    engine.workspace.record_write(rel)
    engine.history.set_baseline()
    write_in_place(engine, rel, PIECES_V2)
    history.reset(engine.workspace)
    holds(engine.src / rel, SIZE, PIECES_V1)
    assert allocated(engine.src / rel) < SLACK


def test_check_verifies_the_chunks_of_a_sparse_version(engine: Engine) -> None:
    rel = RelPath("disk.img")
    make_sparse(engine.src / rel, SIZE, PIECES_V1)
    engine.workspace.record_write(rel)
    write_in_place(engine, rel, PIECES_V2)
    assert run_checks(engine.workspace) == []
    h = engine.history.versions(rel)[0].hash
    m = engine.workspace.blobs.manifest(h)
    assert m is not None
    # Rot one byte of the chunk that holds the middle piece.
    c = next(e.chunk for e in m.extents if e.chunk is not None and e.offset >= 200 * MiB)
    p = engine.workspace.blobs.chunk_path(c)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    p.chmod(0o600)
    p.write_bytes(bytes(raw))
    problems = run_checks(engine.workspace)
    assert [x.check for x in problems] == ["chunks"]
    assert c[:16] in problems[0].message


def test_gc_reclaims_the_chunks_of_a_dropped_sparse_history(engine: Engine) -> None:
    rel = RelPath("disk.img")
    make_sparse(engine.src / rel, SIZE, PIECES_V1)
    engine.workspace.record_write(rel)
    write_in_place(engine, rel, PIECES_V2)
    assert list(engine.workspace.blobs.iter_chunks())
    engine.workspace.preserve_inode(rel)
    (engine.src / rel).unlink()
    engine.workspace.record_unlink(rel)
    report = gc.collect(engine.workspace, keep_days=0)
    assert report.chunks_removed > 0
    assert list(engine.workspace.blobs.iter_chunks()) == []
    assert run_checks(engine.workspace) == []
