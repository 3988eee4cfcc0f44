"""Staged mounts: ``swfs commit``, ``discard`` and ``staged`` (``mount
--staged`` itself is in ``cli.mount``, which calls ``prepare_mount``)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from .base import CLIError, Commands, Target, open_engine, resolve_target, workspace_rel


def prepare_mount(src: Path, store: Path, *, staged: bool) -> None:
    """Before a daemon starts: make (or finish) the staged layer of a
    ``--staged`` mount; refuse a plain mount over staged changes."""
    from swfs.history import staging

    layer = staging.Staging.load(src, store)
    if layer is None:
        if staged:
            try:
                staging.Staging.activate(src, store)
            except (OSError, staging.StagingError) as exc:
                raise CLIError(f"{src}: cannot make the staged layer: {exc}") from None
        return
    if layer.intent() is not None:
        # A commit was interrupted: finish it before anything else runs.
        from swfs.engine import Engine

        with Engine.open(src, store) as engine:
            staging.recover_ws(engine.workspace)
    if not staged:
        count = len(layer.changes())
        layer.close()
        if count:
            raise CLIError(
                f"{src}: {count} staged change(s) not committed: mount it with --staged, "
                f"or `swfs commit {src}` / `swfs discard {src}` first"
            )
        shutil.rmtree(layer.dir)


def _call(t: Target, args: argparse.Namespace, op: str, paths: list[str] | None) -> Any:
    from swfs import control
    from swfs.history import staging

    if t.mounted:
        try:
            return control.request(t.store, op, io_timeout=3600, paths=paths or [])
        except control.ControlError as exc:
            raise CLIError(f"{t.src}: {op}: {exc}") from None
    with open_engine(t, args) as engine:
        try:
            return staging.CONTROL_OPS[op](engine.workspace, {"paths": paths or []})
        except staging.StagingError as exc:
            raise CLIError(str(exc)) from None
        except OSError as exc:
            raise CLIError(f"{exc.filename or t.src}: {op}: {exc.strerror}") from None


def _paths(t: Target, args: argparse.Namespace) -> list[str] | None:
    return [str(workspace_rel(t, p)) for p in args.paths] or None


def _change(args: argparse.Namespace, op: str, key: str) -> tuple[Target, list[str], Any] | None:
    """Run ``op`` (commit or discard) on TARGET's PATHs; None once ``--json``
    has printed the answer, else the target, the paths ``key`` lists and the
    whole answer.  Naming paths that hold nothing staged is an error."""
    t = resolve_target(args.target, args.store)
    paths = _paths(t, args)
    r = _call(t, args, op, paths)
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return None
    if not r[key] and paths:
        raise CLIError(f"{', '.join(paths)}: nothing staged there")
    return t, r[key], r


def _listed(head: str, paths: list[str]) -> None:
    print(head)
    for p in paths:
        print(f"  {p}")


def cmd_commit(args: argparse.Namespace) -> int:
    from .sandbox import refuse_commit

    refuse_commit(resolve_target(args.target, args.store).store)
    done = _change(args, "commit", "committed")
    if done is not None:
        t, committed, r = done
        _listed(f"committed {len(committed)} path(s) to {t.src}", committed)
        for p in r["kept"]:
            print(f"  {p}: kept in SRC (it holds files the staged tree never showed)")
    return 0


def cmd_discard(args: argparse.Namespace) -> int:
    done = _change(args, "discard", "discarded")
    if done is not None:
        _listed(f"discarded {len(done[1])} staged path(s)", done[1])
    return 0


def cmd_staged(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    r = _call(t, args, "staged", _paths(t, args))
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return 0
    rows = r["staged"]
    print(f"{len(rows)} staged path(s) in {t.src}" + (":" if rows else ""))
    for row in rows:
        print(f"  {row['status']:<9} {row['kind']:<7} {row['path']}")
    if r["commit"]:
        done = sum(1 for _, s in r["commit"] if s == "committed")
        print(
            f"an interrupted commit: {done} of {len(r['commit'])} committed; `swfs commit` ends it"
        )
    return 0


def status_lines(
    info: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """``swfs status``: whether TARGET is staged and how many paths are
    (``info``: swfs.control.status_info's ``staged``)."""

    if info is None:
        return None, []
    lines = [f"staged: {info['paths']} path(s) held in the store (`swfs staged`, `swfs commit`)"]
    if info["interrupted_commit"]:
        lines.append("staged: a commit was interrupted: `swfs commit` finishes it")
    return info, lines


def register(c: Commands) -> None:
    help_paths = "only these paths (and what is below them); default: everything staged"
    sp = c.add("commit", cmd_commit, "write a --staged mount's changes into SRC (crash-safe)")
    sp.add_argument("paths", metavar="PATH", nargs="*", help=help_paths)
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = c.add("discard", cmd_discard, "drop a --staged mount's changes; SRC stays as it is")
    sp.add_argument("paths", metavar="PATH", nargs="*", help=help_paths)
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = c.add("staged", cmd_staged, "list what a --staged mount holds back from SRC")
    sp.add_argument("paths", metavar="PATH", nargs="*", help=help_paths)
    sp.add_argument("--json", action="store_true", help="one JSON object")
