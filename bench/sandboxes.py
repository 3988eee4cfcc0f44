"""``sandboxes``: many task sandboxes over one baseline (issue 40).

On a workspace of ``sandbox_files`` files built from real formats
(bench/bigws.py; 20,000 in a full run):

1. the first mount to grep-ready, with a progress bar on stderr: ``swfs
   mount --cache CACHE BASE MNT`` (plain ``swfs mount`` where this swfs has
   no ``--cache``), timed from the command until every recorded file's view
   is settled (none pending or stale, every file recorded) and a known
   file's tag is read back from its ``.parsed`` view;
2. ``sandboxes`` more task sandboxes, ``swfs mount --staged --from BASE
   --cache CACHE TASK MNT`` each, each to grep-ready, as a share of the
   first (the issue's goal: at most 5 %), all of them kept mounted;
3. the resident memory of each added daemon (the daemon alone, and with its
   parse workers), goal under 150 MB;
4. ``swfs reset MNT`` of each sandbox after a write in it, to grep-ready.

Steps 2-4 need the shared cache and task sandboxes; with a swfs that lacks
them the workload records step 1 and says what it skipped.

Knobs: ``--set sandbox_files=N`` or ``SWFS_BENCH_SANDBOX_FILES``; the
number of sandboxes ``SWFS_BENCH_SANDBOXES`` (default 10, quick 3);
``SWFS_BENCH_PARSE_ON=ray://HOST:PORT`` has every mount parse on a Ray
cluster (``--parse-on``), ``SWFS_BENCH_WORKERS=N`` sets ``--workers``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import bigws
from bench.common import STORE, Ctx, swfs_mounter
from bench.mounter import (
    MOUNT_TIMEOUT,
    BenchError,
    Mount,
    SwfsMounter,
    children,
    fuse_daemon_pid,
    proc_status_kb,
)
from bench.report import ABSOLUTE, Target, WorkloadResult

READY_TIMEOUT = 4 * 3600.0  # seconds: a 20,000-file first mount on a loaded machine
POLL = 0.2


def _files(ctx: Ctx) -> int:
    env = os.environ.get("SWFS_BENCH_SANDBOX_FILES")
    return int(env) if env else ctx.sizes.sandbox_files


def _count(ctx: Ctx) -> int:
    env = os.environ.get("SWFS_BENCH_SANDBOXES")
    return int(env) if env else (3 if ctx.quick else 10)


def _store_of(mnt: Path) -> Path:
    from swfs.api import XATTR_PREFIX

    return Path(os.getxattr(mnt, XATTR_PREFIX + "store").decode("utf-8", "surrogateescape"))


def _counts(store: Path) -> dict[str, int] | None:
    from swfs import control

    try:
        reply = control.request(store, "counts", io_timeout=60)
    except Exception:  # the daemon still starting, or busy
        return None
    return reply if isinstance(reply, dict) else None


def _probe(base: Path) -> tuple[str, str]:
    """(rel, tag) of a text file of ``base``: its view must show the tag."""
    for dirpath, _, names in sorted(os.walk(base)):
        if STORE in Path(dirpath).parts:
            continue
        for n in sorted(names):
            if n.endswith((".md", ".txt")):
                rel = os.path.relpath(os.path.join(dirpath, n), base)
                i = int(n.rsplit("-", 1)[1].split(".")[0])
                return rel, bigws.tag_of(i)
    raise BenchError(f"{base}: no text file to probe")


def wait_grep_ready(
    mnt: Path,
    files: int,
    probe: tuple[str, str],
    t0: float,
    progress: Callable[[int, int], None] | None = None,
) -> float:
    """Seconds from ``t0`` until every view of ``mnt`` is settled and the
    probe's tag reads back from its ``.parsed`` view."""
    deadline = t0 + READY_TIMEOUT
    store: Path | None = None
    while True:
        if time.monotonic() > deadline:
            raise BenchError(f"{mnt}: not grep-ready after {READY_TIMEOUT:.0f} s")
        if store is None:
            with contextlib.suppress(OSError):
                store = _store_of(mnt)
        c = _counts(store) if store is not None else None
        if c is not None:
            unsettled = c.get("pending", 0) + c.get("stale", 0)
            recorded = c.get("files", 0)
            if progress is not None:
                progress(max(recorded - unsettled, 0), max(files, recorded))
            if recorded >= files and unsettled == 0 and _shows(mnt, probe):
                if progress is not None:
                    progress(max(files, recorded), max(files, recorded))
                return time.monotonic() - t0
        time.sleep(POLL)


def _shows(mnt: Path, probe: tuple[str, str]) -> bool:
    rel, tag = probe
    view = mnt / ".parsed" / rel
    try:
        return any(tag in p.read_text(errors="replace") for p in view.iterdir())
    except OSError:
        return False


def _rss_mb(pid: int | None) -> tuple[float, float]:
    """(daemon, daemon with its descendants) resident memory, MB."""
    if pid is None:
        return float("nan"), float("nan")
    own = (proc_status_kb(pid, "VmRSS") or 0) / 1024
    total, todo = own, children(pid)
    while todo:
        p = todo.pop()
        total += (proc_status_kb(p, "VmRSS") or 0) / 1024
        todo += children(p)
    return own, total


def _supports_sandboxes(sw: SwfsMounter) -> str | None:
    """Why this swfs cannot run sandboxes (None: it can)."""
    help_text = sw.cmd("mount", "--help", timeout=60).stdout
    missing = [
        o
        for o in ("--cache", "--from", "--staged")
        if re.search(rf"(?<![\w-]){o}(?![\w-])", help_text) is None
    ]
    if not sw.has("reset"):
        missing.append("swfs reset")
    return f"this swfs lacks {', '.join(missing)}" if missing else None


def sandboxes(ctx: Ctx, result: WorkloadResult) -> None:
    extra: list[str] = []
    if os.environ.get("SWFS_BENCH_PARSE_ON"):
        extra += ["--parse-on", os.environ["SWFS_BENCH_PARSE_ON"]]
    if os.environ.get("SWFS_BENCH_WORKERS"):
        extra += ["--workers", os.environ["SWFS_BENCH_WORKERS"]]
    sw = swfs_mounter(ctx, "mount", "umount", "sync", options=extra)
    files, count = _files(ctx), _count(ctx)
    base = bigws.build(ctx.data, files, progress=bigws.bar("sandboxes: generating"))
    result.info.update(files=files, sandboxes=count, census=bigws.census(base), mount_options=extra)
    why_not = _supports_sandboxes(sw)
    with_cache = why_not is None or "--cache" not in why_not
    probe = _probe(base)
    first = result.metric(
        "first_mount_grep_ready_s", "s", kind=ABSOLUTE, note="swfs mount: every view settled"
    )
    share = result.metric(
        "sandbox_grep_ready_pct",
        "%",
        kind=ABSOLUTE,
        target=Target("<=", 5.0, "<=5% of first"),
        note="each sandbox's mount to grep-ready, % of the first",
    )
    ready = result.metric("sandbox_grep_ready_s", "s", kind=ABSOLUTE)
    rss = result.metric(
        "daemon_rss_mb",
        "MB",
        kind=ABSOLUTE,
        target=Target("<", 150.0, "<150 MB"),
        note="each added sandbox daemon, alone",
    )
    rss_tree = result.metric(
        "daemon_tree_rss_mb", "MB", kind=ABSOLUTE, note="with its parse workers"
    )
    reset = result.metric("reset_grep_ready_s", "s", kind=ABSOLUTE, note="swfs reset, to ready")
    cache = ctx.workdir / "cache"
    for _ in range(ctx.rounds if not ctx.quick else 1):
        shutil.rmtree(base / STORE, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        cache.mkdir(parents=True)
        mnt0 = ctx.mountpoint("sandbox-base")
        mnt0.mkdir(parents=True, exist_ok=True)
        opts = ["--cache", str(cache)] if with_cache else []
        m0 = Mount(base, mnt0)
        t0 = time.monotonic()
        sw.cmd("mount", *opts, base, mnt0, timeout=MOUNT_TIMEOUT)
        try:
            m0.pid = fuse_daemon_pid(mnt0)
            secs = wait_grep_ready(mnt0, files, probe, t0, bigws.bar("sandboxes: first mount"))
            first.values.append(secs)
            result.info["base_rss_mb"] = round(_rss_mb(m0.pid)[0], 1)
            if extra:
                with contextlib.suppress(Exception):
                    from swfs import control

                    result.info["executor"] = control.request(
                        _store_of(mnt0), "executor", io_timeout=30
                    )
        finally:
            sw.unmount(m0)
        if why_not is not None:
            result.add_note(f"sandboxes, their memory and reset skipped: {why_not}")
            continue
        mounts: list[Mount] = []
        try:
            for k in range(count):
                task = ctx.scratch(f"sandbox-task-{k}")
                mnt = ctx.mountpoint(f"sandbox-{k}")
                mnt.mkdir(parents=True, exist_ok=True)
                m = Mount(task, mnt)
                t0 = time.monotonic()
                sw.cmd(
                    "mount", "--staged", "--from", base, "--cache", cache, task, mnt,
                    timeout=MOUNT_TIMEOUT,
                )  # fmt: skip
                mounts.append(m)
                m.pid = fuse_daemon_pid(mnt)
                secs = wait_grep_ready(mnt, files, probe, t0)
                ready.values.append(secs)
                share.values.append(100.0 * secs / first.values[-1])
                own, tree = _rss_mb(m.pid)
                rss.values.append(own)
                rss_tree.values.append(tree)
                sys.stderr.write(
                    f"sandboxes: sandbox {k + 1}/{count} grep-ready in {secs:.2f} s, "
                    f"daemon {own:.0f} MB\n"
                )
            for m in mounts:
                (m.mountpoint / "task-output.txt").write_text("written by the task\n")
                t0 = time.monotonic()
                sw.cmd("reset", m.mountpoint, timeout=MOUNT_TIMEOUT)
                reset.values.append(wait_grep_ready(m.mountpoint, files, probe, t0))
        finally:
            for m in mounts:
                with contextlib.suppress(BenchError):
                    sw.unmount(m)


WORKLOADS = {"sandboxes": sandboxes}
