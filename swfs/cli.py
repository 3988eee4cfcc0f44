"""The ``swfs`` command line.

Every error names the path and the cause and exits non-zero without a
traceback.  TARGET is a workspace folder or its mount point; while a
workspace is mounted, commands that change or wait on its state go through
the daemon's control socket, and read-only ones read the store directly.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import trio

from . import control
from .api import XATTR_PREFIX, Freshness, RelPath
from .control import ControlError, ControlUnavailable
from .mount import MountError
from .parsework import WorkerLimits
from .store import StoreError
from .workspace import STORE_NAME, Config, WorkspaceError

log = logging.getLogger(__name__)


class CLIError(Exception):
    """An error for the user: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Target:
    src: Path
    store: Path
    mounted: bool


def resolve_target(target: str, store: str | None = None) -> Target:
    path = Path(target)
    if not path.exists():
        raise CLIError(f"{target}: no such file or directory")
    if not path.is_dir():
        raise CLIError(f"{target}: not a directory")
    try:
        src = os.getxattr(path, XATTR_PREFIX + "source").decode("utf-8", "surrogateescape")
        store_dir = os.getxattr(path, XATTR_PREFIX + "store").decode("utf-8", "surrogateescape")
        return Target(Path(src), Path(store_dir), True)
    except OSError:
        pass
    src_path = path.resolve()
    store_path = Path(store).resolve() if store else src_path / STORE_NAME
    mounted = False
    if (store_path / control.SOCKET_NAME).exists():
        try:
            control.request(store_path, "ping", io_timeout=5)
            mounted = True
        except (ControlUnavailable, ControlError, OSError):
            mounted = False
    return Target(src_path, store_path, mounted)


def _config(args: argparse.Namespace) -> Config:
    limits = WorkerLimits(
        timeout=getattr(args, "parse_timeout", None) or WorkerLimits.timeout,
        memory_mb=getattr(args, "parse_memory", None) or WorkerLimits.memory_mb,
        workers=getattr(args, "workers", None) or WorkerLimits().workers,
    )
    return Config(limits=limits)


def _engine(t: Target, args: argparse.Namespace) -> Any:
    from .engine import Engine

    return Engine.open(t.src, t.store, config=_config(args))


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, label: str, stream: Any = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


# ------------------------------------------------------------------ commands
def cmd_index(args: argparse.Namespace) -> int:
    t = resolve_target(args.src, args.store)
    if t.mounted:
        result = control.request(t.store, "sync", io_timeout=args.timeout + 5, timeout=args.timeout)
        _print_counts(result["counts"])
        return 0
    t0 = time.monotonic()
    with _engine(t, args) as engine:
        scan_progress = Progress("hashing")
        stats = engine.scan(progress=scan_progress)
        counts = engine.counts()
        if counts["pending"] or counts["stale"]:
            trio.run(partial(engine.drain, Progress("parsing"), scan=False))
            counts = engine.counts()
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


def cmd_status(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with _engine(t, args) as engine:
        if not t.mounted:
            engine.scan()
        counts = engine.counts()
        content = engine.content_counts()
        failed = []
        with engine.store.read() as txn:
            for rel, rec in engine.store.iter_files(txn):
                if engine._freshness(rec, txn) == Freshness.FAILED:
                    parse = engine.store.get_parse(rec.hash, rec.parser or "", txn)
                    failed.append((rel, (parse or {}).get("error") or "parse failed"))
        blob_bytes = engine.blobs.total_bytes()
        not_kept = sum(
            1
            for rel, rec in engine.store.all_files().items()
            if not engine._keeps_bytes(rel, rec.size)
        )
    info: dict[str, Any] = {
        **counts,
        "mounted": t.mounted,
        "source": str(t.src),
        "store": str(t.store),
        "queue": counts["pending"] + counts["stale"],
        "content": content,
        "blob_bytes": blob_bytes,
        "not_preserved": not_kept,
        "failures": [{"path": p, "error": e} for p, e in failed],
    }
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
    if not_kept:
        print(f"{not_kept} files keep hashes only (too large or in .swfsignore)")
    for p, e in failed:
        print(f"failed: {p}: {e}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    if t.mounted:
        result = control.request(t.store, "sync", io_timeout=args.timeout + 5, timeout=args.timeout)
        _print_counts(result["counts"])
        if not result["current"]:
            raise CLIError(f"{args.target}: views still not current after {args.timeout:g} s")
        return 0
    with _engine(t, args) as engine:
        engine.scan()
        trio.run(engine.drain, Progress("parsing"))
        _print_counts(engine.counts())
    return 0


def _rel(t: Target, path: str) -> RelPath:
    """PATH as given (relative to TARGET, or absolute under it) -> workspace rel."""
    p = Path(path)
    if p.is_absolute():
        for root in (t.src,):
            try:
                return RelPath(p.relative_to(root).as_posix())
            except ValueError:
                continue
        raise CLIError(f"{path}: not inside the workspace {t.src}")
    parts = [x for x in p.as_posix().split("/") if x not in ("", ".")]
    if ".." in parts:
        raise CLIError(f"{path}: '..' is not allowed in workspace paths")
    return RelPath("/".join(parts))


def cmd_show(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    rel = _rel(t, args.path)
    with _engine(t, args) as engine:
        if not t.mounted:
            state = engine.check_file(rel)
            if state is None:
                raise CLIError(f"{rel}: no such file in the workspace")
            if state.freshness in (Freshness.PENDING, Freshness.STALE):
                trio.run(engine.drain)
        view = engine.parsed_view(rel)
        if view is None:
            state = engine.file_state(rel)
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
    from . import review

    t = resolve_target(args.target, args.store)
    with _engine(t, args) as engine:
        if not t.mounted:
            engine.scan()
            trio.run(engine.drain)
        entries = review.changes(engine)
        if args.path:
            rel = _rel(t, args.path)
            entries = [e for e in entries if rel in (e.rel, e.old_rel)]
            if not entries:
                print(f"{rel}: unchanged since the baseline")
                return 0
        render = review.summary if args.summary else review.all_diff
        text = render(engine, entries)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    return 0


def cmd_versions(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    rel = _rel(t, args.path)
    with _engine(t, args) as engine:
        if not t.mounted:
            engine.check_file(rel)
        versions = engine.versions(rel)
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
                    }
                )
            )
        return 0
    for v in versions:
        when = _when(v.recorded_at)
        kept = "" if v.available else "  (hash only: bytes not kept)"
        print(
            f"{v.number:4d}  b3:{v.hash[:16]}  {when}  {v.cause.value:<8} {v.size or 0:>10}{kept}"
        )
    return 0


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cmd_restore(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    path, sep, number = args.spec.rpartition("@")
    if not sep or not number.isdigit():
        raise CLIError(f"{args.spec}: expected PATH@N (a version number from `swfs versions`)", 2)
    rel = _rel(t, path)
    if t.mounted:
        result = control.request(t.store, "restore", io_timeout=600, path=rel, version=int(number))
        print(f"{rel}: restored version {number} as version {result['version']}")
        return 0
    with _engine(t, args) as engine:
        engine.check_file(rel)
        v = engine.restore(rel, int(number))
    print(f"{rel}: restored version {number} as version {v.number}")
    return 0


def cmd_baseline(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    if t.mounted:
        result = control.request(t.store, "baseline", io_timeout=600)
        files = result["files"]
    else:
        with _engine(t, args) as engine:
            engine.scan()
            files = engine.set_baseline()
    print(f"baseline: the present state of {files} files is the new baseline")
    return 0


def cmd_snapshot(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    if t.mounted:
        files = control.request(t.store, "snapshot", io_timeout=3600, name=args.name)["files"]
    else:
        with _engine(t, args) as engine:
            files = engine.snapshot(args.name)
    print(f"snapshot {args.name}: {files} files")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    t = resolve_target(args.target, args.store)
    with _engine(t, args) as engine:
        events = list(engine.store.iter_journal())
    if args.limit:
        events = events[-args.limit :]
    for seq, ev in events:
        if args.json:
            print(json.dumps({"seq": seq, **ev}, ensure_ascii=False))
            continue
        fields = " ".join(f"{k}={v}" for k, v in ev.items() if k not in ("t", "ev"))
        print(f"{seq:6d}  {_when(ev['t'])}  {ev['ev']:<9} {fields}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from .check import run_checks

    t = resolve_target(args.target, args.store)
    with _engine(t, args) as engine:
        problems = run_checks(engine, repair=args.repair)
    for p in problems:
        print(f"{p.check}: {p.message}" + (" (repaired)" if p.repaired else ""))
    left = [p for p in problems if not p.repaired]
    if left:
        raise CLIError(f"{len(left)} problem(s) found in {t.store}")
    print(f"store {t.store}: ok" if not problems else f"store {t.store}: repaired")
    return 0


PROMPT = """\
This folder is an swfs workspace: a versioned filesystem mount.  Beside the
native files (read and write them as usual) there are three read-only trees:

  .parsed/<path>/     text of every document, one file per unit:
                      page-0001.md (PDF pages), sheet-<Name>.md (spreadsheets,
                      one line per cell: `Sheet1!B12 = 1200`, formulas as
                      `Sheet1!C12 = =B12*2 -> 2400`, or `-> 2700 (computed)`
                      where the file holds no value and swfs computed it),
                      slide-001.md, section-001.md (Word, one per heading),
                      document.md,
                      content.txt.  Search with `grep -rn PATTERN .parsed/`:
                      the file name of a hit is its page/sheet/slide/section
                      (a section's header gives its heading path).
  .review/            SUMMARY.md and ALL.diff: what changed since the
                      baseline (cell-level for spreadsheets); <path>.diff each.
  .versions/<path>/   every recorded version of a file, NNNN-<hash>.<ext>
                      (not listed by `ls` of the root; open it by path).

Each .parsed file starts with a header line
  <!-- swfs source=... unit=... hash=... freshness=current|stale|pending|failed ... -->
A `stale` view describes an older version of the file; it is re-parsed in the
background after every write, and a read waits briefly for that.  Run
`swfs sync .` to wait until every view is current, or read the xattr
`user.sw.freshness` (getfattr -n user.sw.freshness FILE).  `swfs diff .`
prints the review, `swfs versions . PATH` the history, `swfs restore . PATH@N`
brings a version back.
"""


def cmd_prompt(args: argparse.Namespace) -> int:
    sys.stdout.write(PROMPT)
    return 0


def cmd_mount(args: argparse.Namespace) -> int:
    from .mount import mount_workspace

    return mount_workspace(args, _config(args))


def cmd_umount(args: argparse.Namespace) -> int:
    from .mount import unmount_workspace

    return unmount_workspace(args)


# ------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swfs", description="A versioned workspace filesystem for AI agents."
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str,
        fn: Callable[[argparse.Namespace], int],
        help_: str,
        target: str | None = "target",
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        if target:
            sp.add_argument(
                target, metavar=target.upper(), help="workspace folder or its mount point"
            )
            sp.add_argument("--store", help="store directory (default: SRC/.swfs)")
        sp.set_defaults(fn=fn)
        return sp

    def parse_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--workers", type=int, help="parse worker processes (default: cores)")
        sp.add_argument("--parse-timeout", type=float, help="seconds per file (default 120)")
        sp.add_argument("--parse-memory", type=int, help="MiB per parse worker (default 3072)")

    sp = add("mount", cmd_mount, "mount SRC at MNT (daemonizes once ready)", target="src")
    sp.add_argument("mountpoint", metavar="MNT")
    sp.add_argument("-f", "--foreground", action="store_true", help="stay in front, log to stderr")
    sp.add_argument(
        "--stale",
        choices=("serve", "wait"),
        default="wait",
        help="stale reads: wait (up to --stale-wait) for the re-parse, or serve the "
        "prior view marked stale at once",
    )
    sp.add_argument(
        "--stale-wait",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds a read of a stale view waits for its re-parse before it is "
        "served marked stale (default 2)",
    )
    sp.add_argument(
        "--wait-timeout",
        type=float,
        default=10.0,
        help="seconds a read of a pending unit waits for its first parse",
    )
    sp.add_argument(
        "--versions",
        choices=("hidden", "visible"),
        default="hidden",
        help="whether the mount root lists .versions (it works by path either way)",
    )
    sp.add_argument("--no-allow-other", action="store_true", help="do not mount with allow_other")
    sp.add_argument(
        "--rescan-interval",
        type=float,
        default=30.0,
        help="seconds between scans for changes made behind the mount",
    )
    sp.add_argument(
        "--poll-us",
        type=float,
        default=500.0,
        help="microseconds the daemon keeps polling for the next request after one "
        "(saves a wake-up per request in tree walks; 0: always sleep)",
    )
    sp.add_argument("--debug", action="store_true", help="log every request")
    parse_opts(sp)
    sp = sub.add_parser("umount", help="unmount MNT", description="unmount MNT")
    sp.add_argument("mountpoint", metavar="MNT")
    sp.add_argument("-z", "--lazy", action="store_true", help="lazy unmount")
    sp.set_defaults(fn=cmd_umount)

    sp = add("index", cmd_index, "scan and parse SRC without mounting", target="src")
    sp.add_argument("--timeout", type=float, default=3600.0, help=argparse.SUPPRESS)
    parse_opts(sp)
    sp = add("status", cmd_status, "counts by freshness, queue, store size")
    sp.add_argument("--json", action="store_true", help="one JSON object")
    sp = add("sync", cmd_sync, "wait until every view is current")
    sp.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    parse_opts(sp)
    sp = add("show", cmd_show, "the parsed units of one file, with freshness")
    sp.add_argument("path", metavar="PATH")
    sp.add_argument("--json", action="store_true")
    parse_opts(sp)
    sp = add("diff", cmd_diff, "the review against the baseline")
    sp.add_argument("path", metavar="PATH", nargs="?")
    sp.add_argument("--summary", action="store_true", help="only the list of changed paths")
    parse_opts(sp)
    sp = add("versions", cmd_versions, "the recorded versions of a file")
    sp.add_argument("path", metavar="PATH")
    sp.add_argument("--json", action="store_true")
    sp = add("restore", cmd_restore, "bring back version N of PATH (PATH@N)")
    sp.add_argument("spec", metavar="PATH@N")
    add("baseline", cmd_baseline, "accept the present state as the new baseline")
    sp = add("snapshot", cmd_snapshot, "name the present state (keeps all its bytes)")
    sp.add_argument("name", metavar="NAME")
    sp = add("log", cmd_log, "the journal of state transitions")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    sp.add_argument("-n", "--limit", type=int, default=0, help="only the last N events")
    sp = add("check", cmd_check, "verify the store's invariants")
    sp.add_argument("--repair", action="store_true", help="fix what can be fixed")
    add("prompt", cmd_prompt, "a text telling an agent how to use the mount", target=None)
    return p


def die(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"swfs: error: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> None:
    # Behave like a Unix tool when piped into head: exit quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="swfs: %(levelname)s: %(message)s")
    try:
        code = args.fn(args)
    except CLIError as exc:
        die(str(exc), exc.code)
    except (WorkspaceError, StoreError, ControlError, MountError) as exc:
        die(str(exc))
    except ControlUnavailable as exc:
        die(f"{exc}: the daemon is not answering")
    except OSError as exc:
        where = exc.filename or ""
        die(f"{where}: {exc.strerror or exc}" if where else str(exc))
    except KeyboardInterrupt:
        die("interrupted", 130)
    raise SystemExit(code)
