"""The workspace commands: index, status, sync, show, diff, versions,
restore, baseline, snapshot, log, check.

Read-only commands read the store directly (LMDB allows readers beside a
running daemon); those that change or wait on the state use a client.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from swfs import control
from swfs.api import Freshness, RelPath, ReviewEntry
from swfs.control import ControlError, ControlUnavailable
from swfs.store import hashform

from . import staged
from .base import (
    CLIError,
    Commands,
    Progress,
    Target,
    check_name,
    open_engine,
    resolve_target,
    when,
    workspace_rel,
)
from .client import connect
from .history import human_bytes
from .mountat import status_of_world

if TYPE_CHECKING:
    from swfs.engine import Engine

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ commands
def cmd_index(args: argparse.Namespace) -> int:
    import trio

    t = resolve_target(args.src, args.store)
    if t.mounted:
        with connect(t, args) as client:
            _print_counts(client.sync(args.timeout).counts)
        return 0
    t0 = time.monotonic()
    with open_engine(t, args, create=True) as engine:
        scan_progress = Progress("hashing")
        stats = engine.scan(progress=scan_progress)
        counts = engine.views.counts()
        if counts["pending"] or counts["stale"]:
            trio.run(partial(engine.drain, Progress("parsing"), scan=False))
            counts = engine.views.counts()
        # The search index too: a mount (or a task sandbox seeded from this
        # store, cli.sandbox) then starts with it ready.
        engine.search_index.catch_up(Progress("indexing"))
    secs = time.monotonic() - t0
    rate = counts["files"] / secs if secs > 0 else 0.0
    print(
        f"indexed {counts['files']} files in {secs:.1f} s ({rate:.0f} files/s; "
        f"{stats.hashed} hashed): {counts['current']} current, {counts['failed']} failed, "
        f"{counts['unsupported']} unsupported, {counts['pending']} pending"
    )
    return 0


def _print_counts(counts: dict[str, int]) -> None:
    print(
        f"{counts['files']} files: " + ", ".join(f"{counts[f.value]} {f.value}" for f in Freshness)
    )


def _daemon_counts(t: Target) -> dict[str, int] | None:
    """Counts by freshness from the daemon, which knows which files its
    writers hold unrecorded changes to (none is current then); None
    without one."""
    if not t.mounted:
        return None
    try:
        return {str(k): int(v) for k, v in control.request(t.store, "counts").items()}
    except (ControlUnavailable, ControlError, OSError):
        return None


def _store_state(t: Target, op: str) -> dict[str, Any]:
    """How one of the daemon's stores is (``search_state``: its index, which
    it rebuilds; ``journal_state``: its access journal, which it starts
    afresh); without a daemon nobody keeps it: ``not served``."""
    if not t.mounted:
        return {"state": "not served"}
    try:
        state = control.request(t.store, op, io_timeout=10)
    except (ControlUnavailable, ControlError, OSError) as exc:
        return {"state": "unknown", "reason": str(exc)}
    return dict(state)


def journal_words(state: dict[str, Any]) -> str:
    """The access journal's health in one line."""
    if state.get("state") == "reopened":
        kept = f"; the failed file is kept as {state['kept']}" if state.get("kept") else ""
        return f"started afresh at {state.get('at')} after it failed ({state.get('reason')}){kept}"
    return f"{state.get('state')}: {state.get('reason', '')}".rstrip(": ")


def _sandbox_state(t: Target) -> str:
    """How the parsers that serve this workspace are confined: the daemon's
    when it is mounted (it may run as another user), else this process's."""
    from swfs.views import sandbox

    if not t.mounted:
        return sandbox.describe()
    try:
        return str(control.request(t.store, "sandbox", io_timeout=90)["sandbox"])
    except (ControlUnavailable, ControlError, OSError, KeyError, TypeError) as exc:
        return f"unknown ({exc})"


def cmd_status(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    if t.mounted and (code := status_of_world(args, t.src, t.store)) is not None:
        return code  # a read-only world (swfs mount --at)
    status: dict[str, Any] | None = None
    if t.mounted:
        try:  # the daemon answers: it knows its open writers, and no engine starts here
            status = control.request(t.store, "status", io_timeout=120)
        except (ControlUnavailable, ControlError, OSError):
            status = None
    if status is None:
        with open_engine(t, args) as engine:
            if not t.mounted:
                engine.scan()
            status = control.status_info(engine.workspace, engine.views)
            status["counts"] = _daemon_counts(t) or status["counts"]
    counts: dict[str, int] = status["counts"]
    content: dict[str, int] = status["content"]
    failed: list[tuple[str, str]] = [(str(p), str(e)) for p, e in status["failures"]]
    blob_bytes: int = status["blob_bytes"]
    store_size: int = status["store_bytes"]
    not_kept: int = status["not_preserved"]
    info: dict[str, Any] = {
        **counts,
        "mounted": t.mounted,
        "source": str(t.src),
        "store": str(t.store),
        "queue": counts["pending"] + counts["stale"],
        "content": content,
        "blob_bytes": blob_bytes,
        "store_bytes": store_size,
        "reserve_bytes": int(status.get("reserve_bytes", 0)),
        "not_preserved": not_kept,
        "failures": [{"path": p, "error": e} for p, e in failed],
    }
    info["search"] = _store_state(t, "search_state")
    info["journal"] = _store_state(t, "journal_state")
    info["sandbox"] = _sandbox_state(t)
    parses = status.get("parses")
    if parses is not None:
        info["parses"] = parses
    if t.mounted:  # where the daemon's parse jobs run (docs/scale.md)
        info["executor"] = _store_state(t, "executor")
    staged_info, staged_lines = staged.status_lines(status["staged"])
    if staged_info is not None:
        info["staged"] = staged_info
    if args.json:
        print(json.dumps(info, ensure_ascii=False))
        return 0
    print(f"workspace {t.src} ({'mounted' if t.mounted else 'not mounted'}; store {t.store})")
    _print_counts(counts)
    print(
        f"content: {content['pages']} pages, {content['slides']} slides, "
        f"{content['sheets']} sheets with {content['cells']} cells"
    )
    print(f"queue: {info['queue']} to parse; preserved bytes: {blob_bytes} in the blob store")
    print(f"store size: {human_bytes(store_size)} on disk (`swfs gc` reclaims what nothing needs)")
    if status.get("reserve_bytes"):
        print(
            f"reserve: {human_bytes(int(status['reserve_bytes']))} held back so that "
            "deletes can free a full disk (`swfs mount --reserve`)"
        )
    if not_kept:
        print(f"{not_kept} files keep hashes only (too large or in .swfsignore)")
    print(f"parse sandbox: {info['sandbox']}")
    farm = info.get("executor", {})
    if "ray" in farm:
        print(
            f"parse executor: {farm.get('executor')} {farm.get('address')}: "
            f"{farm.get('ray')} files parsed on Ray, {farm.get('local')} locally, "
            f"{farm.get('fallbacks')} fallbacks"
            + (f" (last: {farm['error']})" if farm.get("error") else "")
        )
    search = info["search"]
    if t.mounted and search["state"] != "ok":
        print(f"search index: {search['state']}: {search.get('reason', '')}".rstrip(": "))
    journal = info["journal"]
    if t.mounted and journal["state"] not in ("ok", "off"):
        print(f"access journal: {journal_words(journal)}")
    for line in staged_lines:
        print(line)
    if parses is not None and (t.mounted or parses["cache"]):
        print(_parses_line(parses, mounted=t.mounted))
    for p, e in failed:
        print(f"failed: {p}: {e}")
    return 0


def _parses_line(parses: dict[str, Any], *, mounted: bool) -> str:
    cache = parses["cache"]
    line = f"parses run by this daemon: {parses['runs']}" if mounted else "parses"
    if cache is None:
        return line + "; no shared cache"
    return (
        f"{line}; shared cache {cache['dir']}: {cache['hits']} hits, {cache['misses']} misses, "
        f"{cache['published']} published, {cache['corrupt']} corrupt entries dropped"
    )


def cmd_sync(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with connect(t, args) as client:
        result = client.sync(args.timeout)
    _print_counts(result.counts)
    if not result.current:
        raise CLIError(f"{args.target}: views still not current after {args.timeout:g} s")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    import trio

    t = resolve_target(args.target, args.store)
    rel = workspace_rel(t, args.path)
    with open_engine(t, args) as engine:
        if not t.mounted:
            state = engine.workspace.check_file(rel)
            if state is None:
                raise CLIError(f"{rel}: no such file in the workspace")
            if state.freshness in (Freshness.PENDING, Freshness.STALE):
                trio.run(engine.drain)
        view = engine.views.parsed_view(rel)
        if view is None:
            state = engine.workspace.file_state(rel)
            if state is None:
                raise CLIError(f"{rel}: no such file in the workspace")
            raise CLIError(f"{rel}: unsupported format: no parsed view")
    if args.json:
        print(
            json.dumps(
                {
                    "path": rel,
                    "freshness": view.freshness.value,
                    "current_hash": view.current_hash,
                    "source_hash": view.source_hash,
                    "parser": view.parser,
                    "error": view.error,
                    "units": [
                        {
                            "name": u.name,
                            "locator": u.locator,
                            "text": u.content.decode("utf-8", "replace"),
                        }
                        for u in view.units
                    ],
                },
                ensure_ascii=False,
            )
        )
        return 0
    out = sys.stdout.buffer
    for unit in view.units:
        out.write(
            f"==> .parsed/{rel}/{unit.name} ({unit.locator}, {view.freshness}) <==\n".encode(
                "utf-8", "surrogateescape"
            )
        )
        out.write(unit.content)
        out.write(b"\n")
    out.flush()
    return 0 if view.freshness != Freshness.FAILED else 1


def cmd_diff(args: argparse.Namespace) -> int:
    if not args.exit_code:
        return _diff(args)
    # With --exit-code, 1 means "there are changes": trouble is 2.
    args.error_code = 2
    try:
        return _diff(args)
    except CLIError as exc:
        exc.code = 2 if exc.code == 1 else exc.code
        raise


def _diff(args: argparse.Namespace) -> int:
    import trio

    from swfs.review import changes as review

    t = resolve_target(args.target, args.store)
    with open_engine(t, args) as engine:
        if not t.mounted:
            engine.scan()
            trio.run(engine.drain)
        entries = review.changes(engine.workspace)
        rel = workspace_rel(t, args.path) if args.path else None
        if rel:  # '' (the root) is everything
            entries = [e for e in entries if _under(e.rel, rel) or _under(e.old_rel, rel)]
            if not entries and not _known(engine, t, rel):
                raise CLIError(f"{rel}: no such file in the workspace or its baseline")
        if args.json:
            text = _diff_json(engine, entries, with_diffs=not args.summary)
        elif not entries and rel:
            text = f"{rel}: unchanged since the baseline\n"
        else:
            render = review.summary if args.summary else review.all_diff
            text = render(engine.workspace, entries)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    return 1 if args.exit_code and entries else 0


def _under(path: str | None, rel: str) -> bool:
    """``path`` is ``rel`` or inside the directory ``rel``."""
    return path is not None and (path == rel or path.startswith(rel + "/"))


def _known(engine: Engine, t: Target, rel: str) -> bool:
    """Is ``rel`` a file or directory the workspace has now or had at the
    baseline?"""
    if engine.workspace.file_state(RelPath(rel)) is not None:
        return True
    base = engine.workspace.baseline_manifest()
    if rel in base or any(p.startswith(rel + "/") for p in base):
        return True
    return (t.src / rel).is_dir()


def _diff_json(engine: Engine, entries: list[ReviewEntry], *, with_diffs: bool) -> str:
    from swfs.review import changes as review

    at = engine.workspace.store.get_meta("baseline_at")
    changes = []
    for e in entries:
        item: dict[str, Any] = {
            "path": e.rel,
            "status": e.status.value,
            "old_path": e.old_rel,
            "baseline_hash": e.baseline_hash,
            "current_hash": e.current_hash,
        }
        if with_diffs:
            item["diff"] = review.file_diff(engine.workspace, e)
        changes.append(item)
    doc = {"baseline_at": at, "changes": changes}
    return json.dumps(doc, ensure_ascii=False) + "\n"


def cmd_versions(args: argparse.Namespace) -> int:
    from swfs.history import snapshots as history

    t = resolve_target(args.target, args.store)
    rel = workspace_rel(t, args.path)
    with open_engine(t, args) as engine:
        if not t.mounted:
            engine.workspace.check_file(rel)
        versions = engine.history.versions(rel)
        base_n = history.baseline_version(engine.workspace, rel)
    if not versions:
        raise CLIError(f"{rel}: no recorded versions")
    if args.json:
        for v in versions:
            print(
                json.dumps(
                    {
                        "number": v.number,
                        "hash": v.hash,
                        "recorded_at": v.recorded_at,
                        "cause": v.cause.value,
                        "size": v.size,
                        "available": v.available,
                        "not_kept": v.not_kept,
                        "baseline": v.number == base_n,
                    }
                )
            )
        return 0
    width = len(hashform.label(versions[0].hash))
    print(f"{'N':>4}  {'HASH':<{width}}  {'RECORDED (UTC)':<20}  {'CAUSE':<8} {'BYTES':>10}")
    for v in versions:
        at = when(v.recorded_at)
        kept = "" if v.available else "  (hash only: bytes not kept)"
        if v.not_kept is not None:
            kept = f"  (bytes not kept: {v.not_kept})"
        kept += "  <- the baseline" if v.number == base_n else ""
        print(
            f"{v.number:4d}  {hashform.label(v.hash)}  {at:<20}  {v.cause.value:<8} "
            f"{v.size or 0:>10}{kept}"
        )
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    path, sep, number = args.spec.rpartition("@")
    if not sep or not path or not number:
        raise CLIError(
            f"{args.spec}: expected PATH@N (a version from `swfs versions`), "
            "PATH@SNAPSHOT or PATH@baseline",
            2,
        )
    rel = workspace_rel(t, path)
    if number.isdigit():  # a snapshot may hold a path that has no versions now
        _require_tracked(t, args, rel)
    with connect(t, args) as client:
        if not number.isdigit():
            h = client.restore_from(rel, number)
            print(f"{rel}: restored as {number} has it ({hashform.label(h)})")
            return 0
        new = client.restore(rel, int(number))
    print(f"{rel}: restored version {number} as version {new}")
    return 0


def _require_tracked(t: Target, args: argparse.Namespace, rel: RelPath) -> None:
    """A path swfs never recorded a version of cannot be restored: say why."""
    with open_engine(t, args) as engine:
        if engine.history.versions(rel):
            return
    path = t.src / rel
    if not path.exists() and not path.is_symlink():
        raise CLIError(f"{rel}: no such file in the workspace, and no recorded versions")
    if path.is_dir():
        raise CLIError(f"{rel}: is a directory; restore takes one file (PATH@N)")
    if not path.is_file() or path.is_symlink():
        raise CLIError(f"{rel}: untracked: not a regular file, so swfs keeps no versions of it")
    raise CLIError(
        f"{rel}: untracked: swfs has recorded no version of it "
        "(new since the last scan: `swfs sync` records it)"
    )


def cmd_baseline(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with connect(t, args) as client:
        files = client.baseline()
    print(f"baseline: the present state of {files} files is the new baseline")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with connect(t, args) as client:
        if args.delete is not None:
            files = client.delete_snapshot(check_name(args.delete, "snapshot"))
            print(f"snapshot {args.delete} deleted ({files} files; `swfs gc` frees its bytes)")
            return 0
        if args.name is None:
            raise CLIError("snapshot: give a NAME (or --delete NAME)", 2)
        files = client.snapshot(check_name(args.name, "snapshot"))
    print(f"snapshot {args.name}: {files} files")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with open_engine(t, args) as engine:
        events = list(engine.workspace.store.iter_state_log())
    from .lineage import print_log

    print_log(events, t, args)  # the state log, with the access journal's events
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from swfs.check import run_checks

    t = resolve_target(args.target, args.store)
    if t.mounted:
        # The daemon may be recording writes that just closed (bytes stored,
        # their version not yet): check the state once it has settled, or a
        # blob of a version being recorded reads as an orphan.
        with contextlib.suppress(ControlUnavailable, ControlError, OSError):
            control.request(t.store, "sync", io_timeout=660, timeout=600)
    with open_engine(t, args) as engine:
        problems = run_checks(engine.workspace, repair=args.repair)
    for p in problems:
        print(f"{p.check}: {p.message}" + (" (repaired)" if p.repaired else ""))
    left = [p for p in problems if not p.repaired]
    if left:
        raise CLIError(f"{len(left)} problem(s) found in {t.store}")
    print(f"store {t.store}: ok" if not problems else f"store {t.store}: repaired")
    return 0


# ---------------------------------------------------------------- register
def register(c: Commands) -> None:
    sp = c.add("index", cmd_index, "scan and parse SRC without mounting", target="src")
    sp.add_argument("--timeout", type=float, default=3600.0, help=argparse.SUPPRESS)
    c.parse_opts(sp)
    sp = c.add("status", cmd_status, "counts by freshness, queue, store size")
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = c.add("sync", cmd_sync, "wait until every view is current")
    sp.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    c.parse_opts(sp)
    sp = c.add("show", cmd_show, "the parsed units of one file, with freshness")
    sp.add_argument("path", metavar="PATH")
    sp.add_argument("--json", action="store_true")
    c.parse_opts(sp)
    sp = c.add("diff", cmd_diff, "the review against the baseline")
    sp.add_argument("path", metavar="PATH", nargs="?")
    sp.add_argument("--summary", action="store_true", help="only the list of changed paths")
    sp.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: baseline_at and changes (path, status, old_path, full "
        "baseline_hash and current_hash, and the diff unless --summary)",
    )
    sp.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when there are changes, 0 when none (as git diff); 2 on errors",
    )
    c.parse_opts(sp)
    sp = c.add("versions", cmd_versions, "the recorded versions of a file")
    sp.add_argument("path", metavar="PATH")
    sp.add_argument("--json", action="store_true")
    sp = c.add(
        "restore", cmd_restore, "bring back PATH as version N, a snapshot or the baseline had it"
    )
    sp.add_argument("spec", metavar="PATH@N|PATH@SNAPSHOT|PATH@baseline")
    c.add("baseline", cmd_baseline, "accept the present state as the new baseline")
    sp = c.add("snapshot", cmd_snapshot, "name the present state (keeps all its bytes)")
    sp.add_argument("name", metavar="NAME", nargs="?")
    sp.add_argument("--delete", metavar="NAME", help="delete snapshot NAME instead")
    sp = c.add("log", cmd_log, "the state log and the access journal, labelled, in time order")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    sp.add_argument("-n", "--limit", type=int, default=0, help="only the last N events")
    sp.add_argument(
        "--kind",
        choices=("read", "list", "write", "state"),
        help="only the access journal's events of this kind (state: only the state log)",
    )
    sp = c.add("check", cmd_check, "verify the store's invariants")
    sp.add_argument("--repair", action="store_true", help="fix what can be fixed")
