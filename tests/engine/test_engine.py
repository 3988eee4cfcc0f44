"""The engine without FUSE: scanning, the parse cache, freshness, versions,
the review and the journal, on real folders."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from swfs.api import ChangeStatus, Freshness, RelPath
from swfs.engine import Engine, rescan_wait
from swfs.store.fsutil import hash_file
from swfs.workspace import Config, ScanStats


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "notes.md").write_text("# Notes\nthe quick brown fox\n")
    (root / "data.csv").write_text("x,y\n1,2\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return root


@pytest.fixture
def engine(src: Path) -> Iterator[Engine]:
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        yield eng


def parse_events(eng: Engine) -> list[dict[str, object]]:
    return [ev for _, ev in eng.workspace.store.iter_state_log() if ev["ev"] == "parse"]


def test_index_makes_every_supported_file_current(engine: Engine) -> None:
    counts = engine.views.counts()
    assert counts["files"] == 4
    assert counts["current"] == 3
    assert counts["unsupported"] == 1
    view = engine.views.parsed_view(RelPath("docs/a.txt"))
    assert view is not None
    assert view.freshness == Freshness.CURRENT
    content = view.units[0].content.decode()
    first, _, body = content.partition("\n")
    assert first.startswith('<!-- swfs source="docs/a.txt" unit="content.txt"')
    assert 'freshness="current"' in first
    assert body == "alpha\nbeta\ngamma\n"


def test_rescan_of_unchanged_tree_hashes_and_parses_nothing(engine: Engine) -> None:
    before = len(parse_events(engine))
    stats = engine.scan()
    assert stats.hashed == 0
    trio.run(engine.drain)
    assert len(parse_events(engine)) == before


def test_edit_reparses_only_the_edited_file(engine: Engine, src: Path) -> None:
    before = len(parse_events(engine))
    (src / "notes.md").write_text("# Notes\nthe slow red fox\n")
    engine.scan()
    assert engine.workspace.file_state(RelPath("notes.md")).freshness == Freshness.STALE  # type: ignore[union-attr]
    view = engine.views.parsed_view(RelPath("notes.md"))
    assert view is not None
    assert view.freshness == Freshness.STALE
    assert b"quick brown" in view.units[0].content  # the prior view, marked stale
    assert b'freshness="stale"' in view.units[0].content
    trio.run(engine.drain)
    events = parse_events(engine)[before:]
    assert [ev["path"] for ev in events] == ["notes.md"]
    view = engine.views.parsed_view(RelPath("notes.md"))
    assert view is not None
    assert view.freshness == Freshness.CURRENT
    assert b"slow red fox" in view.units[0].content


def test_rename_copy_and_revert_reuse_the_cache(engine: Engine, src: Path) -> None:
    before = len(parse_events(engine))
    original = (src / "notes.md").read_text()
    os.rename(src / "docs" / "a.txt", src / "docs" / "renamed.txt")
    (src / "copy.md").write_text(original)
    (src / "notes.md").write_text("changed\n")
    engine.scan()
    trio.run(engine.drain)
    after_edit = len(parse_events(engine))
    assert after_edit == before + 1  # only the edit
    (src / "notes.md").write_text(original)  # revert
    engine.scan()
    trio.run(engine.drain)
    assert len(parse_events(engine)) == after_edit
    for rel in ("docs/renamed.txt", "copy.md", "notes.md"):
        assert engine.workspace.file_state(RelPath(rel)).freshness == Freshness.CURRENT  # type: ignore[union-attr]
    entries = {e.rel: e for e in engine.reviews.review()}
    assert entries["docs/renamed.txt"].status == ChangeStatus.RENAMED
    assert entries["docs/renamed.txt"].old_rel == "docs/a.txt"
    assert entries["copy.md"].status == ChangeStatus.ADDED
    assert "notes.md" not in entries  # reverted: no diff


def test_editor_save_is_one_new_version(engine: Engine, src: Path) -> None:
    rel = RelPath("notes.md")
    assert len(engine.history.versions(rel)) == 1
    # What an editor does through the mount: write a temp file, rename it over.
    engine.workspace.preserve(rel)
    tmp = src / ".notes.md.swp"
    tmp.write_text("# Notes\nrewritten\n")
    engine.workspace.record_write(RelPath(".notes.md.swp"))
    engine.workspace.preserve_inode(rel)
    os.rename(tmp, src / "notes.md")
    engine.workspace.record_rename(RelPath(".notes.md.swp"), rel)
    versions = engine.history.versions(rel)
    assert [v.number for v in versions] == [1, 2]
    assert versions[1].hash == hash_file(src / "notes.md")
    assert engine.history.versions(RelPath(".notes.md.swp")) == []
    assert engine.workspace.file_state(RelPath(".notes.md.swp")) is None
    # The old bytes were preserved and are readable as version 1.
    old = engine.history.version_file(rel, 1)
    assert old is not None
    assert Path(old).read_text() == "# Notes\nthe quick brown fox\n"
    statuses = {e.rel: e.status for e in engine.reviews.review()}
    assert statuses == {"notes.md": ChangeStatus.MODIFIED}


def test_in_place_write_preserves_old_bytes(engine: Engine, src: Path) -> None:
    rel = RelPath("docs/a.txt")
    h0 = hash_file(src / rel)
    engine.workspace.preserve(rel)
    with open(src / rel, "r+") as f:
        f.write("ALPHA")
    state = engine.workspace.record_write(rel)
    assert state is not None
    assert state.hash != h0
    v1 = engine.history.version_file(rel, 1)
    assert v1 is not None
    assert hash_file(v1) == h0
    restored = engine.history.restore(rel, 1)
    assert restored.number == 3
    assert hash_file(src / rel) == h0
    causes = [v.cause.value for v in engine.history.versions(rel)]
    assert causes == ["baseline", "write", "restore"]


def test_text_review_diff_has_git_headers(engine: Engine, src: Path) -> None:
    (src / "docs" / "a.txt").write_text("alpha\nBETA\ngamma\n")
    engine.scan()
    trio.run(engine.drain)
    diff = engine.reviews.review_diff(RelPath("docs/a.txt"))
    assert diff is not None
    text = diff.decode()
    assert "--- a/docs/a.txt" in text
    assert "+++ b/docs/a.txt" in text
    assert "-beta" in text
    assert "+BETA" in text
    assert engine.reviews.review_diff(RelPath("notes.md")) is None
    assert b"docs/a.txt" in engine.reviews.review_summary()


def test_baseline_accepts_present_state(engine: Engine, src: Path) -> None:
    (src / "notes.md").write_text("new\n")
    engine.scan()
    assert engine.reviews.review()
    engine.history.set_baseline()
    assert list(engine.reviews.review()) == []


def test_symlinks_are_never_followed(tmp_path: Path, src: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("TOP SECRET outside the workspace\n")
    os.symlink(outside, src / "link.txt")
    os.symlink(tmp_path, src / "linkdir")
    with Engine.open(src) as eng:
        eng.scan()
        trio.run(eng.drain)
        assert eng.workspace.file_state(RelPath("link.txt")) is None
        assert eng.workspace.check_file(RelPath("link.txt")) is None
        assert all(not p.startswith("linkdir") for p in eng.views.parsed_paths())
        for rel in eng.views.parsed_paths():
            view = eng.views.parsed_view(rel)
            assert view is not None
            assert all(b"TOP SECRET" not in u.content for u in view.units)


def test_external_change_detected_on_access(engine: Engine, src: Path) -> None:
    rel = RelPath("data.csv")
    (src / rel).write_text("x,y\n3,4\n")
    state = engine.workspace.check_file(rel)
    assert state is not None
    assert state.freshness == Freshness.STALE
    versions = engine.history.versions(rel)
    assert [v.cause.value for v in versions] == ["baseline", "external"]
    assert not versions[0].available  # overwritten behind our back: hash only


def test_journal_records_transitions(engine: Engine, src: Path) -> None:
    (src / "notes.md").write_text("x\n")
    engine.scan()
    os.unlink(src / "data.csv")
    engine.scan()
    events = [ev["ev"] for _, ev in engine.workspace.store.iter_state_log()]
    for ev in ("add", "scan", "baseline", "parse", "write", "unlink"):
        assert ev in events


def test_failed_rename_after_preserve_inode_never_lets_a_write_change_history(
    engine: Engine, src: Path
) -> None:
    rel = RelPath("notes.md")
    mode = os.stat(src / rel).st_mode
    engine.workspace.preserve_inode(rel)  # ... and then the rename over it fails
    assert os.stat(src / rel).st_mode == mode  # the user's file is untouched
    engine.workspace.preserve(rel)  # before an in-place write
    with open(src / rel, "a") as f:
        f.write("appended\n")
    engine.workspace.record_write(rel)
    old = engine.history.version_file(rel, 1)
    assert old is not None
    assert Path(old).read_text() == "# Notes\nthe quick brown fox\n"


def test_long_paths_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    deep = root
    for i in range(6):
        deep = deep / (f"{i}" + "d" * 100)
    deep.mkdir(parents=True)
    (deep / "file.txt").write_text("deep text\n")
    with Engine.open(root) as eng:
        trio.run(eng.drain)
        rel = RelPath((deep / "file.txt").relative_to(root).as_posix())
        assert len(rel.encode()) > 511
        assert rel in list(eng.views.parsed_paths())
        view = eng.views.parsed_view(rel)
        assert view is not None
        assert view.freshness == Freshness.CURRENT
        assert [v.number for v in eng.history.versions(rel)] == [1]
        assert RelPath(rel) in list(eng.history.versioned_paths())


def test_ignored_and_oversized_files_keep_hashes_but_no_bytes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".swfsignore").write_text("scratch/\n*.log\n")
    (root / "scratch").mkdir()
    (root / "scratch" / "tmp.txt").write_text("scratch\n")
    (root / "run.log").write_text("log line\n")
    (root / "big.txt").write_text("x" * 5000)
    (root / "kept.txt").write_text("kept\n")
    config = Config(max_preserve_bytes=4096, rescan_interval=0)
    with Engine.open(root, config=config) as eng:
        eng.scan()
        for name in ("scratch/tmp.txt", "run.log", "big.txt", "kept.txt"):
            eng.workspace.preserve(RelPath(name))
            (root / name).write_text("changed\n")
            eng.workspace.record_write(RelPath(name))
        for name in ("scratch/tmp.txt", "run.log", "big.txt"):
            versions = eng.history.versions(RelPath(name))
            assert len(versions) == 2, name  # the hash history is kept...
            assert not versions[0].available, name  # ...but not the bytes
        assert eng.history.versions(RelPath("kept.txt"))[0].available


def test_format_1_store_is_upgraded_when_opened(tmp_path: Path) -> None:
    from swfs.store.records import FORMAT_VERSION, Store, dumps

    store = Store(tmp_path / "store")
    with store.write() as txn:
        txn.put(b"format_version", dumps(1), db=store.dbs["meta"])
        old = {
            "h": "ab" * 32,
            "s": 5,
            "m": 7,
            "c": 8,
            "i": 9,
            "mode": 0o100644,
            "u": 0,
            "g": 0,
            "p": "text@1",
            "v": None,
            "vp": None,
        }
        txn.put(b"a.txt", dumps(old), db=store.dbs["files"])
    store.close()
    store = Store(tmp_path / "store")
    try:
        assert store.get_meta("format_version") == FORMAT_VERSION
        rec = store.get_file("a.txt")
        assert rec is not None
        assert (rec.hash, rec.signature()) == ("ab" * 32, (5, 7, 8, 9))
        assert store.file_signatures() == {"a.txt": b"5,7,8,9"}
    finally:
        store.close()


def test_new_parsers_reexamine_unchanged_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parser added or upgraded after a file was indexed re-parses it even
    though its bytes did not change: a record must not keep an old parser's
    verdict (a failure it no longer makes) for as long as the file sits."""
    from parsers import registry
    from tests import evilparsers

    src = tmp_path / "ws"
    src.mkdir()
    (src / "notes.txt").write_text("alpha\n")
    with Engine.open(src) as eng:
        trio.run(eng.drain)
        before = eng.workspace.store.get_file("notes.txt")
        versions = len(eng.workspace.store.get_versions("notes.txt"))
    assert before is not None
    assert before.parser is not None
    assert before.parser.startswith("text@")
    # Workers inherit the environment, so they see the new parser too.
    monkeypatch.setenv(registry.EXTRA_ENV, "tests.evilparsers:UpgradedTextParser")
    registry._instances.cache_clear()
    try:
        with Engine.open(src) as eng:
            trio.run(eng.drain)
            after = eng.workspace.store.get_file("notes.txt")
            assert after is not None
            assert after.parser == evilparsers.UpgradedTextParser.key()
            assert after.hash == before.hash
            assert len(eng.workspace.store.get_versions("notes.txt")) == versions
            view = eng.views.parsed_view(RelPath("notes.txt"))
            assert view is not None
            assert view.freshness == Freshness.CURRENT
            assert view.units[0].content.endswith(b"upgraded: alpha\n")
    finally:
        monkeypatch.delenv(registry.EXTRA_ENV)
        registry._instances.cache_clear()


def test_unchanged_hash_is_the_recorded_hash_only_while_the_stat_matches(
    engine: Engine, src: Path
) -> None:
    """What an open asks: the recorded hash when the file's stat is the one
    recorded with it (the access journal takes it as the read's hash), None
    once the file changed behind the engine's back."""
    path = src / "docs" / "a.txt"
    rel = RelPath("docs/a.txt")
    assert engine.workspace.unchanged_hash(rel, os.stat(path)) == hash_file(path)
    assert engine.workspace.is_unchanged(rel, os.stat(path))
    path.write_text("alpha\nbeta\ngamma\ndelta\n")
    assert engine.workspace.unchanged_hash(rel, os.stat(path)) is None
    assert not engine.workspace.is_unchanged(rel, os.stat(path))
    assert engine.workspace.unchanged_hash(RelPath("docs/never.txt"), os.stat(path)) is None
    engine.workspace.check_file(rel)
    assert engine.workspace.unchanged_hash(rel, os.stat(path)) == hash_file(path)


def test_the_backstop_rescan_waits_fifty_times_its_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan of a large tree holds the GIL for seconds and every request
    waits meanwhile: the next scan waits RESCAN_DUTY times as long as the
    last one took, however short --rescan-interval is."""
    src = tmp_path / "src"
    src.mkdir()
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0.01)) as eng:
        scans: list[float] = []

        def slow_scan() -> Any:
            scans.append(time.monotonic())
            time.sleep(0.05)  # 50 x 0.05 s = 2.5 s before the next
            return ScanStats()

        monkeypatch.setattr(eng, "scan", slow_scan)

        async def main() -> None:
            with trio.move_on_after(2.0):
                await eng._rescan_loop()

        trio.run(main)
    assert len(scans) == 1, scans
    assert rescan_wait(30.0, 0.1) == 30.0
    assert rescan_wait(30.0, 2.0) == 100.0
