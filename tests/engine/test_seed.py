"""A task sandbox's store seeded from an indexed baseline (swfs.store.seed),
without FUSE: ready at once (nothing to parse or index), BASE's store
untouched, and the refusals that keep a sandbox on its own baseline."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from swfs.api import STORE_NAME
from swfs.engine import Engine
from swfs.find.search import Caller
from swfs.history import staging
from swfs.store import seed
from swfs.workspace import Config


def indexed_base(root: Path) -> Path:
    base = root / "base"
    (base / "docs").mkdir(parents=True)
    (base / "docs" / "a.txt").write_text("alpha\nthe northern region grew\n")
    (base / "notes.md").write_text("# Notes\nthe quick brown fox\n")
    with Engine.open(base, config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        eng.search_index.catch_up()
    return base


def test_seeded_store_is_ready_at_once(tmp_path: Path) -> None:
    base = indexed_base(tmp_path)
    task = tmp_path / "task" / STORE_NAME
    assert seed.seed(base, base / STORE_NAME, task)
    assert not seed.seed(base, base / STORE_NAME, task)  # seeded once
    assert seed.seeded_from(task) == base
    staging.Staging.activate(base, task)
    with Engine.open(base, task, config=Config(rescan_interval=0)) as eng:
        stats = eng.scan()
        assert stats.hashed == 0  # every file as BASE recorded it
        assert eng.views.needs_parse() == []
        assert eng.views.counts()["current"] == 2
        done = eng.search_index.catch_up()
        assert (done.contents, done.paths) == (0, 0)  # nothing left to index
        hits = eng.search_index.search("northern", Caller(0, frozenset({0})))
        assert [h.rel for h in hits.hits] == ["docs/a.txt"]


def test_refusals(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(seed.SeedError, match="not indexed"):
        seed.seed(plain, plain / STORE_NAME, tmp_path / "t0" / STORE_NAME)
    base = indexed_base(tmp_path)
    task = tmp_path / "t1" / STORE_NAME
    seed.seed(base, base / STORE_NAME, task)
    with pytest.raises(seed.SeedError, match="a sandbox of"):
        seed.seed(plain, plain / STORE_NAME, task)
