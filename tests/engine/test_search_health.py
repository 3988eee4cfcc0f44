"""The search index's health on the engine, without FUSE (issue 37): files
removed or overwritten under open connections are noticed; while the index
is rebuilt its health says so and every search answers unavailable (never
"no hits"); afterwards it finds what it found before.  A reader's
connection (a command beside a daemon) never removes the WAL files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swfs.engine import Engine
from swfs.find.search import DB_NAME, Caller, SearchIndex

ROOT = Caller(0)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "north.txt").write_text("Revenue in the north territory grew by a third.\n")
    (src / "south.txt").write_text("The south office moved to the harbour.\n")
    with Engine.open(src) as eng:
        eng.scan()
        trio.run(eng.drain)
        eng.search_index.catch_up()
        yield eng


def found(engine: Engine, word: str) -> list[str]:
    result = engine.search_index.search(word, ROOT)
    assert result.error is None, result.error
    assert result.unavailable is None, result.unavailable
    return [h.rel for h in result.hits]


def rebuild_watched(idx: SearchIndex, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The health and a search's answer seen while the rebuild indexes."""
    seen: list[object] = []
    catch_up = idx.catch_up

    def watched(*args: object, **kwargs: object) -> object:
        seen.append(idx.health())
        seen.append(idx.search("territory", ROOT))
        return catch_up(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(idx, "catch_up", watched)
    return seen


@pytest.mark.parametrize("damage", ["removed", "overwritten"])
def test_a_damaged_index_is_noticed_shown_and_rebuilt(
    engine: Engine, damage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = engine.search_index
    assert found(engine, "territory") == ["north.txt"]
    assert idx._check_files() is None  # the files the connections opened
    assert idx._check_files() is None
    db = engine.store_dir / DB_NAME
    if damage == "removed":
        for suffix in ("-wal", "-shm"):
            os.unlink(str(db) + suffix)
    else:
        with open(db, "r+b") as f:
            f.write(b"\xff" * 4096)
    trouble = idx._check_files()
    assert trouble is not None
    seen = rebuild_watched(idx, monkeypatch)
    idx._rebuild(trouble)
    health, during = seen[0], seen[1]
    assert health == {"state": "rebuilding", "reason": trouble}
    assert during.unavailable is not None  # type: ignore[attr-defined]
    assert b"no hits" not in during.render()  # type: ignore[attr-defined]
    assert b"unavailable" in during.render()  # type: ignore[attr-defined]
    assert idx.health() == {"state": "ok"}
    assert found(engine, "territory") == ["north.txt"]
    assert found(engine, "harbour") == ["south.txt"]


def test_a_readers_connection_leaves_the_wal_files(engine: Engine) -> None:
    db = engine.store_dir / DB_NAME
    assert found(engine, "territory") == ["north.txt"]
    reader = SearchIndex(engine.workspace, engine.evidence.access)
    reader.as_reader()
    try:
        assert [h.rel for h in reader.search("harbour", ROOT).hits] == ["south.txt"]
    finally:
        reader.close()
    for suffix in ("-wal", "-shm"):
        assert os.path.exists(str(db) + suffix)
    assert found(engine, "harbour") == ["south.txt"]
