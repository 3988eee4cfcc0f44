"""Snapshots, submissions, reset and gc: ``swfs submit``, ``submissions``,
``reset``, ``snapshots`` and ``gc`` (``snapshot --delete`` and
``restore PATH@SNAPSHOT`` live with their commands in ``cli.commands``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from swfs.api import BASELINE

from .base import (
    CLIError,
    Commands,
    check_name,
    open_engine,
    resolve_target,
    when,
    workspace_rel,
)
from .client import connect


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; exact bytes below 1 KiB."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def cmd_submit(args: argparse.Namespace) -> int:
    check_name(args.name, "submission")
    t = resolve_target(args.target, args.store)
    paths = [workspace_rel(t, p) for p in args.paths]
    with connect(t, args) as client:
        sub = client.submit(args.name, [str(p) for p in paths])
    if args.json:
        print(json.dumps(sub, ensure_ascii=False))
        return 0
    files = sub["files"]
    print(f"submission {args.name}: {len(files)} file(s), snapshot {sub['snapshot']}")
    for f in files:
        print(f"  {f['status']:<9} b3:{f['hash'][:16]}  {f['size']:>10}  {f['path']}")
    return 0


def cmd_submissions(args: argparse.Namespace) -> int:
    from swfs.history import snapshots as history

    t = resolve_target(args.target, args.store)
    with open_engine(t, args) as engine:
        subs = history.list_submissions(engine.workspace)
    if args.json:
        for s in subs:
            print(json.dumps(s.as_json(), ensure_ascii=False))
        return 0
    if not subs:
        print("no submissions (`swfs submit TARGET NAME` makes one)")
        return 0
    for s in subs:
        print(f"{s.name}  {when(s.at)}  {len(s.files)} file(s)")
        for f in s.files:
            print(f"  {f.status:<9} b3:{f.hash[:16]}  {f.size:>10}  {f.path}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with connect(t, args) as client:
        r = client.reset(args.to)
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return 0
    total = r["removed"] + r["restored"] + r["renamed"] + r["dirs_removed"] + r["dirs_created"]
    if not total:
        print(f"reset to {r['target']}: nothing to do, the tree is as it was")
    else:
        print(
            f"reset to {r['target']} in {r['secs']:.3f} s: {r['restored']} restored, "
            f"{r['removed']} removed, {r['renamed']} renamed back, "
            f"{r['dirs_removed']} directories removed, {r['dirs_created']} re-created"
        )
    for d in r["kept_dirs"]:
        print(f"kept {d}/: it holds files swfs does not track (symlinks, special files)")
    return 0


def cmd_snapshots(args: argparse.Namespace) -> int:
    from swfs.history import snapshots as history

    t = resolve_target(args.target, args.store)
    with open_engine(t, args) as engine:
        snaps = history.list_snapshots(engine.workspace)
    if args.json:
        for s in snaps:
            d: dict[str, Any] = {
                "name": s.name,
                "kind": s.kind,
                "at": s.at,
                "files": s.files,
                "bytes": s.bytes,
            }
            print(json.dumps(d, ensure_ascii=False))
        return 0
    if not snaps:
        print("no snapshots (`swfs snapshot TARGET NAME` makes one)")
        return 0
    print(f"{'name':<32} {'kind':<10} {'taken':<20} {'files':>7} {'size':>10}")
    for s in snaps:
        at = when(s.at) if s.at else "-"
        print(f"{s.name:<32} {s.kind:<10} {at:<20} {s.files:>7} {human_bytes(s.bytes):>10}")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    if args.keep < 0:
        raise CLIError(f"--keep {args.keep:g}: days must be 0 or more", 2)
    t = resolve_target(args.target, args.store)
    with connect(t, args) as client:
        r = client.gc(args.keep, args.dry_run)
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return 0
    verb = "would free" if r["dry_run"] else "freed"
    print(
        f"gc (keeping {r['keep_days']:g} days of history): {verb} {human_bytes(r['freed_bytes'])}: "
        f"{r['blobs_removed']} blobs ({human_bytes(r['blob_bytes'])}), "
        f"{r['parses_dropped']} parse records ({human_bytes(r['parse_bytes'])}), "
        f"{r['diffs_dropped']} cached diffs ({human_bytes(r['diff_bytes'])}); "
        f"{r['versions_dropped']} versions dropped, "
        f"{_count(r['histories_dropped'], 'history', 'histories')}; "
        f"{r['blobs_kept']} blobs kept"
    )
    return 0


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def register(c: Commands) -> None:
    sp = c.add("submit", cmd_submit, "name the deliverables: a snapshot plus the list of files")
    sp.add_argument("name", metavar="NAME")
    sp.add_argument(
        "paths",
        metavar="PATH",
        nargs="*",
        help="the deliverables (default: every file added or modified since the baseline)",
    )
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = c.add("submissions", cmd_submissions, "the submissions, with their files and hashes")
    sp.add_argument("--json", action="store_true", help="one JSON object per submission")
    sp = c.add("reset", cmd_reset, "bring the whole tree back to the baseline or a snapshot")
    sp.add_argument(
        "--to",
        default=BASELINE,
        metavar="baseline|SNAPSHOT",
        help="the state to bring back (default: the baseline)",
    )
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = c.add("snapshots", cmd_snapshots, "the snapshots: name, kind, when, files, size")
    sp.add_argument("--json", action="store_true", help="one JSON object per snapshot")
    sp = c.add("gc", cmd_gc, "drop what no snapshot, submission, baseline or recent history needs")
    sp.add_argument(
        "--keep",
        type=float,
        default=7.0,
        metavar="DAYS",
        help="keep every version recorded in the last DAYS days (default 7)",
    )
    sp.add_argument("--dry-run", action="store_true", help="say what would be freed, free nothing")
    sp.add_argument("--json", action="store_true", help="one JSON object")
