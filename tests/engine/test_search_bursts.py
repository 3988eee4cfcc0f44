"""The search indexer during bursts of changes, on the engine without FUSE
(issue 38): it waits for a pause in the changes (``QUIET``), or
``MAX_DELAY`` at most, so that a burst costs a few passes and commits, not
one every few milliseconds; a pass takes what is pending when it begins
and ends while the changes go on; a query while the index lags asks for a
pass at once and is answered from the caught-up index, and a query never
waits unbounded: behind still, it says so."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import swfs.find.search as search_mod
from swfs.api import RelPath
from swfs.engine import Engine
from swfs.find.search import Caller, IndexStats, SearchIndex

pytestmark = pytest.mark.timeout(120)

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


def start_indexer(idx: SearchIndex) -> None:
    """The indexer thread, as ``SearchIndex.run`` starts it (without trio)."""
    idx._stop = False
    idx._thread = threading.Thread(target=idx._loop, name="test-indexer", daemon=True)
    idx._thread.start()


def count_syncs(
    idx: SearchIndex, monkeypatch: pytest.MonkeyPatch, slower: float = 0.0
) -> list[float]:
    """When each indexer transaction (``sync_batch``: one tantivy commit) began;
    each ``slower`` seconds slower (longer than the gaps between changes,
    as a real burst's transactions are)."""
    began: list[float] = []
    sync = idx.sync_batch

    def counted(rels: object, stats: IndexStats, wanted: object = None) -> None:
        began.append(time.monotonic())
        time.sleep(slower)
        sync(rels, stats, wanted)  # type: ignore[arg-type]

    monkeypatch.setattr(idx, "sync_batch", counted)
    return began


def burst(idx: SearchIndex, seconds: float) -> float:
    """A change every few milliseconds for ``seconds``; when it ended."""
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        idx.notify(RelPath("north.txt" if i % 2 else "south.txt"))
        i += 1
        time.sleep(0.005)
    return time.monotonic()


def test_a_burst_of_changes_costs_a_pass_after_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = engine.search_index
    monkeypatch.setattr(search_mod, "MAX_DELAY", 60.0)  # the burst is shorter
    began = count_syncs(idx, monkeypatch)
    start_indexer(idx)
    try:
        ended = burst(idx, 1.5)
        assert idx.wait_idle(60)
    finally:
        idx.stop()
    # Every 20 ms before (about 60 transactions for this burst); now one
    # after it (a second if the first notification came in the indexer's
    # once-a-second pass).
    assert 1 <= len(began) <= 2, began
    assert began[-1] >= ended


def test_changes_that_go_on_wait_max_delay_at_most(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst longer than ``MAX_DELAY`` is indexed while it goes on: a
    pass takes what is pending when it begins, and ends."""
    idx = engine.search_index
    monkeypatch.setattr(search_mod, "MAX_DELAY", 0.5)
    began = count_syncs(idx, monkeypatch, slower=0.02)
    start_indexer(idx)
    try:
        ended = burst(idx, 3.0)
        assert idx.wait_idle(60)
    finally:
        idx.stop()
    during = [t for t in began if t < ended]
    # About one every MAX_DELAY (a pass that went on taking the changes
    # as they come would make one every few milliseconds).
    assert 2 <= len(during) <= 3.0 / 0.5 + 3, (began, ended)


def test_a_query_while_the_index_lags_asks_for_a_pass(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = engine.search_index
    # A quiet period no query would wait out.
    monkeypatch.setattr(search_mod, "QUIET", 600.0)
    monkeypatch.setattr(search_mod, "MAX_DELAY", 600.0)
    start_indexer(idx)
    try:
        east = Path(engine.workspace.src) / "east.txt"
        east.write_text("Zanzibar cloves sold well in the east.\n")
        engine.scan()
        trio.run(engine.drain)  # parsed: the index is told and waits for a pause
        assert idx.behind
        result = idx.search("zanzibar cloves", ROOT)
        assert not result.behind
        assert [h.rel for h in result.hits] == ["east.txt"]
        assert b"catching up" not in result.render()
    finally:
        idx.stop()


def test_a_query_never_waits_unbounded_and_says_when_behind(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = engine.search_index
    monkeypatch.setattr(search_mod, "QUERY_WAIT", 0.5)
    stuck, entered = threading.Event(), threading.Event()
    catch_up = idx.catch_up

    def slow(*args: object, **kwargs: object) -> IndexStats:
        entered.set()
        stuck.wait(60)
        return catch_up(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(idx, "catch_up", slow)
    start_indexer(idx)
    try:
        idx.notify(RelPath("north.txt"))
        assert entered.wait(60)
        result = idx.search("territory", ROOT)  # the pass it asks for cannot begin
        assert result.behind
        assert b"still catching up" in result.render()
        assert [h.rel for h in result.hits] == ["north.txt"]  # what the index has
    finally:
        stuck.set()
        idx.stop()
