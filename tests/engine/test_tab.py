"""The tab without a mount: the checklist's grammar, the tab store, and
`swfs tab` on a plain workspace folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swfs.tab import TabError, TabStore, parse_requirements, requirement_query
from tests.realmount import SWFS


def test_requirement_lines() -> None:
    data = (
        b"# Task: the Q3 memo\n"
        b"- [ ] Q3 revenue by region\n"
        b"* [x] headcount 2024 -- hr/staff.xlsx#sheet=2024\n"
        b"  - [-] churn -- not in the workspace\n"
        b"- [X] margin -- a -- b\n"
        b"- [ ]\n"
        b"-[ ] no space after the dash\n"
        b"- [?] unknown mark\n"
        b"plain prose mentioning - [ ] inside a line\n"
    )
    got = [(r.line, r.state, r.text, r.note) for r in parse_requirements(data)]
    assert got == [
        (2, "open", "Q3 revenue by region", ""),
        (3, "resolved", "headcount 2024", "hr/staff.xlsx#sheet=2024"),
        (4, "set aside", "churn", "not in the workspace"),
        (5, "resolved", "margin", "a -- b"),
    ]
    # Bytes that are not UTF-8 do not stop the parse.
    assert [r.text for r in parse_requirements(b"- [ ] caf\xe9 sales\n")] == ["caf\ufffd sales"]


def test_requirement_query_drops_only_common_words() -> None:
    assert requirement_query("Q3 revenue of the North territory") == "Q3 revenue North territory"
    assert requirement_query("of the") == "of the"


def test_store_new_keeps_the_old_tab(tmp_path: Path) -> None:
    store = TabStore(tmp_path)
    assert store.peek() is None
    first = store.current()
    assert (tmp_path / "tab").stat().st_mode & 0o077 == 0
    store.save_requirements(b"- [ ] one\n")
    name, cur = store.new("task-1")
    assert name == "task-1"
    assert cur.started >= first.started
    assert store.requirements() == b""
    old = store.get_old("task-1")
    assert old is not None
    assert old.requirements() == b"- [ ] one\n"
    assert old.ended is not None
    assert old.started == first.started
    with pytest.raises(TabError, match="task-1"):
        store.new("task-1")
    for bad in ("", "..", "a/b"):
        with pytest.raises(TabError):
            store.new(bad)
    auto, _ = store.new()
    assert [t.name for t in store.old()] == ["task-1", auto]


def _swfs(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SWFS, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_without_a_mount(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "notes.txt").write_text("Regional revenue for the north.\n")
    assert _swfs("index", src).returncode == 0
    ok = _swfs("tab", "check", src)
    assert ok.returncode == 0, ok.stderr
    TabStore(src / ".swfs").save_requirements(b"- [ ] regional revenue\n- [x] done -- x\n")
    failed = _swfs("tab", "check", src)
    assert failed.returncode == 1
    assert "- [ ] regional revenue" in failed.stdout
    assert "done" not in failed.stdout
    shown = json.loads(_swfs("tab", "show", src, "--json").stdout)
    assert shown["open"] == ["regional revenue"]
    assert shown["reads"] == []
    assert _swfs("tab", "new", src, "t1").returncode == 0
    assert _swfs("tab", "check", src).returncode == 0
    missing = _swfs("tab", "show", src, "--old", "nope")
    assert missing.returncode == 1
    assert "nope" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_prompt_tells_how_to_use_the_tab() -> None:
    out = _swfs("prompt").stdout
    assert ".tab/requirements.md" in out
    assert "swfs tab check" in out
    assert "- [x]" in out
