"""The hash recorded at close, by what the write session changed
(swfs.treecache through swfs.writesession), without FUSE: a one-byte edit
of a big file rehashes one leaf and records blake3 of the file's bytes; a
change made in SRC behind the session, between its writes or between its
last write and the close, is seen and the file hashed whole; a new sparse
file records the hash of its bytes, zeros included.  The reference is
``blake3.blake3`` of the bytes read from SRC."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from swfs.api import RelPath, WriteSession
from swfs.engine import Engine
from swfs.store import b3tree, treecache
from swfs.workspace import Config
from tests.b3lib import library_path, using

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def lib_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return library_path(tmp_path_factory)


@pytest.fixture
def engine(tmp_path: Path, lib_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.bin").write_bytes(random.Random(16).randbytes(24 * MiB + 123))
    with (
        using(str(lib_path)),
        Engine.open(
            src, tmp_path / "store", config=Config(rescan_interval=0, version_interval=0)
        ) as eng,
    ):
        assert b3tree.library() is not None, b3tree.why_not()
        eng.scan()
        yield eng


def truth(engine: Engine, rel: str) -> str:
    return blake3.blake3((engine.src / rel).read_bytes()).hexdigest()


def recorded(engine: Engine, rel: str) -> str:
    state = engine.workspace.file_state(RelPath(rel))
    assert state is not None
    return str(state.hash)


def count(what: str) -> int:
    return treecache.CACHE.stats[what]


def write_session(engine: Engine, rel: str, *edits: tuple[int, bytes]) -> WriteSession:
    s = engine.workspace.writes.begin_write(
        rel, lambda: os.open(engine.src / rel, os.O_RDWR | os.O_CLOEXEC), truncate=False
    )
    for off, data in edits:
        s.write(off, data)
    return s


def test_a_one_byte_edit_records_blake3_by_one_leaf(engine: Engine) -> None:
    assert recorded(engine, "big.bin") == truth(engine, "big.bin")
    incremental, leaves = count("incremental"), count("leaves")
    s = write_session(engine, "big.bin", (13 * MiB + 5, b"!"))
    s.release()
    assert recorded(engine, "big.bin") == truth(engine, "big.bin")
    assert count("incremental") == incremental + 1
    assert count("leaves") == leaves + 1
    # The version before the edit is kept, under the hash of its bytes.
    versions = engine.history.versions(RelPath("big.bin"))
    assert len(versions) == 2
    assert versions[-1].hash == truth(engine, "big.bin")


def test_a_change_in_src_between_two_writes_is_hashed_whole(engine: Engine) -> None:
    s = write_session(engine, "big.bin", (1 * MiB, b"through the mount"))
    fd = os.open(engine.src / "big.bin", os.O_RDWR)
    try:
        os.pwrite(fd, b"behind the mount", 20 * MiB)  # another leaf
    finally:
        os.close(fd)
    s.write(2 * MiB, b"through the mount again")
    incremental = count("incremental")
    s.release()
    assert recorded(engine, "big.bin") == truth(engine, "big.bin")
    assert count("incremental") == incremental


def test_a_change_in_src_after_the_last_write_is_hashed_whole(engine: Engine) -> None:
    s = write_session(engine, "big.bin", (1 * MiB, b"through the mount"))
    with open(engine.src / "big.bin", "r+b") as f:
        f.seek(23 * MiB)
        f.write(b"behind")
    s.release()
    assert recorded(engine, "big.bin") == truth(engine, "big.bin")
    # Then edits by the session alone go by leaves again.
    incremental = count("incremental")
    s = write_session(engine, "big.bin", (5, b"again"))
    s.release()
    assert recorded(engine, "big.bin") == truth(engine, "big.bin")
    assert count("incremental") == incremental + 1


def test_a_new_sparse_file_and_its_edits(engine: Engine) -> None:
    rel = "disk.img"
    fd = os.open(engine.src / rel, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    s = engine.workspace.writes.adopt_new(rel, fd)
    s.truncate(64 * MiB)
    s.write(0, b"boot sector")
    s.write(32 * MiB, b"superblock")
    s.release()
    assert recorded(engine, rel) == truth(engine, rel)
    incremental = count("incremental")
    s2 = write_session(engine, rel, (64 * MiB - 4096, b"journal"))
    s2.truncate(48 * MiB + 5)
    s2.write(40 * MiB, b"x")
    s2.release()
    assert recorded(engine, rel) == truth(engine, rel)
    assert count("incremental") == incremental + 1


def test_switched_off_records_the_same_hashes(engine: Engine) -> None:
    with using("off"):
        whole = count("whole")
        s = write_session(engine, "big.bin", (7 * MiB, b"no tree"))
        s.release()
        assert recorded(engine, "big.bin") == truth(engine, "big.bin")
        assert count("whole") > whole
