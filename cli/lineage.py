"""``swfs lineage``: what each file written through the mount was derived
from; and ``swfs log``: the state log beside the access journal (reads,
listings, writes with their processes).

Both read the access journal (``swfs.evidence.access``) directly.  While the
workspace is mounted they first ask the daemon to store what it holds, so
what was done before the command is in what it prints.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from typing import Any

from .base import CLIError, Commands, Target, log_field, resolve_target, when, workspace_rel


def _open(t: Target) -> Any:
    from swfs.evidence import access as journal

    db = t.store / journal.DB_NAME
    if t.mounted and db.exists():
        journal.request_flush(t.store)
    try:
        return journal.open_readonly(t.store)
    except journal.JournalError as exc:
        if not db.exists() and not os.access(t.store, os.R_OK | os.X_OK):
            raise CLIError(f"{t.store}: permission denied") from None
        raise CLIError(str(exc)) from None


def access_events(t: Target, kind: str | None) -> Iterator[dict[str, Any]]:
    """The access journal's events (none if nothing was ever recorded)."""
    from swfs.evidence import access as journal

    if not (t.store / journal.DB_NAME).exists():
        return iter(())
    con = _open(t)
    return journal.iter_events(con, kind=kind)


def print_log(state: list[tuple[int, dict[str, Any]]], t: Target, args: argparse.Namespace) -> None:
    """``swfs log``: the state log (``swfs.store.records``) and the access
    journal, in time order, each text line labelled with its log (``--kind``:
    access events of that kind only, or the state log only)."""
    kind = getattr(args, "kind", None)
    rows: list[tuple[float, dict[str, Any]]] = []
    if kind in (None, "state"):
        rows += [(ev["t"], {"seq": seq, **ev}) for seq, ev in state]
    if kind != "state":
        rows += [(ev["t"], ev) for ev in access_events(t, kind)]
    rows.sort(key=lambda r: r[0])
    if args.limit:
        rows = rows[-args.limit :]
    for _, ev in rows:
        if args.json:
            print(json.dumps(ev, ensure_ascii=False))
        elif "kind" in ev:
            print(f"access  {_access_line(ev)}")
        else:
            fields = " ".join(
                f"{k}={log_field(v)}" for k, v in ev.items() if k not in ("t", "ev", "seq")
            )
            print(f"state   {ev['seq']:6d}  {when(ev['t'])}  {ev['ev']:<9} {fields}")


def _access_line(ev: dict[str, Any]) -> str:
    p = ev["process"]
    who = f"{p['name']}[{p['pid']}]"
    what = ev["path"]
    if ev["kind"] == "read":
        if ev.get("locator"):
            where = ev["locator"]
        elif lines := ev.get("lines"):
            where = f"lines {lines[0]}-{lines[1]}"
        elif ev.get("bytes"):
            where = f"{ev['bytes']} bytes"
        else:
            where = "opened; read from the kernel's cache, if at all"
        what += f" ({where})"
    elif ev["kind"] == "list":
        what += f" ({ev['count']} names)"
    elif ev["op"] == "rename":
        what = f"{ev['from']} -> {ev['path']}"
    return f"{ev['seq']:6d}  {when(ev['t'])}  {ev['op']:<9} {what}  by {who}"


def cmd_lineage(args: argparse.Namespace) -> int:
    from swfs.evidence import lineage

    t = resolve_target(args.target, args.store)
    path = str(workspace_rel(t, args.path)) if args.path else None
    con = _open(t)
    try:
        outs = lineage.outputs(con)
    finally:
        con.close()
    g = lineage.build(outs, path)
    if args.json:
        print(json.dumps(g.to_json(), ensure_ascii=False, indent=1))
    elif args.dot:
        print(lineage.to_dot(g), end="")
    elif args.prov:
        print(json.dumps(lineage.to_prov(g), ensure_ascii=False, indent=1))
    else:
        base = t.mount_point or t.src
        text = lineage.to_text(g, outs, lambda p: os.path.lexists(base / p))
        if not text and path is not None:
            raise CLIError(f"{args.path}: no lineage recorded (not written through the mount)")
        print(text, end="")
    return 0


def register(c: Commands) -> None:
    sp = c.add("lineage", cmd_lineage, "what each file written through the mount was derived from")
    sp.add_argument("path", metavar="PATH", nargs="?", help="only this file and its ancestry")
    fmt = sp.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="nodes and edges as JSON")
    fmt.add_argument("--dot", action="store_true", help="Graphviz DOT")
    fmt.add_argument("--prov", action="store_true", help="W3C PROV-JSON")


__all__ = ["access_events", "print_log", "register"]
