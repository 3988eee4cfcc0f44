"""Search that leaks nothing, on the engine: a caller other than root and
the store's owner is ranked over the units they may read, so their scores,
counts, order and snippets are the same whether or not a file they cannot
read holds the words; root still finds that file."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from swfs.engine import Engine
from swfs.find.search import Caller, SearchResult
from swfs.workspace import Config
from tests.embedgen import write_model

ROOT = Caller(0)
USER = Caller(54321, frozenset({54321}))
QUERIES = ("zebra payroll", "zebra", '"payroll office" zebra', "harbour zebra wind")


def _workspace(src: Path, *, private: bool) -> None:
    src.mkdir()
    (src / "mine.txt").write_text("The zebra crossing near the payroll office.\n")
    (src / "other.txt").write_text("Quarterly revenue, north wind, zebra, harbour.\n" * 3)
    (src / "long.txt").write_text("zebra " + "plain words about the weather " * 40 + "payroll\n")
    (src / "filler.txt").write_text("Nothing to see here: words about the weather.\n")
    (src / "closed").mkdir()
    (src / "closed" / "inside.txt").write_text("zebra harbour payroll wind\n")
    os.chmod(src / "closed", 0o700)
    if private:
        # Everything a guess could be tested against: the words, many times,
        # in a short unit (it would lower their weight and the average length).
        (src / "secret.txt").write_text("zebra zebra payroll harbour wind office zebra\n")
        os.chmod(src / "secret.txt", 0o600)


def _results(src: Path, caller: Caller, config: Config | None = None) -> dict[str, SearchResult]:
    with Engine.open(src, config=config) as engine:
        engine.scan()
        trio.run(engine.drain)
        engine.search_index.catch_up()
        return {q: engine.search_index.search(q, caller) for q in QUERIES}


def _lines(result: SearchResult) -> bytes:
    return result.render()


def test_scores_counts_and_snippets_do_not_depend_on_unreadable_units(tmp_path: Path) -> None:
    without, with_ = tmp_path / "without", tmp_path / "with"
    _workspace(without, private=False)
    _workspace(with_, private=True)
    a, b = _results(without, USER), _results(with_, USER)
    for q in QUERIES:
        assert a[q].error is None, q
        assert a[q].hits, q
        assert _lines(a[q]) == _lines(b[q]), q
        assert all("secret" not in h.rel and "closed" not in h.rel for h in b[q].hits)
    # The words are matched and scored: more words first, then BM25.
    top = a["zebra payroll"].hits
    assert top[0].rel == "mine.txt"
    assert "**zebra**" in top[0].snippet
    assert top[0].score > 2 > top[-1].score > 1
    # Root is ranked over everything, and finds the private file.
    root = _results(with_, ROOT)
    assert "secret.txt" in {h.rel for h in root["zebra payroll"].hits}
    assert "closed/inside.txt" in {h.rel for h in root["zebra payroll"].hits}


def test_root_and_the_store_owner_are_ranked_over_everything(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _workspace(src, private=True)
    with Engine.open(src) as engine:
        index = engine.search_index
        os.chown(engine.store_dir, 54322, -1)  # the owner may read every unit's text
        assert index._sees_all(ROOT)
        assert index._sees_all(Caller(54322))
        assert not index._sees_all(USER)
        os.chown(engine.store_dir, os.geteuid(), -1)


def test_the_snippet_weighs_words_by_the_callers_own_units(tmp_path: Path) -> None:
    """One unit holds two passages: a rare word far from a common one.  The
    snippet shows the passage of the word rarer among the caller's units."""
    src = tmp_path / "src"
    src.mkdir()
    far = " ".join(["filler"] * 60)
    (src / "doc.txt").write_text(f"alpha here {far} beta there\n")
    for i in range(5):
        (src / f"common{i}.txt").write_text("alpha again\n")
    with Engine.open(src) as engine:
        engine.scan()
        trio.run(engine.drain)
        engine.search_index.catch_up()
        hit = next(
            h for h in engine.search_index.search("alpha beta", USER).hits if h.rel == "doc.txt"
        )
    assert "**beta**" in hit.snippet
    assert "**alpha**" not in hit.snippet


def test_hybrid_ranking_does_not_depend_on_unreadable_units(tmp_path: Path) -> None:
    """Vector candidates are taken among the caller's units: a private unit
    near the query takes no place of theirs."""
    config = Config(embed_model=str(write_model(tmp_path / "model")))
    without, with_ = tmp_path / "without", tmp_path / "with"
    _workspace(without, private=False)
    _workspace(with_, private=True)
    a, b = _results(without, USER, config), _results(with_, USER, config)
    for q in QUERIES:
        assert a[q].mode == "hybrid"
        assert _lines(a[q]) == _lines(b[q]), q
    assert "secret.txt" in {h.rel for h in _results(with_, ROOT, config)["zebra"].hits}
