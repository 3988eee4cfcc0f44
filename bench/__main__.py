"""``python -m bench``: run the workloads, write results.json, print the table."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import (
    historyloads,
    hostileparse,
    journalcost,
    legacy,
    longpdf,
    passthrough,
    programs,
    renderload,
    reqcost,
    sandboxes,
    searchload,
    stagedloads,
    storage,
    swfsloads,
    unitcost,
    worldload,
)
from bench.common import Ctx, Sizes
from bench.mounter import (
    BenchError,
    Mounter,
    RefMounter,
    SwfsMounter,
    Unsupported,
    unmount_all,
)
from bench.report import WorkloadResult, format_table, write_json

log = logging.getLogger("bench")

Workload = Callable[[Ctx, WorkloadResult], None]

# Workloads that need only swfs (no native or peer column), one module each;
# a new module is one entry here.
_SWFS_MODULES = (
    swfsloads,
    unitcost,
    journalcost,
    searchload,
    renderload,
    historyloads,
    worldload,
    storage,
    stagedloads,
    reqcost,
    longpdf,
    legacy,
    hostileparse,
    programs,
    sandboxes,
)
WORKLOADS: dict[str, Workload] = dict(passthrough.WORKLOADS)
for _module in _SWFS_MODULES:
    WORKLOADS.update(_module.WORKLOADS)
SWFS_ONLY = {name for m in _SWFS_MODULES for name in m.WORKLOADS}


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    here = Path(__file__).resolve().parent
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="swfs benchmark: each workload on the native folder and on the mount.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, 3 rounds (under a minute)")
    p.add_argument(
        "--only", nargs="+", metavar="NAME", choices=sorted(WORKLOADS), help="workloads to run"
    )
    p.add_argument("--rounds", type=int, help="paired rounds (default 5; quick 3)")
    p.add_argument("--out", type=Path, default=here / "results.json")
    p.add_argument(
        "--workdir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "swfs-bench",
        help="generated data (cached between runs), mountpoints and scratch space",
    )
    p.add_argument("--mounter", choices=("swfs", "ref"), default="swfs")
    p.add_argument(
        "--sync-timeout",
        type=float,
        default=1800.0,
        help="bound on one `swfs sync` (seconds)",
    )
    p.add_argument(
        "--swfs-exe",
        type=Path,
        help="the swfs CLI to use (default: the one beside this Python)",
    )
    p.add_argument(
        "--first-mount",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time a first mount from an empty store (default: only with --quick)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SIZE=N",
        help="override a size, e.g. --set small_files=10000 (see bench/common.py Sizes)",
    )
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def _override(sizes: Sizes, items: Sequence[str]) -> Sizes:
    fields = {f.name: f for f in dataclasses.fields(sizes)}
    changes: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in fields:
            raise SystemExit(f"--set {item}: expected SIZE=N with SIZE one of {', '.join(fields)}")
        current = getattr(sizes, key)
        try:
            if isinstance(current, bool):
                changes[key] = value.lower() in ("1", "true", "yes", "on")
            else:
                changes[key] = int(value.replace("_", ""))
        except ValueError:
            raise SystemExit(f"--set {item}: {value!r} is not a number") from None
    return dataclasses.replace(sizes, **changes)


def _commit() -> str | None:
    """The checked-out commit of the tree being measured (None outside git)."""
    try:
        cp = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return cp.stdout.strip() or None


def _meta(args: argparse.Namespace, ctx: Ctx, started: float) -> dict[str, Any]:
    return {
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(),
        "elapsed_s": round(time.time() - started, 1),
        "mounter": args.mounter,
        "quick": args.quick,
        "rounds": ctx.rounds,
        "sizes": dataclasses.asdict(ctx.sizes),
        "cold": {None: "not used", True: "caches dropped", False: "warm-only"}[ctx.can_drop_caches],
        "commit": _commit(),
        "host": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "notes": ctx.notes,
    }


def _install_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so that the ``finally`` clauses unmount."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    _install_sigterm()
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sizes = Sizes.quick() if args.quick else Sizes.full()
    if args.first_mount is not None:
        sizes = dataclasses.replace(sizes, first_mount=args.first_mount)
    sizes = _override(sizes, args.set)
    mounter: Mounter
    if args.mounter == "ref":
        mounter = RefMounter(workdir / "logs")
    else:
        mounter = SwfsMounter(sync_timeout=args.sync_timeout, exe=args.swfs_exe)
    ctx = Ctx(sizes=sizes, rounds=args.rounds, workdir=workdir, mounter=mounter, quick=args.quick)
    names = args.only or list(WORKLOADS)
    results: list[WorkloadResult] = []
    started = time.time()
    out: Path = args.out
    try:
        for name in names:
            result = WorkloadResult(name)
            results.append(result)
            if name in SWFS_ONLY and not mounter.is_swfs:
                result.status = "skipped"
                result.note = "needs --mounter swfs"
                continue
            log.info("== %s", name)
            t0 = time.perf_counter()
            result.status = "running"
            try:
                WORKLOADS[name](ctx, result)
                result.status = "ok"
            except Unsupported as exc:
                result.status = "skipped"
                result.add_note(str(exc))
                log.warning("%s skipped: %s", name, exc)
            except BenchError as exc:
                result.status = "error"
                result.error = str(exc)
                log.error("%s: %s", name, exc)
            except Exception as exc:
                result.status = "error"
                result.error = f"{type(exc).__name__}: {exc}"
                log.error("%s failed:\n%s", name, traceback.format_exc())
            finally:
                result.elapsed_s = time.perf_counter() - t0
                unmount_all()
                write_json(out, _meta(args, ctx, started), results)
    except KeyboardInterrupt:
        log.error("interrupted")
        if results and results[-1].status == "running":
            results[-1].status = "error"
            results[-1].error = "interrupted"
        return 130
    finally:
        unmount_all()
        write_json(out, _meta(args, ctx, started), results)
        print()
        print(format_table(results))
        if peers := reqcost.peer_table(results):
            print(f"\nratios next to the peers (mount / native, same run):\n{peers}")
        if progs := programs.table(results):
            print(f"\nreal programs (medians of the rounds, same run):\n{progs}")
        print(
            f"\nresults: {out}  (mounter {args.mounter}, cold: {_meta(args, ctx, started)['cold']})"
        )
    return 0 if all(r.status != "error" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
