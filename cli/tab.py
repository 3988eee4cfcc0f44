"""``swfs tab``: the task's tab (``swfs.evidence.tab``) from the command line.

``check`` is the finish check (exit 1 while a requirement is open); ``new``
keeps the current tab under ``.tab/@old/NAME/`` and starts an empty one;
``show`` prints the tab (``--json``: everything as one object).  All work
with or without a mount: the tab is in the store.  Excerpts are those the
user running the command may read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from .base import (
    CLIError,
    Commands,
    Progress,
    Target,
    check_name,
    config_from,
    resolve_target,
)

if TYPE_CHECKING:
    from swfs.evidence.tab import Report, TabInfo, TabStore
    from swfs.find.search import Caller


def _caller() -> Caller:
    from swfs.find.search import Caller

    return Caller(os.geteuid(), frozenset({os.getegid(), *os.getgroups()}))


def _store(t: Target) -> TabStore:
    from swfs.evidence.tab import TabStore

    if not os.access(t.store, os.X_OK):
        raise CLIError(f"{t.store}: permission denied")
    return TabStore(t.store)


def _tab(t: Target, name: str | None) -> TabInfo | None:
    from swfs.evidence.tab import TabError

    if name is not None:
        check_name(name, "tab")
    store = _store(t)
    try:
        if name is None:
            return store.peek()
        tab = store.get_old(name)
    except PermissionError as exc:
        raise CLIError(f"{exc.filename}: permission denied") from None
    except (OSError, TabError) as exc:
        raise CLIError(str(exc)) from None
    if tab is None:
        raise CLIError(f"{name}: no earlier tab of that name (see swfs tab show --json)")
    return tab


def _events(t: Target, tab: TabInfo) -> tuple[list[dict[str, Any]], str]:
    from swfs.evidence import access as journal

    db = t.store / journal.DB_NAME
    if not db.exists():
        return [], "nothing was recorded yet (no mount with recording on)"
    if t.mounted:
        journal.request_flush(t.store)
    try:
        con = journal.open_readonly(t.store)
    except journal.JournalError as exc:
        raise CLIError(str(exc)) from None
    try:
        return list(journal.iter_events(con, since=tab.started, until=tab.ended)), ""
    finally:
        con.close()


def _report(t: Target, args: argparse.Namespace) -> Report:
    from swfs.evidence.tab import Builder, TabInfo

    tab = _tab(t, args.old)
    if tab is None:
        tab = TabInfo("", 0.0, None, t.store / "tab")  # never started: empty
    events, note = _events(t, tab)
    from swfs.engine import Engine

    with Engine.open(t.src, t.store, config=config_from(args)) as engine:
        if t.mounted:
            engine.search_index.as_reader()
        else:
            engine.search_index.catch_up(Progress("indexing"))
        return Builder(
            engine.workspace,
            engine.search_index.search,
            _caller(),
            views=engine.views,
            access=engine.evidence.access,
        ).build(tab, events, note=note)


def cmd_check(args: argparse.Namespace) -> int:
    from swfs.evidence.tab import parse_requirements

    t = resolve_target(args.target, args.store)
    tab = _tab(t, None)
    try:
        reqs = parse_requirements(tab.requirements() if tab is not None else b"")
    except PermissionError as exc:
        raise CLIError(f"{exc.filename}: permission denied") from None
    still = [r for r in reqs if r.open]
    if still:
        print(f"{len(still)} open requirement{'' if len(still) == 1 else 's'}:")
        for r in still:
            print(f"- [ ] {r.text}  (requirements.md line {r.line})")
        print("resolve each (- [x] ... -- where) or set it aside (- [-] ... -- why)")
        return 1
    done = sum(r.state == "resolved" for r in reqs)
    aside = len(reqs) - done
    if not reqs:
        print("no requirements in the tab (nothing to check)")
    else:
        print(f"no open requirements ({done} resolved, {aside} set aside)")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    from swfs.evidence.tab import TabError

    if args.name is not None:
        check_name(args.name, "tab")
    t = resolve_target(args.target, args.store)
    store = _store(t)
    try:
        name, _ = store.new(args.name)
    except PermissionError as exc:
        raise CLIError(f"{exc.filename}: permission denied") from None
    except (OSError, TabError) as exc:
        raise CLIError(str(exc)) from None
    called = "" if args.name is None else f" {args.name}"
    print(f"started the tab{called}; the previous one is kept as .tab/@old/{name}/")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    rep = _report(t, args)
    if args.json:
        out = rep.as_json()
        try:
            out["old"] = [o.name for o in _store(t).old()]
        except OSError:
            out["old"] = []
        print(json.dumps(out, ensure_ascii=False, indent=1))
    else:
        sys.stdout.buffer.write(rep.tab_md())
    return 0


def register(c: Commands) -> None:
    sp = c.add("tab", cmd_show, "the task's tab: requirements, reads, unopened files", None)
    sub = Commands(sp.add_subparsers(dest="tab_command", required=True, metavar="ACTION"))
    sub.add("check", cmd_check, "exit 1 and list the open requirements while any remain")
    p = sub.add("new", cmd_new, "start a fresh tab called NAME; keep this one under .tab/@old/")
    p.add_argument(
        "name",
        metavar="NAME",
        nargs="?",
        help="the new tab's name, under which it is kept once the next one starts "
        "(default: its start time)",
    )
    p = sub.add("show", cmd_show, "the tab as text (TAB.md), or as one JSON object")
    p.add_argument("--json", action="store_true", help="everything as one JSON object")
    p.add_argument("--old", metavar="NAME", help="an earlier tab, by name")
