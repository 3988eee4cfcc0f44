"""The tab without a mount: the checklist's grammar, the tab store, and
`swfs tab` on a plain workspace folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from swfs.evidence.tab import (
    Builder,
    Read,
    TabError,
    TabStore,
    parse_requirements,
    requirement_query,
)
from tests.mountutil import SWFS


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
    # NAME names the new tab; the unnamed first one is kept under its start time.
    first_kept, cur = store.new("task-1")
    assert first_kept != "task-1"
    assert cur.started >= first.started
    assert store.requirements() == b""
    old = store.get_old(first_kept)
    assert old is not None
    assert old.requirements() == b"- [ ] one\n"
    assert old.ended is not None
    assert old.started == first.started
    with pytest.raises(TabError, match="task-1"):
        store.new("task-1")  # the current tab has that name
    for bad in ("", "..", "a/b"):
        with pytest.raises(TabError):
            store.new(bad)
    store.save_requirements(b"- [ ] two\n")
    kept, _ = store.new("task-2")
    assert kept == "task-1"
    task1 = store.get_old("task-1")
    assert task1 is not None
    assert task1.requirements() == b"- [ ] two\n"
    with pytest.raises(TabError, match="task-1"):
        store.new("task-1")  # an earlier tab has that name
    auto, _ = store.new()
    assert auto == "task-2"
    assert [t.name for t in store.old()] == [first_kept, "task-1", "task-2"]


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


def test_reports_without_excerpts_say_the_same(tmp_path: Path) -> None:
    """TAB.md and unopened.md are built without the reads' excerpts (slow
    for a long tab); all else in the report is what the full build says, and
    a unit or line range read many times is excerpted alike each time."""
    import trio

    from swfs.engine import Engine
    from swfs.find.search import Caller

    src = tmp_path / "ws"
    (src / "docs").mkdir(parents=True)
    (src / "docs" / "notes.txt").write_text("alpha line\n\nbeta revenue north\ngamma\ndelta\n")
    (src / "docs" / "memo.md").write_text("# Memo\n\nRevenue in the north grew.\n")
    (src / "docs" / "unread.txt").write_text("Northern revenue table, never opened.\n")
    with Engine.open(src) as engine:
        engine.scan()
        trio.run(engine.drain)
        engine.search_index.catch_up()
        store = TabStore(Path(engine.store_dir))
        tab = store.current()
        store.save_requirements(
            b"- [ ] revenue in the north\n- [x] memo read -- docs/memo.md and docs/gone.txt\n"
        )
        tab = store.current()
        proc = {"name": "grep", "pid": 7}
        events: list[dict[str, object]] = [
            {
                "seq": 1,
                "t": tab.started,
                "kind": "list",
                "path": "docs",
                "names": ["notes.txt", "memo.md", "unread.txt"],
                "process": proc,
            },
        ]
        for i in range(3):  # the same unit and the same lines, again and again
            events.append(
                {
                    "seq": 2 + 2 * i,
                    "t": tab.started,
                    "kind": "read",
                    "path": ".parsed/docs/memo.md/content.txt",
                    "source": "docs/memo.md",
                    "process": proc,
                    "bytes": 40,
                }
            )
            events.append(
                {
                    "seq": 3 + 2 * i,
                    "t": tab.started,
                    "kind": "read",
                    "path": "docs/notes.txt",
                    "process": proc,
                    "bytes": 20,
                    "lines": [3, 4],
                    "ranges": [[0, 20]],
                }
            )
        caller = Caller(0)
        access, search = engine.evidence.access, engine.search_index.search
        full = Builder(engine.workspace, search, caller, views=engine.views, access=access).build(
            tab, events
        )
        lean = Builder(
            engine.workspace, search, caller, views=engine.views, access=access, excerpts=False
        ).build(tab, events)

        def same(r: Read) -> tuple[object, ...]:
            return (r.seq, r.path, r.locator, r.source, r.process)

        assert [same(r) for r in lean.reads] == [same(r) for r in full.reads]
        assert {r.locator for r in full.reads} == {
            ".parsed/docs/memo.md/content.txt",
            "docs/notes.txt#lines=3-4",
        }
        assert all(r.excerpt == "" for r in lean.reads)
        excerpts = {r.locator: r.excerpt for r in full.reads}
        assert excerpts["docs/notes.txt#lines=3-4"] == "beta revenue north\ngamma"
        assert "Revenue in the north grew." in excerpts[".parsed/docs/memo.md/content.txt"]
        by_locator: dict[str, set[str]] = {}
        for r in full.reads:
            by_locator.setdefault(r.locator, set()).add(r.excerpt)
        assert all(len(v) == 1 for v in by_locator.values())
        assert lean.tab_md() == full.tab_md()
        assert lean.unopened_md() == full.unopened_md()
        assert [c.rel for c in lean.unopened] == ["docs/unread.txt"]
        assert lean.cited == full.cited
        assert ("docs/memo.md", True) in full.cited[2]
        # Folded in two goes (as the mount goes on from its last build),
        # the report says what one build of every event says.
        for cut in range(len(events) + 1):
            step = Builder(
                engine.workspace,
                engine.search_index.search,
                caller,
                views=engine.views,
                access=access,
                excerpts=False,
                keep_reads=False,
            )
            step.fold(events[:cut])
            first = step.finish(tab)
            assert first.read_count == sum(1 for e in events[:cut] if e["kind"] == "read")
            step.fold(events[cut:])
            again = step.finish(tab)
            assert step.last_seq == len(events)
            assert again.tab_md() == lean.tab_md()
            assert again.unopened_md() == lean.unopened_md()
            assert again.cited == lean.cited
