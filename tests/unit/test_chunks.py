"""The chunked blob store: round trips, dedup, holes, corruption, crash safety,
the old whole-file format, and the version-burst policy."""

from __future__ import annotations

import errno
import multiprocessing
import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from swfs.api import Cause, RelPath
from swfs.check import run_checks
from swfs.history import versioning
from swfs.history.part import History
from swfs.store import blobs as blobs_mod
from swfs.store.blobs import CHUNK_MAX, BlobStore, CorruptBlob, HashMismatch
from swfs.store.upgrade import UpgradeError, whole_file_blobs, whole_file_path
from swfs.workspace import Config, Workspace


def b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def put_file(store: BlobStore, path: Path, **kw: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return store.put_fd(fd, **kw)
    finally:
        os.close(fd)


def chunk_files(store: BlobStore) -> set[str]:
    return set(store.iter_chunks())


def sparse_file(path: Path, size: int, pieces: dict[int, bytes]) -> None:
    """A file of ``size`` bytes, holes except ``pieces``."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in pieces.items():
            f.seek(offset)
            f.write(data)


# -- round trips


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"x",
        b"small text\n" * 10,
        bytes(blobs_mod.INLINE_MAX),  # all zeros, inline size
        os.urandom(blobs_mod.INLINE_MAX),
        os.urandom(blobs_mod.INLINE_MAX + 1),
        b"compressible line of text\n" * 200_000,  # ~5 MiB, many chunks
        os.urandom(3 * 1024 * 1024 + 17),
    ],
    ids=["empty", "one", "text", "zeros", "inline-max", "inline-max+1", "text-5M", "random-3M"],
)
def test_round_trip(store: BlobStore, tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "f"
    f.write_bytes(data)
    h = put_file(store, f, expected=b3(data))
    assert h == b3(data)
    assert store.has(h)
    assert store.size(h) == len(data)
    assert store.read_bytes(h) == data
    assert store.readable_path(h).read_bytes() == data
    assert store.verify(h)
    assert store.put_bytes(data) == h  # same name whichever way it came in
    reader = store.reader(h)
    rng = random.Random(len(data))
    for _ in range(20):
        off = rng.randrange(len(data) + 10)
        n = rng.randrange(1, 300_000)
        assert reader.pread(n, off) == data[off : off + n]
    assert os.listdir(store.tmp) == []


def test_put_bytes_of_many_chunks(store: BlobStore) -> None:
    data = os.urandom(2 * CHUNK_MAX + 5)
    h = store.put_bytes(data)
    m = store.manifest(h)
    assert m is not None
    assert len(m.extents) >= 3
    assert store.read_bytes(h) == data


def test_text_is_compressed(store: BlobStore, tmp_path: Path) -> None:
    data = b"a line that repeats, as logs and csv files do\n" * 100_000
    f = tmp_path / "log.txt"
    f.write_bytes(data)
    put_file(store, f)
    assert store.total_bytes() < len(data) // 10


# -- dedup


def test_one_byte_edit_costs_a_chunk_not_a_copy(store: BlobStore, tmp_path: Path) -> None:
    data = bytearray(random.Random(7).randbytes(10 * 1024 * 1024))
    f = tmp_path / "big.bin"
    f.write_bytes(data)
    first = put_file(store, f)
    before, chunks_before = store.total_bytes(), chunk_files(store)
    versions = {first: bytes(data)}
    for i in range(5):
        data[(i * 2_000_003) % len(data)] ^= 0xFF
        f.write_bytes(data)
        versions[put_file(store, f)] = bytes(data)
    grown = store.total_bytes() - before
    # Five edits: each adds one or two chunks (<= 512 KiB each) and a manifest.
    assert grown < 5 * 2 * CHUNK_MAX
    assert len(chunk_files(store) - chunks_before) <= 10
    for h, content in versions.items():
        assert store.read_bytes(h) == content
        assert store.verify(h)


def test_insertion_shifts_only_nearby_chunks(store: BlobStore) -> None:
    """Content-defined cuts: inserting bytes near the start does not change
    the chunks after it (fixed-size blocks would all change)."""
    data = random.Random(3).randbytes(8 * 1024 * 1024)
    a = store.put_bytes(data)
    b = store.put_bytes(data[:1000] + b"inserted" + data[1000:])
    ma, mb = store.manifest(a), store.manifest(b)
    assert ma is not None
    assert mb is not None
    shared = set(ma.chunks()) & set(mb.chunks())
    assert len(shared) >= len(set(ma.chunks())) - 2


def test_identical_chunks_are_stored_once(store: BlobStore) -> None:
    block = random.Random(1).randbytes(4 * 1024 * 1024)
    h = store.put_bytes(block + block + block)
    m = store.manifest(h)
    assert m is not None
    assert len(set(m.chunks())) < len(list(m.chunks()))
    assert store.read_bytes(h) == block * 3


# -- holes


def test_holes_stay_holes(store: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "sparse.img"
    size = 2 * 1024 * 1024 * 1024
    head, middle, tail = b"header" * 100, os.urandom(70_000), b"trailer"
    sparse_file(f, size, {0: head, 1 << 30: middle, size - len(tail): tail})
    h = put_file(store, f)
    m = store.manifest(h)
    assert m is not None
    assert m.size == size
    stored = sum(e.length for e in m.extents)
    assert stored < 1024 * 1024  # the data extents only, not 2 GiB
    # The name is the blake3 of all 2 GiB, zeros included.
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    hasher.update_mmap(str(f))
    assert h == hasher.hexdigest()
    r = store.reader(h)
    assert r.pread(len(head), 0) == head
    assert r.pread(len(middle), 1 << 30) == middle
    assert r.pread(100, size - 100) == bytes(100 - len(tail)) + tail
    assert r.pread(4096, 123_456_789) == bytes(4096)
    # Reassembled for a reader needing a path: sparse too.
    p = store.readable_path(h)
    assert p.stat().st_size == size
    assert p.stat().st_blocks * 512 < 4 * 1024 * 1024
    assert store.total_bytes() < 1024 * 1024


def test_zero_runs_inside_data_are_not_stored(store: BlobStore) -> None:
    data = os.urandom(100_000) + bytes(3 * 1024 * 1024) + os.urandom(100_000)
    h = store.put_bytes(data)
    assert store.total_bytes() < 1024 * 1024
    assert store.read_bytes(h) == data


def test_hash_fd_hashes_holes_without_reading(tmp_path: Path) -> None:
    from swfs.store.fsutil import hash_fd

    f = tmp_path / "sparse"
    sparse_file(
        f, 64 * 1024 * 1024, {5_000_000: b"data in the middle", 64 * 1024 * 1024 - 3: b"end"}
    )
    fd = os.open(f, os.O_RDONLY)
    try:
        got = hash_fd(fd)
    finally:
        os.close(fd)
    assert got == b3(f.read_bytes())


# -- corruption


def corrupt_one_chunk(store: BlobStore, h: str) -> str:
    m = store.manifest(h)
    assert m is not None
    c = next(m.chunks())
    p = store.chunk_path(c)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x55
    p.chmod(0o600)
    p.write_bytes(bytes(raw))
    return c


def test_corrupt_chunk_is_found_and_never_served(store: BlobStore) -> None:
    data = random.Random(5).randbytes(6 * 1024 * 1024)
    h = store.put_bytes(data)
    c = corrupt_one_chunk(store, h)
    assert [bad for bad, _why in store.bad_chunks()] == [c]
    assert not store.verify(h)
    with pytest.raises(CorruptBlob) as info:
        store.read_bytes(h)
    assert c[:16] in str(info.value)
    with pytest.raises(OSError, match="corrupt"):
        store.readable_path(h)
    assert not (store.cache / h).exists()  # no wrong bytes left for readers


def test_missing_chunk_is_found(store: BlobStore) -> None:
    h = store.put_bytes(random.Random(6).randbytes(6 * 1024 * 1024))
    m = store.manifest(h)
    assert m is not None
    store.chunk_path(next(m.chunks())).unlink()
    assert not store.verify(h, deep=False)
    with pytest.raises(CorruptBlob, match="missing"):
        store.read_bytes(h)


def test_corrupt_manifest_is_found(store: BlobStore) -> None:
    h = store.put_bytes(b"kept inside its manifest")
    p = store.manifest_path(h)
    p.chmod(0o600)
    raw = bytearray(p.read_bytes())
    raw[-3] ^= 0xFF
    p.write_bytes(bytes(raw))
    assert not store.verify(h, deep=False)


def test_swfs_check_finds_a_corrupt_chunk(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    data = random.Random(9).randbytes(5 * 1024 * 1024)
    (src / "big.bin").write_bytes(data)
    with Workspace(src) as ws:
        ws.scan()
        ws.preserve(RelPath("big.bin"))  # what a write through the mount does first
        h = History(ws).versions(RelPath("big.bin"))[-1].hash
        assert run_checks(ws) == []
        c = corrupt_one_chunk(ws.blobs, h)
        problems = run_checks(ws)
        assert [p.check for p in problems] == ["chunks"]
        assert c[:16] in problems[0].message
        assert "named by 1 blob" in problems[0].message
        run_checks(ws, repair=True)
        assert (ws.store_dir / f"corrupt-chunk-{c}").exists()  # kept aside, not deleted
        after = run_checks(ws)
        assert any(p.check == "blobs" and "missing chunk" in p.message for p in after)


# -- remove and collect


def test_remove_then_collect_drops_only_unshared_chunks(store: BlobStore) -> None:
    base = random.Random(11).randbytes(4 * 1024 * 1024)
    a = store.put_bytes(base)
    b = store.put_bytes(base[:2_000_000] + b"edit" + base[2_000_004:])
    ma, mb = store.manifest(a), store.manifest(b)
    assert ma is not None
    assert mb is not None
    only_a = set(ma.chunks()) - set(mb.chunks())
    assert only_a
    store.remove(a)
    assert not store.has(a)
    assert chunk_files(store) >= only_a  # remove alone keeps chunks
    stats = store.collect()
    assert stats.chunks_removed == len(only_a)
    assert chunk_files(store) == set(mb.chunks())
    assert store.verify(b)
    assert store.collect().chunks_removed == 0


def _die_before_manifest(root: str, data: bytes, linked: bool) -> None:
    store = BlobStore(Path(root))
    link_pending = store._link_pending

    def crash(*a: object, **_k: object) -> None:
        if linked:
            link_pending(*a)  # type: ignore[arg-type]
        os._exit(3)  # a crash: no cleanup of any kind

    store._link_pending = crash  # type: ignore[method-assign]
    store.put_bytes(data)


@pytest.mark.parametrize("linked", [False, True], ids=["chunks-in-tmp", "chunks-linked"])
def test_crash_between_chunks_and_manifest_leaves_only_litter(
    store: BlobStore, linked: bool
) -> None:
    """Killed with the chunks written to temps (not yet fsynced together
    and linked), or linked but not yet named by a manifest: what is left is
    temps that ``cleanup_temp`` removes or chunks that ``collect`` does."""
    kept = store.put_bytes(random.Random(12).randbytes(3 * 1024 * 1024))
    data = random.Random(13).randbytes(3 * 1024 * 1024)
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_die_before_manifest, args=(str(store.root), data, linked))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 3
    assert not store.has(b3(data))
    assert list(store.iter_hashes()) == [kept]
    orphans = len(chunk_files(store)) - len(set(store.manifest(kept).chunks()))
    if linked:
        assert orphans > 0
        assert len(os.listdir(store.tmp)) == 1  # the manifest's, not yet linked
    else:
        assert orphans == 0
        assert len(os.listdir(store.tmp)) > 0
    store.cleanup_temp()
    assert os.listdir(store.tmp) == []
    assert store.collect().chunks_removed == orphans
    assert store.verify(kept)
    assert store.put_bytes(data) == b3(data)  # and storing again works
    assert store.verify(b3(data))


def test_collect_interrupted_part_way_loses_nothing_named(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = store.put_bytes(random.Random(14).randbytes(3 * 1024 * 1024))
    gone = store.put_bytes(random.Random(15).randbytes(3 * 1024 * 1024))
    store.remove(gone)
    real_unlink = os.unlink
    calls = {"n": 0}

    def flaky_unlink(path: object, *a: object, **k: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # the process is stopped mid-sweep
        real_unlink(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(blobs_mod.os, "unlink", flaky_unlink)
    with pytest.raises(KeyboardInterrupt):
        store.collect()
    monkeypatch.setattr(blobs_mod.os, "unlink", real_unlink)
    assert store.verify(kept)
    store.collect()
    assert chunk_files(store) == set(store.manifest(kept).chunks())


def test_collect_racing_writers_never_loses_a_named_chunk(store: BlobStore) -> None:
    rng = random.Random(16)
    base = rng.randbytes(2 * 1024 * 1024)
    errors: list[BaseException] = []
    written: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for i in range(12):
                data = base[: i * 1000] + bytes([i]) + base[i * 1000 + 1 :]
                h = store.put_bytes(data)
                written.append(h)
                if i % 3 == 0:
                    store.remove(h)
                    written.remove(h)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    while not stop.is_set():
        store.collect()
    t.join(60)
    assert not errors
    store.collect()
    for h in written:
        assert store.verify(h), h


def test_failed_write_drops_its_chunks(
    store: BlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "f"
    f.write_bytes(random.Random(17).randbytes(3 * 1024 * 1024))
    with pytest.raises(HashMismatch):
        put_file(store, f, expected=b3(b"something else"))
    assert list(store.iter_hashes()) == []
    assert chunk_files(store) == set()
    assert os.listdir(store.tmp) == []


# -- the format before chunks


def legacy_blob(root: Path, data: bytes) -> str:
    """A blob as the format before chunks kept it: whole, under ``root``."""
    h = b3(data)
    p = whole_file_path(root, h)
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    p.write_bytes(data)
    p.chmod(0o400)
    return h


def test_whole_file_blobs_are_chunked_once_when_the_store_opens(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    old = os.urandom(2 * 1024 * 1024)
    small = b"a small old blob\n"
    h, hs = legacy_blob(root, old), legacy_blob(root, small)
    store = BlobStore(root)
    assert store.upgraded == 2
    for blob, data in ((h, old), (hs, small)):
        assert not whole_file_path(root, blob).exists()
        assert store.manifest(blob).size == len(data)
        assert store.read_bytes(blob) == data
        assert store.size(blob) == len(data)
        assert store.verify(blob)
    assert sorted(store.iter_hashes()) == sorted([h, hs])
    # The second open finds nothing to do.
    assert BlobStore(root).upgraded == 0


def test_upgrade_leaves_a_rotten_whole_file_blob_alone(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    h = legacy_blob(root, b"original bytes")
    p = whole_file_path(root, h)
    p.chmod(0o600)
    p.write_bytes(b"rotten bytes!!")
    store = BlobStore(root)
    assert store.upgraded == 0
    assert p.read_bytes() == b"rotten bytes!!"
    assert not store.verify(h)
    assert list(whole_file_blobs(root)) == [h]


class _Crash(Exception):
    pass


def test_a_crash_while_chunking_loses_nothing(tmp_path: Path) -> None:
    """Killed after a blob's manifest is linked but before its whole file is
    unlinked, or before the next blob: every blob reads back exact, in one
    form or the other, and the next open finishes the work."""
    root = tmp_path / "blobs"
    blobs = {legacy_blob(root, os.urandom(n)): n for n in (10, 300_000, 3 * 1024 * 1024)}
    datas = {h: whole_file_path(root, h).read_bytes() for h in blobs}
    for step in ("unlink", "blob"):
        seen: list[str] = []

        def fault(what: str, step: str = step, seen: list[str] = seen) -> None:
            seen.append(what)
            if what.startswith(step) and len(seen) > 2:
                raise _Crash(what)

        with pytest.raises(_Crash):
            BlobStore(root, upgrade_fault=fault)
        for h, data in datas.items():
            whole = whole_file_path(root, h)
            chunked = (root / "manifests" / h[:2] / h[2:]).is_file()
            assert whole.is_file() or chunked, h
            if whole.is_file():
                assert whole.read_bytes() == data
    store = BlobStore(root)
    assert list(whole_file_blobs(root)) == []
    for h, data in datas.items():
        assert store.read_bytes(h) == data


def test_no_room_to_chunk_stops_the_open_and_keeps_the_blob(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    h = legacy_blob(root, b"kept whole\n")

    def fault(what: str) -> None:
        if what.startswith("blob"):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(UpgradeError, match="No space") as caught:
        BlobStore(root, upgrade_fault=fault)
    assert caught.value.filename == str(whole_file_path(root, h))
    assert caught.value.errno == errno.ENOSPC
    assert whole_file_path(root, h).read_bytes() == b"kept whole\n"
    assert BlobStore(root).read_bytes(h) == b"kept whole\n"


# -- what the engine hands the daemon


def test_version_ref_is_cheap_and_opens_exact(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    data = random.Random(18).randbytes(3 * 1024 * 1024)
    (src / "f.bin").write_bytes(data)
    with Workspace(src) as ws:
        ws.scan()
        ws.preserve(RelPath("f.bin"))
        (src / "f.bin").write_bytes(b"new")
        ws.record_write(RelPath("f.bin"))
        ref = History(ws).version_ref(RelPath("f.bin"), 1)
        assert ref is not None
        assert not Path(ref).exists()  # nothing reassembled by a lookup
        assert ws.blob_size(History(ws).versions(RelPath("f.bin"))[0].hash) == len(data)
        fd = ws.open_blob(ref)
        try:
            assert os.pread(fd, len(data) + 1, 0) == data
        finally:
            os.close(fd)
        path = History(ws).version_file(RelPath("f.bin"), 1)
        assert path is not None
        assert Path(path).read_bytes() == data
        restored = History(ws).restore(RelPath("f.bin"), 1)
        assert (src / "f.bin").read_bytes() == data
        assert restored.hash == b3(data)


# -- version bursts


def test_collapse_policy() -> None:
    kw = {"last_cause": "write", "cause": Cause.WRITE, "now": 10.0, "pinned": False}
    assert versioning.collapses(window_start=9.0, interval=2.0, **kw)  # type: ignore[arg-type]
    assert not versioning.collapses(window_start=7.0, interval=2.0, **kw)  # type: ignore[arg-type]
    assert not versioning.collapses(window_start=9.0, interval=0.0, **kw)  # type: ignore[arg-type]
    assert not versioning.collapses(window_start=None, interval=2.0, **kw)  # type: ignore[arg-type]
    assert not versioning.collapses(
        window_start=9.0,
        interval=2.0,
        **{**kw, "pinned": True},  # type: ignore[arg-type]
    )
    assert not versioning.collapses(
        window_start=9.0,
        interval=2.0,
        **{**kw, "last_cause": "restore"},  # type: ignore[arg-type]
    )
    assert not versioning.collapses(
        window_start=9.0,
        interval=2.0,
        **{**kw, "cause": Cause.EXTERNAL},  # type: ignore[arg-type]
    )


@pytest.fixture
def burst_ws(tmp_path: Path) -> Iterator[Workspace]:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "f.txt").write_text("v0\n")
    with Workspace(src, config=Config(version_interval=3600.0)) as ws:
        ws.scan()
        yield ws


def write(ws: Workspace, text: str) -> None:
    ws.preserve(RelPath("f.txt"))
    (ws.src / "f.txt").write_text(text)
    ws.record_write(RelPath("f.txt"))


def test_rapid_rewrites_collapse_into_one_version(burst_ws: Workspace) -> None:
    for i in range(1, 6):
        write(burst_ws, f"v{i}\n")
    versions = History(burst_ws).versions(RelPath("f.txt"))
    # The first version, then one for the whole burst: its last bytes.
    assert [v.cause for v in versions] == [Cause.BASELINE, Cause.WRITE]
    assert versions[-1].hash == b3(b"v5\n")
    assert versions[-1].number == 6  # numbers are never reused for other bytes
    assert (burst_ws.src / "f.txt").read_text() == "v5\n"
    assert Path(History(burst_ws).version_file(RelPath("f.txt"), 1) or "").read_text() == "v0\n"


def test_fsyncs_in_a_burst_replace_its_last_version(burst_ws: Workspace) -> None:
    """A database fsyncs at every commit: its commits are a burst like any
    rewrites, one version per interval, and nothing of the versions replaced
    is kept (the fsynced bytes are durable in the file itself)."""
    fd = os.open(burst_ws.src / "f.txt", os.O_RDWR)
    session = burst_ws.writes.begin_write("f.txt", lambda: os.dup(fd), truncate=False)
    os.close(fd)
    try:
        for i in range(1, 6):
            session.write(0, f"v{i}\n".encode())
            session.sync(False)
            assert History(burst_ws).versions(RelPath("f.txt"))[-1].hash == b3(f"v{i}\n".encode())
    finally:
        session.release()
    versions = History(burst_ws).versions(RelPath("f.txt"))
    assert [v.hash for v in versions] == [b3(b"v0\n"), b3(b"v5\n")]
    assert all(v.available for v in versions)
    assert set(burst_ws.blobs.iter_hashes()) == {b3(b"v0\n")}
    assert run_checks(burst_ws) == []


def test_fsync_after_the_interval_starts_a_new_burst(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "f.txt").write_text("v0\n")
    with Workspace(src, config=Config(version_interval=0)) as ws:
        ws.scan()
        session = ws.writes.begin_write(
            "f.txt", lambda: os.open(src / "f.txt", os.O_RDWR), truncate=False
        )
        try:
            for i in range(1, 4):
                session.write(0, f"v{i}\n".encode())
                session.sync(True)
        finally:
            session.release()
        versions = History(ws).versions(RelPath("f.txt"))
        assert [v.hash for v in versions] == [b3(f"v{i}\n".encode()) for i in range(4)]
        assert all(v.available for v in versions)  # each kept before the next write
        assert run_checks(ws) == []


def test_a_pinned_version_is_kept(burst_ws: Workspace) -> None:
    write(burst_ws, "v1\n")
    write(burst_ws, "v2\n")
    History(burst_ws).pin_version(RelPath("f.txt"))
    write(burst_ws, "v3\n")
    write(burst_ws, "v4\n")
    hashes = [v.hash for v in History(burst_ws).versions(RelPath("f.txt"))]
    assert hashes == [b3(b"v0\n"), b3(b"v2\n"), b3(b"v4\n")]


def test_snapshot_closes_the_burst(burst_ws: Workspace) -> None:
    write(burst_ws, "v1\n")
    History(burst_ws).snapshot("before")
    write(burst_ws, "v2\n")
    write(burst_ws, "v3\n")
    hashes = [v.hash for v in History(burst_ws).versions(RelPath("f.txt"))]
    assert hashes == [b3(b"v0\n"), b3(b"v1\n"), b3(b"v3\n")]
    assert burst_ws.blob_path(b3(b"v1\n")) is not None


def test_interval_zero_keeps_every_close(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "f.txt").write_text("v0\n")
    with Workspace(src, config=Config(version_interval=0)) as ws:
        ws.scan()
        for i in range(1, 4):
            write(ws, f"v{i}\n")
        assert len(History(ws).versions(RelPath("f.txt"))) == 4


def test_a_burst_keeps_no_bytes_of_the_versions_it_replaces(burst_ws: Workspace) -> None:
    for i in range(1, 6):
        write(burst_ws, f"v{i}\n")
    kept = set(burst_ws.blobs.iter_hashes())
    assert kept == {b3(b"v0\n")}  # v1..v4 were never stored; v5 is the file itself
    assert run_checks(burst_ws) == []  # nothing left over for gc either
    # A write after the interval would have started a new burst: a pin
    # does the same, and the pinned version's bytes are kept before the next write.
    History(burst_ws).pin_version(RelPath("f.txt"))
    write(burst_ws, "v6\n")
    assert b3(b"v5\n") in set(burst_ws.blobs.iter_hashes())
    versions = History(burst_ws).versions(RelPath("f.txt"))
    assert all(v.available for v in versions)
    assert [v.hash for v in versions] == [b3(b"v0\n"), b3(b"v5\n"), b3(b"v6\n")]


def test_a_chunk_repeated_in_one_write_is_stored_once(store: BlobStore) -> None:
    """The chunks of one write wait in temps for one batch of fsyncs: a
    chunk met twice before that is written once, linked once."""
    block = random.Random(21).randbytes(CHUNK_MAX)
    data = block * 6
    h = store.put_bytes(data)
    assert store.read_bytes(h) == data
    assert len(chunk_files(store)) == len(set(store.manifest(h).chunks()))
    assert len(set(store.manifest(h).chunks())) < len(store.manifest(h).extents)
    assert os.listdir(store.tmp) == []
