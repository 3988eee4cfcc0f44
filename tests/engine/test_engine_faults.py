"""The engine under faults: misbehaving parsers, hostile documents, a full
disk and a corrupted store.  Nothing here may take the caller down."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from parsers import registry
from swfs.api import Freshness, RelPath
from swfs.check import run_checks
from swfs.engine import Engine
from swfs.store.fsutil import hash_file
from swfs.store.records import dumps
from swfs.store.reserve import Reserve, default_size
from swfs.views.parsework import WorkerLimits
from swfs.workspace import Config, Workspace
from tests import evilparsers
from tests.tmpfs import small_tmpfs


@pytest.fixture
def evil_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(registry.EXTRA_ENV, evilparsers.SPEC)
    registry._instances.cache_clear()
    yield
    monkeypatch.delenv(registry.EXTRA_ENV)
    registry._instances.cache_clear()


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("evil_env")
def test_crash_hang_and_memory_blowup_fail_only_their_file(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    for name in ("a.crash", "b.hang", "c.hog", "d.bug", "e.panic", "f.abort"):
        (src / name).write_text("x")
    (src / "fine.txt").write_text("still parsed\n")
    # A generous parse timeout: on a loaded machine a niced worker can take
    # seconds just to start, and the hog must reach its memory cap first.
    limits = WorkerLimits(timeout=30.0, memory_mb=1024, workers=2)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        states = {
            rel: eng.views.parsed_view(RelPath(rel))
            for rel in ("a.crash", "b.hang", "c.hog", "d.bug", "e.panic", "f.abort", "fine.txt")
        }
        errors = {rel: v.error for rel, v in states.items() if v is not None}
        assert all(v is not None for v in states.values())
        assert states["fine.txt"].freshness == Freshness.CURRENT  # type: ignore[union-attr]
        for rel in ("a.crash", "b.hang", "c.hog", "d.bug", "e.panic", "f.abort"):
            assert states[rel].freshness == Freshness.FAILED, rel  # type: ignore[union-attr]
        assert "SIGSEGV" in (errors["a.crash"] or "")
        assert "timed out" in (errors["b.hang"] or "")
        assert "memory" in (errors["c.hog"] or "")
        assert "a parser bug" in (errors["d.bug"] or "")
        assert "PanicException" in (errors["e.panic"] or "")
        assert "SIGABRT" in (errors["f.abort"] or "")
        # The failure is readable in the view itself.
        unit = states["b.hang"].units[0]  # type: ignore[union-attr]
        assert unit.name == "error.md"
        assert b'freshness="failed"' in unit.content


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("evil_env")
def test_unprintable_errors_and_real_native_panics_settle_their_file(tmp_path: Path) -> None:
    """Issue 41: an exception that can be neither pickled nor printed, and a
    real Rust panic through pyo3 (python-calamine on a fuzzed .xls), uncaught
    by a parser and caught by ours: each file ends failed, with a one-line
    reason, and the drain returns."""
    from tests import panicgen

    fuzzed = panicgen.fuzzed_xls(tmp_path / "gen")
    assert panicgen.panics_calamine(fuzzed)
    src = tmp_path / "ws"
    src.mkdir()
    (src / "a.unprintable").write_text("x")
    (src / "b.calpanic").write_bytes(fuzzed.read_bytes())
    (src / "c.xls").write_bytes(fuzzed.read_bytes())
    (src / "d.panic").write_text("x")
    (src / "e.abort").write_text("x")
    (src / "fine.txt").write_text("still parsed\n")
    names = ("a.unprintable", "b.calpanic", "c.xls", "d.panic", "e.abort")
    limits = WorkerLimits(timeout=60.0, memory_mb=1024, workers=2)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        assert not eng.views.needs_parse()
        fine = eng.views.parsed_view(RelPath("fine.txt"))
        assert fine is not None
        assert fine.freshness == Freshness.CURRENT
        errors: dict[str, str] = {}
        for rel in names:
            view = eng.views.parsed_view(RelPath(rel))
            assert view is not None, rel
            assert view.freshness == Freshness.FAILED, rel
            errors[rel] = view.error or ""
            assert errors[rel].strip(), rel
            assert "\n" not in errors[rel], rel
    assert "Unprintable (its message could not be read)" in errors["a.unprintable"]
    assert errors["b.calpanic"].startswith("PanicException: range start index")
    assert "calamine panicked: range start index" in errors["c.xls"]
    assert errors["d.panic"].startswith("PanicException")
    assert "SIGABRT" in errors["e.abort"]


def test_preserve_on_a_full_disk_fails_with_enospc_and_keeps_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    with small_tmpfs(store, "3m"):
        src = tmp_path / "ws"
        src.mkdir()
        (src / "small.txt").write_text("small\n")
        (src / "big.bin").write_bytes(os.urandom(4 * 1024 * 1024))
        with Engine.open(src, store, config=Config(rescan_interval=0)) as eng:
            eng.scan()
            eng.workspace.preserve(RelPath("small.txt"))
            with pytest.raises(OSError, match="No space left") as info:
                eng.workspace.preserve(RelPath("big.bin"))
            assert info.value.errno == errno.ENOSPC
            assert eng.history.version_file(RelPath("small.txt"), 1) is not None
            assert not run_checks(eng.workspace)
            assert eng.workspace.blobs.verify(hash_file(src / "small.txt"))


def test_the_reserve_is_held_spent_and_filled_again(tmp_path: Path) -> None:
    reserve = Reserve(tmp_path, 1 << 20)
    assert reserve.fill() >= 1 << 20
    with reserve.spent() as freed:
        assert freed >= 1 << 20
        assert reserve.held() == 0
    assert reserve.held() >= 1 << 20
    assert Reserve(tmp_path, 0).fill() == 0  # sized down: the blocks go


@pytest.mark.parametrize(
    ("total", "size"),
    [(4 << 20, 512 << 10), (48 << 20, 1536 << 10), (1 << 30, 32 << 20), (1 << 40, 64 << 20)],
)
def test_the_reserve_is_a_32nd_of_the_disk_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, total: int, size: int
) -> None:
    real = os.statvfs(tmp_path)

    class Fake:
        f_frsize = 4096
        f_blocks = total // 4096
        f_bavail = real.f_bavail

    monkeypatch.setattr(os, "statvfs", lambda _: Fake)
    assert default_size(tmp_path) == size


def _fill(path: Path) -> None:
    """Write ``path`` until the disk is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while os.write(fd, os.urandom(1 << 16)):
            pass
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def test_a_full_disk_spends_the_reserve_to_delete_and_records_what_it_could_not_keep(
    tmp_path: Path,
) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    with small_tmpfs(src, "16m"):
        (src / "small.bin").write_bytes(os.urandom(64 << 10))
        (src / "big.bin").write_bytes(os.urandom(3 << 20))
        config = Config(rescan_interval=0, reserve_bytes=1 << 20)
        with Engine.open(src, config=config) as eng:
            eng.scan()
            eng.workspace.reserve.fill()
            _fill(src / "filler")
            # An in-place write cannot keep the bytes: ENOSPC, the reserve untouched.
            with pytest.raises(OSError, match="No space left") as info:
                eng.workspace.preserve(RelPath("big.bin"))
            assert info.value.errno == errno.ENOSPC
            assert eng.workspace.reserve.held() >= 1 << 20
            # A delete keeps what the reserve allows ...
            assert eng.workspace.preserve_freeing(RelPath("small.bin"), link=True) is not None
            os.unlink(src / "small.bin")
            eng.workspace.record_unlink(RelPath("small.bin"))
            (small,) = eng.history.versions(RelPath("small.bin"))
            assert small.available
            assert small.not_kept is None
            # ... and records what it could not keep.
            eng.workspace.preserve_freeing(RelPath("big.bin"), link=True)
            os.unlink(src / "big.bin")
            eng.workspace.record_unlink(RelPath("big.bin"))
            (big,) = eng.history.versions(RelPath("big.bin"))
            assert not big.available
            assert big.not_kept == "disk full"
            events = [e for _, e in eng.workspace.store.iter_state_log() if e["ev"] == "not-kept"]
            assert [e["path"] for e in events] == ["big.bin"]
            os.unlink(src / "filler")
            eng.scan()
            assert not run_checks(eng.workspace)


def test_a_full_disk_without_a_reserve_drops_reassembled_versions_first(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    with small_tmpfs(src, "16m"):
        old = os.urandom(512 << 10)
        (src / "doc.bin").write_bytes(old)
        (src / "other.bin").write_bytes(os.urandom(256 << 10))
        with Engine.open(src, config=Config(rescan_interval=0, reserve_bytes=0)) as eng:
            eng.scan()
            eng.workspace.preserve(RelPath("doc.bin"))
            (src / "doc.bin").write_bytes(b"new")
            eng.workspace.record_write(RelPath("doc.bin"))
            path = eng.history.version_file(RelPath("doc.bin"), 1)  # reassembled into the cache
            assert path is not None
            assert Path(path).read_bytes() == old
            _fill(src / "filler")
            # No reserve at all: the cache of reassembled versions makes the room.
            assert eng.workspace.preserve_freeing(RelPath("other.bin"), link=True) is not None
            assert not Path(path).exists()
            assert eng.history.versions(RelPath("other.bin"))[0].not_kept is None
            ref = eng.history.version_ref(RelPath("doc.bin"), 1)
            assert ref is not None
            reader = eng.workspace.open_blob_reading(ref)  # no room to reassemble it again
            assert not isinstance(reader, int)
            assert reader.pread(len(old) + 1, 0) == old


@pytest.fixture
def indexed(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "a.txt").write_text("one\n")
    (src / "b.txt").write_text("two\n")
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        eng.workspace.preserve(RelPath("a.txt"))
        (src / "a.txt").write_text("one, edited\n")
        eng.workspace.record_write(RelPath("a.txt"))
        trio.run(eng.drain)
        assert run_checks(eng.workspace) == []
        yield eng


def test_check_finds_a_corrupt_blob_and_repair_moves_it_aside(indexed: Engine) -> None:
    h = indexed.history.versions(RelPath("a.txt"))[0].hash
    path = indexed.workspace.blobs.path(h)
    os.chmod(path, 0o600)
    path.write_bytes(b"rot")
    problems = run_checks(indexed.workspace)
    assert any(p.check == "blobs" and "does not match" in p.message for p in problems)
    run_checks(indexed.workspace, repair=True)
    assert not indexed.workspace.blobs.has(h)
    assert (indexed.store_dir / f"corrupt-blob-{h}").exists()


def test_check_finds_an_orphan_blob(indexed: Engine) -> None:
    indexed.workspace.blobs.put_bytes(b"nobody refers to me")
    problems = run_checks(indexed.workspace)
    assert [p.check for p in problems] == ["orphans"]
    run_checks(indexed.workspace, repair=True)
    assert run_checks(indexed.workspace) == []


def test_check_finds_broken_versions_and_repairs_them(indexed: Engine) -> None:
    with indexed.workspace.store.write() as txn:
        indexed.workspace.store.put_versions(txn, "b.txt", [])
        indexed.workspace.store.put_versions(
            txn, "a.txt", [[2, "0" * 64, 0.0, "write", 1], [1, "1" * 64, 0.0, "write", 1]]
        )
    problems = run_checks(indexed.workspace)
    messages = " ".join(p.message for p in problems)
    assert "b.txt: tracked file without versions" in messages
    assert "a.txt: version list out of order" in messages
    run_checks(indexed.workspace, repair=True)
    assert run_checks(indexed.workspace) == []


def test_check_drops_malformed_parse_records(indexed: Engine) -> None:
    with indexed.workspace.store.write() as txn:
        txn.put(b"zz|text@1", dumps({"status": "weird"}), db=indexed.workspace.store.dbs["parses"])
        txn.put(b"not-json", b"\xff{", db=indexed.workspace.store.dbs["parses"])
    problems = run_checks(indexed.workspace)
    assert sum(p.check == "parses" for p in problems) == 2
    run_checks(indexed.workspace, repair=True)
    assert run_checks(indexed.workspace) == []


def test_check_finds_malformed_file_records(indexed: Engine) -> None:
    with indexed.workspace.store.write() as txn:
        txn.put(b"ghost.txt", b"{}", db=indexed.workspace.store.dbs["files"])
    assert any(p.check == "files" for p in run_checks(indexed.workspace))
    run_checks(indexed.workspace, repair=True)
    assert run_checks(indexed.workspace) == []


def _failing_pool(monkeypatch: pytest.MonkeyPatch, failures: int) -> list[str]:
    """Make the pool's first ``failures`` parses fail in its own machinery
    (as a fork refused under load would), not in a parser."""
    from swfs import engine as engine_mod
    from swfs.views.parsework import ParsePool

    monkeypatch.setattr(engine_mod, "INTERNAL_RETRY_DELAY", 0.0)
    real = ParsePool.parse
    calls: list[str] = []

    async def parse(self: ParsePool, abs_path: str, rel: str, **kwargs: Any) -> object:
        calls.append(rel)
        if len(calls) <= failures:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
        return await real(self, abs_path, rel, **kwargs)

    monkeypatch.setattr(ParsePool, "parse", parse)
    return calls


def test_a_parse_whose_machinery_fails_once_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the exception left the view pending forever."""
    src = tmp_path / "ws"
    src.mkdir()
    (src / "notes.txt").write_text("parsed on the second try\n")
    calls = _failing_pool(monkeypatch, failures=1)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        view = eng.views.parsed_view(RelPath("notes.txt"))
        assert view is not None
        assert view.freshness == Freshness.CURRENT
    assert calls == ["notes.txt", "notes.txt"]


def test_a_parse_whose_machinery_keeps_failing_fails_the_view_and_names_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swfs import engine as engine_mod

    src = tmp_path / "ws"
    src.mkdir()
    (src / "notes.txt").write_text("never parsed\n")
    calls = _failing_pool(monkeypatch, failures=1000)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        view = eng.views.parsed_view(RelPath("notes.txt"))
        assert view is not None
        assert view.freshness == Freshness.FAILED
        assert "could not run its parser" in (view.error or "")
        assert "Resource temporarily unavailable" in (view.error or "")
    assert len(calls) == engine_mod.INTERNAL_TRIES


def test_a_parse_the_engine_cannot_record_fails_the_view_and_names_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the exception out of apply_parse reached the scheduler, which
    logged it and left the view pending for good (``swfs sync`` never ended)."""
    from swfs.views.parsework import ParseOutcome

    src = tmp_path / "ws"
    src.mkdir()
    (src / "notes.txt").write_text("parsed, but not recordable\n")
    real = Workspace.apply_parse
    refused: list[str] = []

    def apply_parse(self: Workspace, rel: RelPath, outcome: ParseOutcome, **kwargs: Any) -> bool:
        if outcome.status != "failed":
            refused.append(outcome.status)
            raise ValueError("a unit the store refuses")
        return real(self, rel, outcome, **kwargs)

    monkeypatch.setattr(Workspace, "apply_parse", apply_parse)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        view = eng.views.parsed_view(RelPath("notes.txt"))
        assert view is not None
        assert view.freshness == Freshness.FAILED
        assert view.error == (
            "swfs could not record the parse: ValueError: a unit the store refuses"
        )
    assert refused == ["ok"]


def test_a_parse_job_that_cannot_start_its_child_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the worker: an error outside the parser is an INTERNAL outcome,
    never an exception that leaves the file unparsed without a word."""
    from swfs.views import parsework, sandbox

    def refuse(*_args: object, **_kw: object) -> object:
        raise OSError(errno.EAGAIN, "fork refused")

    monkeypatch.setattr(sandbox.Children, "get", refuse)
    path = tmp_path / "notes.txt"
    path.write_text("x\n")
    outcome = parsework.parse_job(str(path), "notes.txt", parsework.ParseOptions(), None)
    assert outcome.status == parsework.INTERNAL
    assert "fork refused" in (outcome.error or "")
