"""The search index over file names that are not UTF-8 (``b"caf\\xe9.txt"``,
as a Latin-1 system writes them), without FUSE: such a file is indexed (it
used to fail the indexer's whole batch with "surrogates not allowed"), found
under its own name, filtered by ``path:`` and by access, kept apart from a
UTF-8 name whose escaped form is the same, never re-indexed by a rescan, and
shown in the escaped form the journal uses; ``swfs search`` prints it,
``--json`` too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.find.search import Caller
from swfs.store.sqlitetext import escaped
from tests.engine.test_search import refresh

ROOT = Caller(0)
USER = Caller(54321, frozenset({54321}))
NAME = os.fsdecode(b"caf\xe9.txt")  # Latin-1 bytes: not UTF-8
SHOWN = "caf\\xe9.txt"  # how swfs writes that name as text
LOOKALIKE = "caf\\xe9.txt"  # a UTF-8 name spelled with a backslash
FOLDER = os.fsdecode(b"men\xfc")


@pytest.fixture
def src(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    s.mkdir()
    (s / NAME).write_text("The espresso machine is descaled every Friday.\n")
    (s / LOOKALIKE).write_text("A decoy about espresso beans, named with a backslash.\n")
    (s / FOLDER).mkdir()
    (s / FOLDER / "plat.txt").write_text("Espresso with a croissant, the plat du jour.\n")
    (s / "plain.txt").write_text("Nothing about coffee here.\n")
    return s


def test_escaped_form() -> None:
    assert escaped(NAME) == SHOWN
    assert escaped("plain/café.txt") == "plain/café.txt"  # UTF-8 stays as it is
    assert escaped(f"{FOLDER}/plat.txt") == "men\\xfc/plat.txt"


def test_a_name_that_is_not_utf8_is_indexed_and_found(src: Path) -> None:
    with Engine.open(src) as engine:
        refresh(engine)
        result = engine.search_index.search("descaled espresso", ROOT)
        assert result.error is None, result.error
        assert not result.behind
        top = result.hits[0]
        assert top.rel == NAME  # the workspace's own name: its file, its access
        assert top.path == f".parsed/{SHOWN}/content.txt"
        assert top.locator.startswith(f"{SHOWN}#")
        assert top.as_json()["source"] == SHOWN
        assert "**descaled**" in top.snippet
        assert str(top.freshness) == "current"
        rendered = result.render().decode("utf-8")  # valid UTF-8 text, the name escaped
        assert f".parsed/{SHOWN}/content.txt\t" in rendered
        # The UTF-8 look-alike is another file, indexed on its own.
        rels = {h.rel for h in engine.search_index.search("espresso", ROOT).hits}
        assert rels == {NAME, LOOKALIKE, f"{FOLDER}/plat.txt"}


def test_path_filter_and_access_with_such_names(src: Path) -> None:
    with Engine.open(src) as engine:
        refresh(engine)
        hits = engine.search_index.search(f"espresso path:{FOLDER}", ROOT).hits
        assert [h.rel for h in hits] == [f"{FOLDER}/plat.txt"]
        assert hits[0].path == ".parsed/men\\xfc/plat.txt/content.txt"
        os.chmod(src / NAME, 0o600)
        seen = {h.rel for h in engine.search_index.search("espresso", USER).hits}
        assert NAME not in seen
        assert LOOKALIKE in seen


def test_renames_and_rescans(src: Path) -> None:
    with Engine.open(src) as eng:
        refresh(eng)
        # Nothing changed, nothing to do: each path is matched exactly.
        assert eng.search_index.catch_up().paths == 0
    with Engine.open(src) as eng:
        stats = eng.search_index.catch_up()  # a full reconcile
        assert (stats.paths, stats.contents) == (0, 0)
        renamed = os.fsdecode(b"d\xe9tartrage.txt")
        os.rename(src / NAME, src / renamed)
        refresh(eng)
        assert [h.rel for h in eng.search_index.search("descaled", ROOT).hits] == [renamed]
        (src / renamed).unlink()
        refresh(eng)
        assert eng.search_index.search("descaled", ROOT).hits == ()


def swfs_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        capture_output=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_swfs_search_prints_the_escaped_name(src: Path) -> None:
    with Engine.open(src) as eng:
        refresh(eng)  # parsed (the command itself only indexes what is parsed)
    out = swfs_cli("search", str(src), "descaled")
    assert out.returncode == 0, out.stderr
    assert b"indexing failed" not in out.stderr
    assert b"surrogates" not in out.stderr
    first = out.stdout.decode("utf-8").splitlines()[1]
    assert first.startswith(f".parsed/{SHOWN}/content.txt\t")
    js = swfs_cli("search", str(src), "espresso", "--json")
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert {h["source"] for h in data["hits"]} == {SHOWN, "men\\xfc/plat.txt"}
    assert f".parsed/{SHOWN}/content.txt" in [h["path"] for h in data["hits"]]
