"""Submissions, reset, snapshots, former baselines and gc in the engine,
without FUSE.  Writes go through the engine's protocol as the daemon drives
it (keep the bytes, change the file, record), so the history holds what a
mount would have kept."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swfs.api import RelPath
from swfs.engine import Engine
from swfs.history import snapshots as history
from swfs.review import changes as review
from swfs.store import gc
from swfs.store.fsutil import hash_bytes
from swfs.workspace import Config, Workspace, WorkspaceError

# -------------------------------------------------------------- helpers


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``root`` but the store."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".swfs"]
        rel_dir = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel_dir, d))] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.normpath(os.path.join(rel_dir, f))] = Path(p).read_bytes()
    return out


def write(eng: Engine, rel: str, data: bytes) -> None:
    """An in-place write through the mount."""
    path = eng.src / rel
    if path.exists():
        eng.workspace.preserve(RelPath(rel))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    eng.workspace.record_write(RelPath(rel))


def unlink(eng: Engine, rel: str) -> None:
    eng.workspace.preserve_inode(RelPath(rel))
    (eng.src / rel).unlink()
    eng.workspace.record_unlink(RelPath(rel))


def rename(eng: Engine, old: str, new: str) -> None:
    if (eng.src / new).exists():
        eng.workspace.preserve_inode(RelPath(new))
    (eng.src / new).parent.mkdir(parents=True, exist_ok=True)
    os.rename(eng.src / old, eng.src / new)
    eng.workspace.record_rename(RelPath(old), RelPath(new))


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "empty" / "inner").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha\nbeta\n")
    (root / "docs" / "deep" / "b.txt").write_text("bee\n")
    (root / "notes.md").write_text("# Notes\n")
    (root / "gone.csv").write_text("x,y\n1,2\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 64)
    (root / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "script.sh").chmod(0o755)
    return root


@pytest.fixture
def engine(src: Path) -> Iterator[Engine]:
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        eng.scan()
        yield eng


def change_everything(eng: Engine) -> None:
    write(eng, "docs/a.txt", b"alpha\nBETA\n")  # modified
    write(eng, "script.sh", b"#!/bin/sh\necho bye\n")  # modified, mode kept
    write(eng, "new/sub/dir/made.txt", b"new file\n")  # added, in new directories
    write(eng, "docs/extra.md", b"# extra\n")  # added beside kept files
    unlink(eng, "gone.csv")  # deleted
    rename(eng, "docs/deep/b.txt", "moved/b.txt")  # renamed: docs/deep empties
    rename(eng, "blob.bin", "blob2.bin")  # renamed, then modified
    write(eng, "blob2.bin", b"different")
    os.rmdir(eng.src / "empty" / "inner")  # a directory that held no file


# ---------------------------------------------------------------- reset


def table(eng: Engine) -> dict[str, str]:
    return {rel: rec.hash for rel, rec in eng.workspace.store.all_files().items()}


def test_reset_to_baseline_restores_the_tree_byte_for_byte(engine: Engine) -> None:
    before = tree(engine.src)
    assert history.current_hashes(engine.workspace) == table(engine)  # the index is built
    inodes = {rel: os.stat(engine.src / "notes.md").st_ino for rel in ("notes.md",)}
    change_everything(engine)
    assert tree(engine.src) != before
    result = history.reset(engine.workspace)
    assert tree(engine.src) == before
    assert review.changes(engine.workspace) == []
    assert os.stat(engine.src / "script.sh").st_mode & 0o777 == 0o755
    # Unchanged files are not touched: same inode.
    assert os.stat(engine.src / "notes.md").st_ino == inodes["notes.md"]
    assert result.removed == 3  # made.txt, extra.md, blob2.bin (modified after the rename)
    assert result.renamed == 1
    assert result.restored == 4  # a.txt, script.sh, gone.csv, blob.bin
    assert result.dirs_removed == 4  # new/sub/dir, new/sub, new, moved
    assert result.dirs_created == 1  # empty/inner
    # What the reset replaced is kept: the agent's edit is a version.
    versions = engine.history.versions(RelPath("docs/a.txt"))
    assert [v.hash for v in versions][-2:] == [
        hash_bytes(b"alpha\nBETA\n"),
        hash_bytes(b"alpha\nbeta\n"),
    ]
    assert all(v.available for v in versions[-2:])
    # The in-memory index followed every change the engine recorded.
    assert history.current_hashes(engine.workspace) == table(engine)
    change_everything(engine)
    assert history.current_hashes(engine.workspace) == table(engine)
    history.reset(engine.workspace)
    assert tree(engine.src) == before
    # A second reset has nothing to do.
    again = history.reset(engine.workspace)
    assert (again.removed, again.restored, again.renamed) == (0, 0, 0)
    kinds = [ev["ev"] for _, ev in engine.workspace.store.iter_state_log()]
    assert kinds.count("reset") == 3


def test_reset_to_a_submission_brings_back_the_submitted_state(engine: Engine) -> None:
    change_everything(engine)
    submitted = tree(engine.src)
    sub = history.submit(engine.workspace, "task1")
    assert {f.path: f.status for f in sub.files} == {
        "docs/a.txt": "modified",
        "script.sh": "modified",
        "new/sub/dir/made.txt": "added",
        "docs/extra.md": "added",
        "moved/b.txt": "renamed",
        "blob2.bin": "added",
    }
    for f in sub.files:
        assert f.hash == hash_bytes((engine.src / f.path).read_bytes())
    history.reset(engine.workspace)
    assert tree(engine.src) != submitted
    history.reset(engine.workspace, "task1")
    # Directories that held no file in the submitted state are not in a
    # manifest of files: the snapshot recorded them.
    assert tree(engine.src) == submitted
    listed = history.list_submissions(engine.workspace)
    assert [s.name for s in listed] == ["task1"]
    assert listed[0].files == sub.files
    assert any(ev["ev"] == "submit" for _, ev in engine.workspace.store.iter_state_log())


def test_submit_named_paths_and_directories(engine: Engine) -> None:
    write(engine, "out/report.md", b"# report\n")
    write(engine, "out/data.csv", b"a,b\n")
    write(engine, "scratch.txt", b"notes\n")
    sub = history.submit(engine.workspace, "final", ["out", "notes.md"])
    assert [(f.path, f.status) for f in sub.files] == [
        ("notes.md", "unchanged"),
        ("out/data.csv", "added"),
        ("out/report.md", "added"),
    ]
    with pytest.raises(WorkspaceError, match="nope.txt: no such file"):
        history.submit(engine.workspace, "other", ["nope.txt"])
    with pytest.raises(WorkspaceError, match="exists already"):
        history.submit(engine.workspace, "final")
    assert "other" not in engine.history.snapshots()  # nothing half-made


def test_reset_refuses_when_bytes_were_not_kept_and_changes_nothing(engine: Engine) -> None:
    # Changed behind the mount: the old bytes were never kept.
    (engine.src / "notes.md").write_text("# Overwritten behind the mount\n")
    write(engine, "docs/extra.md", b"added\n")
    engine.scan()
    before = tree(engine.src)
    with pytest.raises(WorkspaceError, match=r"notes\.md.*nothing was changed"):
        history.reset(engine.workspace)
    assert tree(engine.src) == before


def test_reset_takes_bytes_from_a_copy_that_still_holds_them(engine: Engine) -> None:
    # Deleted behind the mount, but a copy with the same bytes exists.
    os.link(engine.src / "notes.md", engine.src / "copy.md")
    os.unlink(engine.src / "notes.md")
    engine.scan()
    history.reset(engine.workspace)
    assert (engine.src / "notes.md").read_text() == "# Notes\n"
    assert not (engine.src / "copy.md").exists()


def test_reset_leaves_a_directory_with_untracked_content(engine: Engine) -> None:
    write(engine, "new/a.txt", b"a\n")
    os.symlink("a.txt", engine.src / "new" / "link")
    result = history.reset(engine.workspace)
    assert not (engine.src / "new" / "a.txt").exists()
    assert (engine.src / "new" / "link").is_symlink()
    assert result.kept_dirs == ["new"]


def test_reset_of_many_files_touches_only_the_changes(tmp_path: Path) -> None:
    root = tmp_path / "big"
    for i in range(2000):
        d = root / f"d{i % 40:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i}\n")
    with Engine.open(root, config=Config(rescan_interval=0)) as eng:
        eng.scan()
        ctimes = {rel: st.st_ctime_ns for rel, st in eng.workspace.walk()}
        for i in range(0, 2000, 100):
            write(eng, f"d{i % 40:02d}/f{i:05d}.txt", b"changed\n")
        plan = history.plan_reset(
            eng.workspace, history.target_state(eng.workspace, history.BASELINE)
        )
        assert plan.changes() == 20
        assert len(plan.write) == 20
        history.reset(eng.workspace)
        after = {rel: st.st_ctime_ns for rel, st in eng.workspace.walk()}
        touched = {rel for rel in after if after[rel] != ctimes[rel]}
        assert touched == {f"d{i % 40:02d}/f{i:05d}.txt" for i in range(0, 2000, 100)}
        assert review.changes(eng.workspace) == []


# ------------------------------------------------------------- snapshots


def test_restore_from_snapshot_and_baseline(engine: Engine) -> None:
    write(engine, "docs/a.txt", b"v2\n")
    history.take_snapshot(engine.workspace, "s1")
    write(engine, "docs/a.txt", b"v3\n")
    history.restore_from(engine.workspace, "docs/a.txt", "s1")
    assert (engine.src / "docs/a.txt").read_bytes() == b"v2\n"
    history.restore_from(engine.workspace, "docs/a.txt", history.BASELINE)
    assert (engine.src / "docs/a.txt").read_bytes() == b"alpha\nbeta\n"
    assert [v.cause.value for v in engine.history.versions(RelPath("docs/a.txt"))][-2:] == [
        "restore",
        "restore",
    ]
    with pytest.raises(WorkspaceError, match="no such snapshot"):
        history.restore_from(engine.workspace, "docs/a.txt", "nope")
    with pytest.raises(WorkspaceError, match="not in 's1'"):
        history.restore_from(engine.workspace, "other.txt", "s1")


def test_snapshot_names_listing_and_deletion(engine: Engine) -> None:
    history.take_snapshot(engine.workspace, "one")
    for bad in ("baseline", "a/b", ".hidden", "x@y", "one", "2024", ""):
        with pytest.raises(WorkspaceError):
            history.take_snapshot(engine.workspace, bad)
    history.submit(engine.workspace, "sub")
    snaps = {s.name: s for s in history.list_snapshots(engine.workspace)}
    assert snaps["one"].kind == "snapshot"
    assert snaps["sub"].kind == "submission"
    assert snaps["one"].files == 6
    assert snaps["one"].bytes == sum(len(d) for d in tree(engine.src).values() if d)
    with pytest.raises(WorkspaceError, match="submission"):
        history.delete_snapshot(engine.workspace, "sub")
    assert history.delete_snapshot(engine.workspace, "one") == 6
    assert "one" not in engine.history.snapshots()
    with pytest.raises(WorkspaceError, match="no such snapshot"):
        history.delete_snapshot(engine.workspace, "one")


def test_rebaseline_keeps_the_previous_baseline(engine: Engine) -> None:
    write(engine, "docs/a.txt", b"second\n")
    engine.history.set_baseline()
    kept = [s for s in history.list_snapshots(engine.workspace) if s.kind == "baseline"]
    assert len(kept) == 1
    assert kept[0].name.startswith("baseline-")
    assert engine.history.snapshot_manifest(kept[0].name)["docs/a.txt"] == hash_bytes(
        b"alpha\nbeta\n"
    )
    # The version marked as the baseline is the present baseline's.
    assert history.baseline_version(engine.workspace, "docs/a.txt") == 2
    write(engine, "docs/a.txt", b"alpha\nbeta\n")  # back to the first bytes: version 3
    assert history.baseline_version(engine.workspace, "docs/a.txt") == 2
    # Reset to the former baseline brings its bytes back.
    history.reset(engine.workspace, kept[0].name)
    assert (engine.src / "docs/a.txt").read_bytes() == b"alpha\nbeta\n"
    # A baseline that changes nothing keeps no copy of itself.
    engine.history.set_baseline()
    engine.history.set_baseline()
    assert len([s for s in history.list_snapshots(engine.workspace) if s.kind == "baseline"]) == 2


# ------------------------------------------------------------- temp files


def test_short_lived_files_keep_no_history(engine: Engine) -> None:
    write(engine, ".a.txt.swp", b"one\n")
    write(engine, ".a.txt.swp", b"two\n")
    unlink(engine, ".a.txt.swp")
    assert engine.history.versions(RelPath(".a.txt.swp")) == []
    write(engine, "docs/.a.txt.tmp", b"draft 1\n")
    write(engine, "docs/.a.txt.tmp", b"draft 2\n")
    rename(engine, "docs/.a.txt.tmp", "docs/a.txt")
    assert engine.history.versions(RelPath("docs/.a.txt.tmp")) == []
    assert engine.history.versions(RelPath("docs/a.txt"))[-1].hash == hash_bytes(b"draft 2\n")
    # A file of the baseline is never a temp file.
    unlink(engine, "notes.md")
    assert len(engine.history.versions(RelPath("notes.md"))) == 1


def test_long_lived_files_keep_their_history(src: Path) -> None:
    with Engine.open(src, config=Config(rescan_interval=0, temp_lifetime=0.0)) as eng:
        eng.scan()
        write(eng, "draft.txt", b"one\n")
        write(eng, "draft.txt", b"two\n")
        unlink(eng, "draft.txt")
        assert len(eng.history.versions(RelPath("draft.txt"))) == 2


# -------------------------------------------------------------------- gc


@pytest.fixture
def lasting(src: Path) -> Iterator[Engine]:
    """An engine for which no file is a temp file (histories of deleted files
    stay) and every write is a version of its own (no bursts)."""
    config = Config(rescan_interval=0, temp_lifetime=0.0, version_interval=0.0)
    with Engine.open(src, config=config) as eng:
        eng.scan()
        yield eng


def test_gc_frees_what_nothing_needs_and_keeps_snapshots(lasting: Engine) -> None:
    engine = lasting
    big = os.urandom(300_000)
    write(engine, "big.bin", big)
    history.take_snapshot(engine.workspace, "keep-me")
    for i in range(3):
        write(engine, "big.bin", os.urandom(300_000) + bytes([i]))
    write(engine, "docs/a.txt", b"edited\n")
    unlink(engine, "big.bin")
    before = sum(engine.workspace.blobs.size(h) for h in engine.workspace.blobs.iter_hashes())
    dry = gc.collect(engine.workspace, keep_days=0, dry_run=True)
    assert dry.blob_bytes >= 900_000
    assert (
        sum(engine.workspace.blobs.size(h) for h in engine.workspace.blobs.iter_hashes()) == before
    )
    report = gc.collect(engine.workspace, keep_days=0)
    assert report.blob_bytes == dry.blob_bytes
    assert report.blobs_removed >= 3
    after = sum(engine.workspace.blobs.size(h) for h in engine.workspace.blobs.iter_hashes())
    assert before - after == report.blob_bytes
    # Every byte a snapshot or the baseline needs is still there.
    for name in engine.history.snapshots():
        for h in engine.history.snapshot_manifest(name).values():
            assert (
                engine.workspace.blobs.has(h)
                or h in history.current_hashes(engine.workspace).values()
            )
    assert engine.workspace.blobs.has(hash_bytes(big))
    assert engine.workspace.blobs.has(hash_bytes(b"alpha\nbeta\n"))  # the baseline's a.txt
    # The dropped versions are gone from the history; the kept ones readable.
    big_versions = engine.history.versions(RelPath("big.bin"))
    assert [v.hash for v in big_versions] == [hash_bytes(big)]
    assert all(v.available for v in big_versions)
    history.reset(engine.workspace, "keep-me")
    assert (engine.src / "big.bin").read_bytes() == big
    history.reset(engine.workspace)
    assert review.changes(engine.workspace) == []
    again = gc.collect(engine.workspace, keep_days=0)
    assert again.blobs_removed == 0 or again.blob_bytes > 0
    from swfs.check import run_checks

    assert [p for p in run_checks(engine.workspace) if p.check == "blobs"] == []


def test_gc_keeps_the_retention_window(engine: Engine) -> None:
    write(engine, "docs/a.txt", b"one\n")
    write(engine, "docs/a.txt", b"two\n")
    report = gc.collect(engine.workspace, keep_days=7)
    assert report.blobs_removed == 0
    assert report.versions_dropped == 0
    assert all(v.available for v in engine.history.versions(RelPath("docs/a.txt")))


def test_gc_drops_parses_of_hashes_nothing_keeps(engine: Engine) -> None:
    import trio

    trio.run(engine.drain)
    write(engine, "docs/a.txt", b"first edit\n")
    trio.run(engine.drain)
    write(engine, "docs/a.txt", b"second edit\n")
    trio.run(engine.drain)
    rec = engine.workspace.get_record("docs/a.txt")
    assert rec is not None
    assert rec.parser
    first = hash_bytes(b"first edit\n")
    assert engine.workspace.store.get_parse(first, rec.parser) is not None
    report = gc.collect(engine.workspace, keep_days=0)
    assert report.parses_dropped >= 1
    assert engine.workspace.store.get_parse(first, rec.parser) is None
    assert engine.workspace.store.get_parse(rec.hash, rec.parser) is not None  # the present one
    base = engine.workspace.baseline_manifest()["docs/a.txt"]
    assert engine.workspace.store.get_parse(base[0], base[5]) is not None  # the baseline's


def test_gc_rejects_a_negative_window(engine: Engine) -> None:
    with pytest.raises(ValueError, match="0 or more"):
        gc.collect(engine.workspace, keep_days=-1)


def test_store_bytes_counts_the_store(engine: Engine) -> None:
    db = engine.store_dir / "db" / "data.mdb"
    assert gc.store_bytes(engine.workspace) >= db.stat().st_blocks * 512 > 0
    # The reserve for a full disk is said apart: it is no cost of history.
    before = gc.store_bytes(engine.workspace)
    with open(engine.store_dir / "reserve", "wb") as f:
        f.write(b"\1" * (1 << 20))
    assert gc.store_bytes(engine.workspace) == before
    assert gc.reserve_bytes(engine.workspace) >= 1 << 20


def test_reset_where_files_and_directories_swapped_places(engine: Engine) -> None:
    before = tree(engine.src)
    unlink(engine, "notes.md")
    write(engine, "notes.md/inside.txt", b"a directory now\n")
    unlink(engine, "docs/deep/b.txt")
    os.rmdir(engine.src / "docs" / "deep")
    write(engine, "docs/deep", b"a file now\n")
    write(engine, "docs/sub/c.txt", b"beside a restored file\n")
    result = history.reset(engine.workspace)
    assert tree(engine.src) == before
    assert result.kept_dirs == []
    assert review.changes(engine.workspace) == []


def test_temp_files_leave_no_blob_behind_but_reset_keeps_young_work(engine: Engine) -> None:
    from swfs.check import run_checks

    write(engine, ".draft.tmp", b"one\n")
    write(engine, ".draft.tmp", b"two\n")
    unlink(engine, ".draft.tmp")
    write(engine, "docs/.a.swp", b"swap\n")
    rename(engine, "docs/.a.swp", "docs/a.txt")
    # The first draft's bytes were kept by the second write; nothing refers
    # to them now, and check knows why.
    draft = hash_bytes(b"one\n")
    assert engine.workspace.blobs.has(draft)
    assert gc.reclaimable(engine.workspace) == {draft}
    assert run_checks(engine.workspace) == []
    report = gc.collect(engine.workspace)  # within the retention window, still reclaimed
    assert report.blobs_removed == 1
    assert not engine.workspace.blobs.has(draft)
    assert gc.reclaimable(engine.workspace) == set()
    write(engine, "out.txt", b"young output\n")
    history.reset(engine.workspace)
    versions = engine.history.versions(RelPath("out.txt"))
    assert [v.hash for v in versions] == [hash_bytes(b"young output\n")]
    assert versions[0].available
    assert run_checks(engine.workspace) == []


def test_a_young_file_with_an_ordinary_name_keeps_its_history(engine: Engine) -> None:
    """Deleting a report a minute after writing it must not lose it: only
    names editors give their scratch files count as temp files."""
    write(engine, "report.md", b"findings, first draft\n")
    write(engine, "report.md", b"findings, second draft\n")
    unlink(engine, "report.md")
    kept = engine.history.versions(RelPath("report.md"))
    assert [v.hash for v in kept][-1] == hash_bytes(b"findings, second draft\n")
    assert history.looks_temporary("docs/.a.txt.swp")
    assert history.looks_temporary(".~lock.book.xlsx#")
    assert history.looks_temporary("tmpab12cd_9")
    assert history.looks_temporary("notes.md~")
    assert not history.looks_temporary("report.md")
    assert not history.looks_temporary("templates.md")


def test_a_file_deleted_and_written_again_in_one_burst_keeps_the_deleted_bytes(
    src: Path,
) -> None:
    """git checkout deletes a file and writes it anew within a second: the
    deleted version's bytes were kept, so that version stays (a burst may
    replace only a version whose bytes it never kept) and no blob is left
    that nothing refers to."""
    from swfs.check import run_checks

    # A burst an hour long: a busy machine cannot end it between two steps.
    with Engine.open(src, config=Config(rescan_interval=0, version_interval=3600.0)) as engine:
        engine.scan()
        _burst_over_a_deletion(engine, run_checks)


def _burst_over_a_deletion(engine: Engine, run_checks: Callable[[Workspace], list[object]]) -> None:
    write(engine, "report.md", b"first\n")
    write(engine, "report.md", b"second\n")  # opens a burst
    unlink(engine, "report.md")  # keeps the second version's bytes
    write(engine, "report.md", b"third\n")  # inside the burst
    versions = engine.history.versions(RelPath("report.md"))
    assert [v.hash for v in versions][-2:] == [hash_bytes(b"second\n"), hash_bytes(b"third\n")]
    assert versions[-2].available
    assert run_checks(engine.workspace) == []
    write(engine, "report.md", b"fourth\n")  # still inside the burst: replaces the third
    assert [v.hash for v in engine.history.versions(RelPath("report.md"))][-2:] == [
        hash_bytes(b"second\n"),
        hash_bytes(b"fourth\n"),
    ]
    assert run_checks(engine.workspace) == []
