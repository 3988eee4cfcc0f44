"""``swfs search TARGET QUERY``: ranked hits over every parsed unit, as
``MNT/.search/QUERY`` shows them.

While the workspace is mounted the daemon keeps the index and this command
only reads it (as the other read-only commands read the store); otherwise
the index is brought up to date with the parse cache first.  Hits are those
the user running the command may read.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from swfs import control
from swfs.find.query import MAX_LIMIT, SYNTAX, Caller

from .base import CLIError, Commands, Progress, Target, config_from, resolve_target


def _caller() -> Caller:
    return Caller(os.geteuid(), frozenset({os.getegid(), *os.getgroups()}))


def _daemon_index_ready(t: Target) -> None:
    """Exit 3 while the daemon's index is unavailable (being rebuilt): its
    files may be half made, and "no hits" from them would be a lie."""
    try:
        state = control.request(t.store, "search_state", io_timeout=10)
    except (control.ControlUnavailable, control.ControlError, OSError):
        return  # an older daemon, or gone: the read-only index answers
    if state.get("state") != "ok":
        why = state.get("reason") or state.get("state")
        raise CLIError(f"{t.src}: the search index is unavailable ({why}); try again shortly", 3)


def _ask_daemon(t: Target, args: argparse.Namespace) -> int | None:
    """The daemon runs the query (it has the index open; no engine starts
    here): the exit status, or None when no daemon of this version answers."""
    try:
        r = control.request(t.store, "search", io_timeout=120, query=args.query, n=args.n)
    except (control.ControlUnavailable, OSError):
        return None
    except control.ControlError as exc:
        if "unknown operation" in str(exc):
            return None  # an older daemon
        raise CLIError(f"{t.src}: search: {exc}") from None
    if r["unavailable"] is not None:
        raise CLIError(f"{args.target}: the search index is unavailable: {r['unavailable']}", 3)
    if r["error"] is not None:
        raise CLIError(f"bad query {args.query!r}: {r['error']} (see swfs search --help)", 2)
    if args.json:
        print(json.dumps(r["json"], ensure_ascii=False, indent=1))
    else:
        sys.stdout.buffer.write(str(r["text"]).encode("utf-8", "surrogateescape"))
    return 0 if r["hits"] else 1


def cmd_search(args: argparse.Namespace) -> int:
    if not 1 <= args.n <= MAX_LIMIT:
        raise CLIError(f"-n {args.n}: give a number of hits from 1 to {MAX_LIMIT}", 2)
    t = resolve_target(args.target, args.store)
    if t.mounted and args.embed_model is None:
        answer = _ask_daemon(t, args)
        if answer is not None:
            return answer
    config = dataclasses.replace(config_from(args), embed_model=args.embed_model)
    from swfs.engine import Engine

    if t.mounted:
        _daemon_index_ready(t)
    with Engine.open(t.src, t.store, config=config) as engine:
        if t.mounted:
            engine.search_index.as_reader()
        else:
            engine.scan()
            engine.search_index.catch_up(Progress("indexing"))
            waiting = engine.views.counts()
            if waiting["pending"] or waiting["stale"]:
                sys.stderr.write(
                    f"swfs: {waiting['pending'] + waiting['stale']} file(s) not parsed in their "
                    f"present version yet (`swfs index {args.target}` parses them)\n"
                )
        result = engine.search_index.search(args.query, _caller(), args.n)
    if result.unavailable is not None:
        raise CLIError(f"{args.target}: the search index is unavailable: {result.unavailable}", 3)
    if result.error is not None:
        raise CLIError(f"bad query {args.query!r}: {result.error} (see swfs search --help)", 2)
    if args.json:
        print(json.dumps(result.as_json(), ensure_ascii=False, indent=1))
    else:
        sys.stdout.buffer.write(result.render())
    return 0 if result.hits else 1


def register(c: Commands) -> None:
    sp = c.add("search", cmd_search, "ranked hits over every parsed unit")
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.epilog = "\n".join(line[2:] for line in SYNTAX.splitlines()[2:])
    sp.add_argument("query", metavar="QUERY", help='words, "quoted phrases", path:FOLDER')
    sp.add_argument("--json", action="store_true", help="hits as JSON")
    sp.add_argument(
        "-n", type=int, default=20, metavar="N", help="how many hits at most (default 20)"
    )
    sp.add_argument(
        "--embed-model",
        metavar="DIR",
        help="a local static-embedding model (model2vec layout): hybrid BM25 + vector "
        "ranking; nothing is downloaded",
    )
