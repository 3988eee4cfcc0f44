"""Workloads that only make sense on a swfs mount: workspace scale, rescan,
freshness and search over ``.parsed``."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import gen, rawparse
from bench.common import STORE, Ctx, paired_rounds, run_tool, timed
from bench.mounter import BenchError, SwfsMounter, Unsupported, children, proc_status_kb
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)

FRESH_POLL_S = 0.005
FRESH_BOUND_S = 60.0
SEARCH_WORD = "covenant"  # one of gen.WORDS: in many units of every parsed format


def _swfs(ctx: Ctx, *commands: str) -> SwfsMounter:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    ctx.mounter.require(*commands)
    return ctx.mounter


def _status(sw: SwfsMounter, target: Path) -> dict[str, Any]:
    cp = sw.cmd("status", target, "--json", timeout=120)
    try:
        doc = json.loads(cp.stdout)
    except ValueError as exc:
        raise BenchError(f"swfs status {target} --json: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise BenchError(f"swfs status {target} --json: not an object")
    return doc


def _count(status: dict[str, Any], *keys: str) -> int | None:
    """An integer count from ``swfs status --json``, top level or one level down."""
    for key in keys:
        v = status.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    for v in status.values():
        if isinstance(v, dict):
            found = _count(v, *keys)
            if found is not None:
                return found
    return None


def _rss_mb(pid: int | None) -> tuple[float, float]:
    """(daemon VmHWM, sum of its live children's VmHWM) in MB; NaN when unknown
    or, for the workers, when none is alive (they are started on demand)."""
    if pid is None:
        return math.nan, math.nan
    own = proc_status_kb(pid, "VmHWM")
    kids = [proc_status_kb(c, "VmHWM") or 0 for c in children(pid)]
    return (
        own / 1024 if own is not None else math.nan,
        sum(kids) / 1024 if kids else math.nan,
    )


def _nanmax(xs: Iterable[float]) -> float:
    return max((x for x in xs if not math.isnan(x)), default=math.nan)


def _recompute_rate(workdir: Path, rows: int = 120) -> tuple[float, int]:
    """Formulas per second that recomputing costs on top of reading: the
    parse of a workbook saved by openpyxl (no cached results), with the
    formula engine and without it, in this process after one warm-up parse
    (a parse worker imports the engine once)."""
    from parsers import registry, xlsx_recalc
    from parsers._base import ParseOptions

    path = workdir / "recompute.xlsx"
    path.write_bytes(gen.xlsx_without_cached_values(rows))
    info = registry.file_info(str(path), path.name)

    def parse() -> tuple[float, int]:
        t0 = time.perf_counter()
        _, units = registry.parse(str(path), info, ParseOptions())
        return time.perf_counter() - t0, sum(u.text.count("(computed)") for u in units)

    parse()
    with_engine, computed = parse()
    cap = xlsx_recalc.MAX_WORKBOOK_CELLS
    xlsx_recalc.MAX_WORKBOOK_CELLS = 0
    try:
        without, _ = parse()
    finally:
        xlsx_recalc.MAX_WORKBOOK_CELLS = cap
    return computed / max(with_engine - without, 1e-9), computed


def workspace(ctx: Ctx, result: WorkloadResult) -> None:
    """Cold ``swfs index`` throughput against raw parser throughput, unchanged
    re-index, time to a ready mount (mount + sync over the indexed store, caches
    dropped), warm remount (+ sync), optionally a first mount from an empty store
    (mount + sync parses everything), daemon and worker peak RSS."""
    sw = _swfs(ctx, "index", "mount", "umount", "sync", "status")
    n, d = ctx.sizes.ws_files, ctx.sizes.ws_dirs
    src = gen.workspace(ctx.data, n, d)
    files = list(gen.iter_files(src))
    result.info.update(files=len(files), dirs=gen.count_dirs(src), by_ext=gen.census(src))
    store = src / STORE
    mnt = ctx.mountpoint("ws")
    idx = result.metric("index_files_per_s", "files/s", kind=ABSOLUTE, cold=True)
    result.metric("index_s", "s", kind=ABSOLUTE, cold=True)
    vs_raw = result.metric(
        "index_vs_raw", "fraction", kind=ABSOLUTE, target=Target(">=", 0.8, ">=0.8")
    )
    result.metric("reindex_unchanged_s", "s", kind=ABSOLUTE)
    ready = result.metric(
        "ready_mount_s", "s", kind=ABSOLUTE, cold=True, note="indexed store, cold caches"
    )
    remount = result.metric("remount_s", "s", kind=ABSOLUTE, target=Target("<", 2.0, "<2 s"))
    first = (
        result.metric("first_mount_s", "s", kind=ABSOLUTE, cold=True, note="from an empty store")
        if ctx.sizes.first_mount
        else None
    )
    result.metric("daemon_rss_mb", "MB", kind=ABSOLUTE, target=Target("<", 300.0, "<300 MB"))
    result.metric("workers_rss_mb", "MB", kind=ABSOLUTE, note="'-': no worker alive at sampling")

    raw: dict[str, Any] | None = None
    try:
        step = max(1, math.ceil(len(files) / ctx.sizes.raw_sample))
        sample = files[::step]
        ctx.drop_caches()
        raw = rawparse.throughput(sample, src)
        result.metric("raw_parse_files_per_s", "files/s", kind=ABSOLUTE, cold=True).values.append(
            raw["files_per_s"]
        )
        result.info["raw_parse"] = raw
    except Exception as exc:
        vs_raw.note = f"no raw parser throughput: {type(exc).__name__}: {exc}"
        log.warning("raw parse: %s", vs_raw.note)
    try:
        rate, computed = _recompute_rate(ctx.workdir)
        result.metric(
            "xlsx_recompute_formulas_per_s",
            "formulas/s",
            kind=ABSOLUTE,
            note=f"{computed} formulas without cached values (openpyxl-saved), extra parse time",
        ).values.append(rate)
    except Exception as exc:
        log.warning("xlsx recompute figure: %s: %s", type(exc).__name__, exc)

    def mount_ready(label: str) -> tuple[float, float, float]:
        """(seconds for mount + sync, daemon MB, workers MB); memory is sampled
        before unmounting."""
        t0 = time.perf_counter()
        with sw.mounted(src, mnt) as m:
            sw.settle(m)
            dt = time.perf_counter() - t0
            daemon, workers = _rss_mb(m.pid)
            result.info[f"status_{label}"] = _status(sw, src)
        return dt, daemon, workers

    for r in range(ctx.sizes.ws_rounds):
        shutil.rmtree(store, ignore_errors=True)
        ctx.drop_caches()
        t_index = timed(lambda: sw.cmd("index", src, timeout=sw.sync_timeout))
        status = _status(sw, src)
        result.info["status_after_index"] = status
        fps = len(files) / t_index
        result.metric("index_s", "s").values.append(t_index)
        idx.values.append(fps)
        if raw:
            vs_raw.values.append(fps / raw["files_per_s"])
        for key, unit in (("pages", "pages/s"), ("cells", "cells/s")):
            count = _count(status, key)
            if count is not None:
                result.metric(f"index_{key}_per_s", unit, kind=ABSOLUTE, cold=True).values.append(
                    count / t_index
                )
        result.metric("reindex_unchanged_s", "s").values.append(
            timed(lambda: sw.cmd("index", src, timeout=sw.sync_timeout))
        )

        ctx.drop_caches()
        samples = [mount_ready("ready")]
        ready.values.append(samples[-1][0])
        samples.append(mount_ready("remount"))
        remount.values.append(samples[-1][0])
        if first is not None:
            shutil.rmtree(store, ignore_errors=True)
            ctx.drop_caches()
            samples.append(mount_ready("first_mount"))
            first.values.append(samples[-1][0])
        # Peak over this round's mounts: the first mount (when timed) parses everything.
        result.metric("daemon_rss_mb", "MB").values.append(_nanmax(s[1] for s in samples))
        result.metric("workers_rss_mb", "MB").values.append(_nanmax(s[2] for s in samples))
        log.info(
            "workspace round %d: index %.0f files/s, ready %.1f s, remount %.2f s%s",
            r + 1,
            fps,
            ready.values[-1],
            remount.values[-1],
            f", first mount {first.values[-1]:.1f} s" if first is not None else "",
        )
    for metric in result.metrics:
        if metric.cold:
            ctx.cold_note(metric)
    if any(math.isnan(v) for v in result.metric("daemon_rss_mb", "MB").values):
        result.add_note("daemon pid not found: no RSS")
    failed = _count(result.info.get("status_ready", {}), "failed")
    if failed:
        result.add_note(f"{failed} files failed to parse")


def rescan(ctx: Ctx, result: WorkloadResult) -> None:
    """``swfs index`` over the unchanged 20k-file text tree.  The tree's store is
    kept between runs (the tree workload's mount builds it too), so the first,
    untimed index only parses what is missing.  ``swfs index`` is a new process
    each time, so its start-up (``swfs index --help``, measured in the same round)
    is subtracted for ``rescan_net_s``."""
    sw = _swfs(ctx, "index")
    src = gen.file_tree(ctx.data, ctx.sizes.tree_files, ctx.sizes.tree_dirs)
    result.info.update(files=ctx.sizes.tree_files)
    t_first = timed(lambda: sw.cmd("index", src, timeout=sw.sync_timeout))
    result.info["first_index_s"] = round(t_first, 3)
    start = result.metric("cli_start_s", "s", kind=ABSOLUTE, note="swfs index --help")
    total = result.metric("rescan_total_s", "s", kind=ABSOLUTE, note="includes CLI start")
    net = result.metric("rescan_net_s", "s", kind=ABSOLUTE, target=Target("<", 0.5, "<0.5 s"))
    for _ in range(ctx.rounds):
        t_start = timed(lambda: sw.cmd("index", "--help", timeout=60))
        t_scan = timed(lambda: sw.cmd("index", src, timeout=sw.sync_timeout))
        start.values.append(t_start)
        total.values.append(t_scan)
        net.values.append(t_scan - t_start)


def _hash_matches(value: bytes, expected: str) -> bool:
    v = value.decode(errors="replace").strip().split(":")[-1].lower()
    return len(v) >= 8 and expected.startswith(v)


def wait_current(path: Path, expected_hash: str, *, use_hash: bool) -> float:
    """Poll the ``user.sw.*`` xattrs of ``path`` until it is current for
    ``expected_hash``; return when that was seen (perf_counter), or raise TimeoutError."""
    deadline = time.perf_counter() + FRESH_BOUND_S
    while True:
        now = time.perf_counter()
        try:
            fresh = os.getxattr(path, "user.sw.freshness").decode().strip()
            ok = fresh == "current"
            if ok and use_hash:
                ok = _hash_matches(os.getxattr(path, "user.sw.hash"), expected_hash)
        except FileNotFoundError:
            ok = False  # mid-rename of a temp-file save
        if ok:
            return now
        if now > deadline:
            raise TimeoutError(f"{path}: not current after {FRESH_BOUND_S:.0f} s")
        time.sleep(FRESH_POLL_S)


def freshness(ctx: Ctx, result: WorkloadResult) -> None:
    """Latency from the close of a write through the mount to ``current``: a
    one-cell openpyxl edit saved in place, and one page of a 40-page PDF
    rewritten.  And the same cell edit saved in SRC behind the mount, which
    only the change feed (or the periodic rescan) can notice."""
    import blake3
    import openpyxl
    import pymupdf

    sw = _swfs(ctx, "mount", "umount", "sync")
    src = gen.freshness_set(ctx.data, ctx.sizes.pdf_pages)
    # Edits change the files: work on a copy so the cached set stays pristine.
    work = ctx.scratch("fresh")
    shutil.copytree(src / "edit", work / "edit")
    target = Target("<", 1000.0, "<1000 ms")
    xl = result.metric("xlsx_cell_edit", "ms", kind=ABSOLUTE, target=target)
    pdf = result.metric("pdf_page_rewrite", "ms", kind=ABSOLUTE, target=target)
    behind = result.metric("xlsx_cell_edit_behind", "ms", kind=ABSOLUTE, target=target)
    result.info.update(pdf_pages=ctx.sizes.pdf_pages, poll_ms=FRESH_POLL_S * 1000)
    rng = random.Random(7)
    timeouts = 0

    with sw.mounted(work, ctx.mountpoint("fresh")) as m:
        sw.settle(m)
        xlsx_m = m.mountpoint / "edit" / "sheet.xlsx"
        pdf_m = m.mountpoint / "edit" / "report.pdf"
        try:
            os.getxattr(xlsx_m, "user.sw.freshness")
        except OSError as exc:
            raise BenchError(f"{xlsx_m}: no user.sw.freshness xattr ({exc.strerror})") from None
        try:
            os.getxattr(xlsx_m, "user.sw.hash")
            use_hash = True
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
            use_hash = False
            result.add_note("no user.sw.hash xattr: polled freshness only (may read early)")

        def measure(metric_name: str, write: Any) -> None:
            nonlocal timeouts
            path = write()
            t_closed = time.perf_counter()
            expected = blake3.blake3((work / path.relative_to(m.mountpoint)).read_bytes())
            try:
                t_cur = wait_current(path, expected.hexdigest(), use_hash=use_hash)
                ms = (t_cur - t_closed) * 1000
            except TimeoutError as exc:
                log.warning("%s", exc)
                timeouts += 1
                ms = FRESH_BOUND_S * 1000
            result.metric(metric_name, "ms").values.append(ms)

        def edit_xlsx() -> Path:
            wb = openpyxl.load_workbook(xlsx_m)
            ws = wb["Sheet1"]
            ws["B2"] = rng.randint(1, 10**6)
            wb.save(xlsx_m)
            return xlsx_m

        def edit_xlsx_behind() -> Path:
            # Saved in SRC, not through the mount; the poll reads xattrs, which
            # never make the daemon look at the file itself.
            native = work / "edit" / "sheet.xlsx"
            wb = openpyxl.load_workbook(native)
            wb["Sheet1"]["B2"] = rng.randint(1, 10**6)
            wb.save(native)
            return xlsx_m

        def rewrite_pdf() -> Path:
            doc = pymupdf.open(pdf_m)
            k = rng.randrange(doc.page_count)
            doc.delete_page(k)
            page = doc.new_page(pno=k)
            page.insert_text((50, 60), f"rewritten {gen.sentence(rng, 10)}", fontsize=10)
            data = doc.tobytes(garbage=0, deflate=True)
            doc.close()
            with open(pdf_m, "wb") as f:
                f.write(data)
            return pdf_m

        for _ in range(ctx.sizes.fresh_rounds):
            measure("xlsx_cell_edit", edit_xlsx)
            sw.settle(m)
            measure("pdf_page_rewrite", rewrite_pdf)
            sw.settle(m)
            measure("xlsx_cell_edit_behind", edit_xlsx_behind)
            sw.settle(m)
    if timeouts:
        result.add_note(f"{timeouts} edits not current within {FRESH_BOUND_S:.0f} s")
    for metric in (xl, pdf):
        metric.note = metric.note or "close -> xattr current"
    behind.note = behind.note or "save in SRC -> xattr current"


def search(ctx: Ctx, result: WorkloadResult) -> None:
    """``grep -rn WORD`` over MNT/.parsed versus over the same text copied as plain
    files into a native directory (both warm)."""
    sw = _swfs(ctx, "mount", "umount", "sync")
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    result.metric("grep_rn", "s", target=Target("<=", 2.0, "<=2x"))
    lines: dict[str, int] = {}

    with sw.mounted(src, ctx.mountpoint("ws")) as m:
        sw.settle(m)
        parsed = m.mountpoint / ".parsed"
        if not parsed.is_dir():
            raise BenchError(f"{parsed}: missing")
        plain = ctx.scratch("parsed-plain") / "parsed"
        shutil.copytree(parsed, plain)
        n_units = sum(1 for _ in gen.iter_files(plain))
        size = sum(p.stat().st_size for p in gen.iter_files(plain))
        result.info.update(units=n_units, text_bytes=size, word=SEARCH_WORD)

        def one(root: Path, side: str, r: int) -> dict[str, float]:
            t, out = run_tool(["grep", "-rn", SEARCH_WORD, root])
            lines[side] = out.count(b"\n")
            return {"grep_rn": t}

        run_tool(["grep", "-rn", SEARCH_WORD, plain])
        run_tool(["grep", "-rn", SEARCH_WORD, parsed])
        paired_rounds(ctx, result, m, one, native_root=plain, mount_root=parsed)
    result.info["matching_lines"] = lines
    if len(set(lines.values())) > 1:
        result.add_note(f"match counts differ: {lines}")


CLI_COMMANDS = (("version", ("--version",)), ("status", ("status",)), ("search", ("search",)))


def cli_latency(ctx: Ctx, result: WorkloadResult) -> None:
    """What an agent calling the command line in a loop waits per call:
    ``swfs --version``, ``swfs status MNT`` and ``swfs search MNT WORD``
    against a mounted workspace, beside the same interpreter doing nothing
    (``python -c pass``: the floor of any Python command), as wall seconds."""
    sw = _swfs(ctx, "mount", "umount", "sync", "status", "search")
    src = gen.workspace(ctx.data, min(ctx.sizes.ws_files, 200), min(ctx.sizes.ws_dirs, 10))
    floor = result.metric("python_floor_s", "s", kind=ABSOLUTE, note="python -c pass")
    metrics = {
        name: result.metric(f"cli_{name}_s", "s", kind=ABSOLUTE, target=Target("<", 0.3, "<0.3 s"))
        for name, _ in CLI_COMMANDS
    }
    python = os.path.join(os.path.dirname(sw.exe), "python")
    with sw.mounted(src, ctx.mountpoint("cli")) as m:
        sw.settle(m)
        argv: dict[str, list[str | Path]] = {
            "version": [sw.exe, "--version"],
            "status": [sw.exe, "status", str(m.mountpoint)],
            "search": [sw.exe, "search", str(m.mountpoint), SEARCH_WORD],
        }
        for _ in range(max(3, ctx.rounds)):
            if os.path.exists(python):
                floor.values.append(run_tool([python, "-c", "pass"])[0])
            for name, _ in CLI_COMMANDS:
                metrics[name].values.append(run_tool(argv[name])[0])


WORKLOADS = {
    "cli_latency": cli_latency,
    "workspace": workspace,
    "rescan": rescan,
    "search": search,
    "freshness": freshness,
}
