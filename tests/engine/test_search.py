"""The search index and queries on the engine, without FUSE: query syntax,
BM25 ranking, indexing once per content hash, re-parses replacing a file's
entries, filtering by what the caller may read, hybrid ranking with a tiny
embedding model, and `swfs search`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swfs.engine import Engine
from swfs.find.search import Caller, QueryError, parse_query
from swfs.workspace import Config
from tests.embedgen import write_model

ROOT = Caller(0)
USER = Caller(54321, frozenset({54321}))
FACT = "Revenue in the North territory reached 4.2 million in the third quarter."


def refresh(engine: Engine) -> None:
    engine.scan()
    trio.run(engine.drain)
    engine.search_index.catch_up()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    (s / "finance").mkdir(parents=True)
    (s / "other").mkdir()
    (s / "finance" / "q3.md").write_text(f"# Q3\n\n{FACT}\n")
    (s / "other" / "weather.txt").write_text("A north wind blew all week over the harbour.\n")
    (s / "other" / "south.txt").write_text("Regional sales summary for the south.\n")
    (s / "other" / "costs.txt").write_text("Costs were flat; revenue is reported elsewhere.\n")
    return s


@pytest.fixture
def engine(src: Path) -> Iterator[Engine]:
    with Engine.open(src) as eng:
        refresh(eng)
        yield eng


def paths(engine: Engine, query: str, caller: Caller = ROOT) -> list[str]:
    result = engine.search_index.search(query, caller)
    assert result.error is None, result.error
    return [h.path for h in result.hits]


def test_query_syntax() -> None:
    q = parse_query('regional "termination fee" path:finance revenue-2024')
    assert q.words == (("regional",), ("revenue", "2024"))
    assert q.phrases == (("termination", "fee"),)
    assert q.paths == ("finance",)
    assert parse_query("x path:a%2Fb").paths == ("a/b",)
    for bad, why in (
        ("", "empty"),
        ("   ", "empty"),
        ("path:finance", "no word"),
        ('"open', "not closed"),
        ("!!! ???", "no word"),
        ("x path:..", "no folder"),
        ("x path:", "no folder"),
    ):
        with pytest.raises(QueryError, match=why):
            parse_query(bad)


def test_paraphrase_ranks_the_fact_first(engine: Engine) -> None:
    result = engine.search_index.search("regional revenue north", ROOT)
    hits = [h.path for h in result.hits]
    assert hits[0] == ".parsed/finance/q3.md/content.txt"
    # Each of the others shares one word only: found, ranked below.
    assert set(hits[1:]) == {
        ".parsed/other/weather.txt/content.txt",
        ".parsed/other/south.txt/content.txt",
        ".parsed/other/costs.txt/content.txt",
    }
    top = result.hits[0]
    assert top.freshness == "current"
    assert "**Revenue**" in top.snippet
    assert "**North**" in top.snippet
    assert top.locator == "finance/q3.md#content"
    assert top.score > result.hits[1].score
    text = result.render().decode()
    lines = text.splitlines()
    assert lines[0].startswith('# swfs search "regional revenue north": 4 hits')
    assert lines[1].split("\t")[0] == ".parsed/finance/q3.md/content.txt"
    assert lines[1].split("\t")[2] == "current"
    assert len(lines) == 5


def test_phrases_paths_and_stems(engine: Engine) -> None:
    assert paths(engine, '"north territory"') == [".parsed/finance/q3.md/content.txt"]
    assert paths(engine, '"territory north"') == []
    assert paths(engine, "north path:other") == [".parsed/other/weather.txt/content.txt"]
    assert paths(engine, "north path:finance") == [".parsed/finance/q3.md/content.txt"]
    assert paths(engine, "north path:fin") == []  # a folder, not a prefix of a name
    assert paths(engine, "revenues") == paths(engine, "revenue")  # stemmed
    assert len(paths(engine, "revenue")) == 2
    assert engine.search_index.search("north", ROOT, limit=1).hits[0].path.endswith("content.txt")
    assert len(engine.search_index.search("north", ROOT, limit=1).hits) == 1


def test_bad_query_file_explains_the_syntax(engine: Engine) -> None:
    text = engine.search_index.search('"unclosed', ROOT).render().decode()
    assert text.startswith("# swfs search: a quote is not closed")
    assert "quoted phrase" in text
    assert "path:finance" in text
    assert ".parsed/" in text
    assert "\t" not in text


def test_copies_and_renames_index_no_text(engine: Engine, src: Path) -> None:
    idx = engine.search_index
    (src / "finance" / "q3-copy.md").write_bytes((src / "finance" / "q3.md").read_bytes())
    os.rename(src / "other" / "south.txt", src / "other" / "southern.txt")
    engine.scan()
    trio.run(engine.drain)
    stats = idx.catch_up()
    assert stats.contents == 0
    assert stats.units == 0
    assert stats.paths == 3  # a copy added, a path renamed (gone + new)
    found = paths(engine, "territory")
    assert sorted(found) == [
        ".parsed/finance/q3-copy.md/content.txt",
        ".parsed/finance/q3.md/content.txt",
    ]
    assert paths(engine, "regional") == [".parsed/other/southern.txt/content.txt"]
    assert idx.sizes()["units"] == 4  # one per distinct content


def test_the_text_index_commits_only_what_changed(engine: Engine, src: Path) -> None:
    """A burst of changes that adds or drops no text (files without text, a
    rename) leaves tantivy's files alone: its commit writes and syncs them
    even when empty, a millisecond or more per burst of creates."""
    meta = Path(engine.search_index.text.directory) / "meta.json"
    before = meta.read_bytes()
    (src / "other" / "blob.bin").write_bytes(b"\0\1\2 no text here \0" * 8)
    os.rename(src / "other" / "costs.txt", src / "other" / "costs-2024.txt")
    refresh(engine)
    assert meta.read_bytes() == before
    assert paths(engine, "costs flat") == [".parsed/other/costs-2024.txt/content.txt"]
    (src / "other" / "costs-2024.txt").unlink()  # its content's last path: dropped
    refresh(engine)
    assert meta.read_bytes() != before
    assert paths(engine, "costs flat") == []


def test_a_reparse_replaces_the_file_entries(engine: Engine, src: Path) -> None:
    (src / "other" / "weather.txt").write_text("Calm seas and a harvest of apples.\n")
    engine.scan()
    # Not parsed yet: the old text is still the view, and its hits say stale.
    engine.search_index.catch_up()
    stale = engine.search_index.search("wind harbour", ROOT).hits
    assert [h.path for h in stale] == [".parsed/other/weather.txt/content.txt"]
    assert stale[0].freshness == "stale"
    assert paths(engine, "apples") == []
    trio.run(engine.drain)
    engine.search_index.catch_up()
    assert paths(engine, "wind harbour") == []
    fresh = engine.search_index.search("apples harvest", ROOT).hits
    assert [h.path for h in fresh] == [".parsed/other/weather.txt/content.txt"]
    assert fresh[0].freshness == "current"
    assert engine.search_index.sizes()["units"] == 4  # the old content's entries are gone


def test_hits_between_the_parse_and_the_index_are_stale(engine: Engine, src: Path) -> None:
    (src / "other" / "weather.txt").write_text("Calm seas and a harvest of apples.\n")
    engine.scan()
    trio.run(engine.drain)  # parsed, but the index has not caught up
    hits = engine.search_index.search("wind", ROOT).hits
    assert [(h.path, h.freshness) for h in hits] == [
        (".parsed/other/weather.txt/content.txt", "stale")
    ]


def test_deleted_files_are_never_hits(engine: Engine, src: Path) -> None:
    (src / "other" / "weather.txt").unlink()
    engine.scan()
    assert paths(engine, "wind") == []  # before the index catches up, too
    engine.search_index.catch_up()
    assert paths(engine, "wind") == []


def test_callers_see_only_what_they_may_read(engine: Engine, src: Path) -> None:
    secret = src / "finance" / "payroll.txt"
    secret.write_text("zebra payroll figures for the north office\n")
    secret.chmod(0o600)
    (src / "closed").mkdir()
    (src / "closed" / "open.txt").write_text("zebra notes in a closed folder\n")
    (src / "closed").chmod(0o700)
    team = src / "other" / "team.txt"
    team.write_text("zebra team plan\n")
    os.chown(team, 0, 777)
    team.chmod(0o640)
    public = src / "other" / "zebra.txt"
    public.write_text("zebra crossing\n")
    refresh(engine)
    assert len(paths(engine, "zebra")) == 4  # root reads them all
    assert paths(engine, "zebra", USER) == [".parsed/other/zebra.txt/content.txt"]
    member = Caller(54321, frozenset({54321, 777}))
    assert sorted(paths(engine, "zebra", member)) == [
        ".parsed/other/team.txt/content.txt",
        ".parsed/other/zebra.txt/content.txt",
    ]
    owner = Caller(4242, frozenset())
    os.chown(src / "closed", 4242, 4242)
    assert sorted(paths(engine, "zebra payroll", owner)) == [
        ".parsed/closed/open.txt/content.txt",
        ".parsed/other/zebra.txt/content.txt",
    ]
    # Nothing about the others, not even how many: the text says no hits.
    text = engine.search_index.search("payroll", USER).render().decode()
    assert text == '# swfs search "payroll": no hits\n'
    (src).chmod(0o700)  # the workspace root closed: nothing at all
    try:
        assert paths(engine, "zebra", USER) == []
    finally:
        src.chmod(0o755)


def test_the_index_is_rebuilt_from_the_parse_cache(src: Path) -> None:
    with Engine.open(src) as eng:
        refresh(eng)
        first = paths(eng, "regional revenue north")
    (src / ".swfs" / "search.sqlite").unlink()
    for extra in ("-wal", "-shm"):
        (src / ".swfs" / f"search.sqlite{extra}").unlink(missing_ok=True)
    with Engine.open(src) as eng:
        stats = eng.search_index.catch_up()
        assert stats.contents == 4
        assert paths(eng, "regional revenue north") == first


def test_hybrid_finds_what_the_words_do_not_say(src: Path, tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")
    with Engine.open(src) as eng:
        refresh(eng)
        plain = eng.search_index.search("income", ROOT)
        assert plain.mode == "bm25"
        assert plain.hits == ()
    with Engine.open(src, config=Config(embed_model=str(model))) as eng:
        eng.search_index.catch_up()  # vectors for the units indexed before
        result = eng.search_index.search("income", ROOT)
        assert result.mode == "hybrid"
        found = [h.path for h in result.hits]
        # Both texts that speak of revenue or sales, and nothing else.
        assert set(found[:3]) >= {
            ".parsed/finance/q3.md/content.txt",
            ".parsed/other/costs.txt/content.txt",
        }
        assert ".parsed/other/weather.txt/content.txt" not in found
        # Words still count: "wind" finds the weather text first.
        assert (
            eng.search_index.search("wind", ROOT).hits[0].path
            == ".parsed/other/weather.txt/content.txt"
        )
        # The filter applies to vector hits too.
        (src / "finance" / "q3.md").chmod(0o600)
        assert ".parsed/finance/q3.md/content.txt" not in [
            h.path for h in eng.search_index.search("income", USER).hits
        ]


def test_a_bad_model_is_one_clear_error(src: Path, tmp_path: Path) -> None:
    from swfs.workspace import WorkspaceError

    bad = tmp_path / "notamodel"
    bad.mkdir()
    with pytest.raises(WorkspaceError, match="no tokenizer.json"):
        Engine(src, config=Config(embed_model=str(bad)))


def swfs_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_swfs_search_command(src: Path, tmp_path: Path) -> None:
    with Engine.open(src) as eng:
        refresh(eng)
    out = swfs_cli("search", str(src), "regional revenue north")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1].startswith(".parsed/finance/q3.md/content.txt\t")
    js = swfs_cli("search", str(src), "regional revenue north", "--json", "-n", "2")
    data = json.loads(js.stdout)
    assert [h["path"] for h in data["hits"]][0] == ".parsed/finance/q3.md/content.txt"
    assert len(data["hits"]) == 2
    assert data["hits"][0]["freshness"] == "current"
    none = swfs_cli("search", str(src), "xylophone")
    assert none.returncode == 1
    assert "no hits" in none.stdout
    bad = swfs_cli("search", str(src), '"oops')
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "swfs: error: bad query '\"oops': a quote is not closed (see swfs search --help)"
    )
    assert "Traceback" not in bad.stderr
    model = write_model(tmp_path / "m")
    hy = swfs_cli("search", str(src), "income", "--json", "--embed-model", str(model))
    assert hy.returncode == 0, hy.stderr
    assert json.loads(hy.stdout)["mode"] == "hybrid"
    missing = swfs_cli("search", str(src), "income", "--embed-model", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert "not a directory" in missing.stderr
