"""``swfs cache gc|du DIR``: the shared parse cache (``--cache DIR``,
swfs.store.sharedcache)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .base import CLIError, Commands
from .history import human_bytes

if TYPE_CHECKING:
    from swfs.store.sharedcache import ParseCache

DAY = 86400.0


def _open(path: str) -> ParseCache:
    from swfs.store import cacheopen, sharedcache

    if not cacheopen.is_url(path) and not Path(path).is_dir():
        raise CLIError(f"{path}: no shared cache there")
    try:
        return cacheopen.open_cache(path)
    except sharedcache.CacheError as exc:
        raise CLIError(str(exc)) from None


def cmd_cache_gc(args: argparse.Namespace) -> int:
    if args.older_than < 0:
        raise CLIError(f"--older-than {args.older_than:g}: must be 0 or more days")
    cache = _open(args.dir)
    removed, freed = cache.gc(args.older_than * DAY)
    entries, size = cache.usage()
    if args.json:
        print(json.dumps({"removed": removed, "freed": freed, "entries": entries, "bytes": size}))
        return 0
    print(
        f"removed {removed} entries unused for {args.older_than:g} days ({human_bytes(freed)}); "
        f"{entries} entries ({human_bytes(size)}) kept"
    )
    return 0


def cmd_cache_du(args: argparse.Namespace) -> int:
    entries, size = _open(args.dir).usage()
    if args.json:
        print(json.dumps({"entries": entries, "bytes": size}))
    else:
        print(f"{args.dir}: {entries} parses, {human_bytes(size)}")
    return 0


def register(c: Commands) -> None:
    sp = c.sub.add_parser("cache", help="the shared parse cache (--cache DIR)", description=__doc__)
    sub = sp.add_subparsers(dest="cache_command", required=True, metavar="COMMAND")
    gc = sub.add_parser(
        "gc",
        help="remove entries no workspace used (read or wrote) for --older-than days",
        description="remove entries no workspace used for --older-than days; a workspace "
        "that needs one later parses that file again (its own store keeps its parses)",
    )
    gc.add_argument("dir", metavar="DIR")
    gc.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    gc.add_argument("--json", action="store_true", help="one JSON object")
    gc.set_defaults(fn=cmd_cache_gc)
    du = sub.add_parser("du", help="how many parses the cache holds, and their size")
    du.add_argument("dir", metavar="DIR")
    du.add_argument("--json", action="store_true", help="one JSON object")
    du.set_defaults(fn=cmd_cache_du)
