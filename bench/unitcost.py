"""What serving one unit of ``.parsed`` costs, and how soon a change shows
there as ``current``.

``unit_open``: the time to open and read one page of a 24,000-page PDF
through ``.parsed`` against one page of a 40-page PDF.  Every open is the
first of its page (a path never opened before in this mount), so each one
goes through the daemon's lookup, open and read as a ``grep -rn`` does.

``edit_current``: the time from a write until the ``.parsed`` view shows the
new text, marked ``current``: for a write through a hard link of the file
(the view of the other name must follow) and for a change made in SRC behind
the mount (the change feed must see it).
"""

from __future__ import annotations

import logging
import math
import os
import random
import statistics
import time
from pathlib import Path

from bench import gen
from bench.common import Ctx, swfs_mounter
from bench.mounter import BenchError
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)

BIG_PAGES = 24_000
SMALL_PAGES = 40
SMALL_FILES = 12  # distinct 40-page PDFs, so that every small-side open is a first one
LINES_PER_PAGE = 6
OPENS_PER_ROUND = 100
POLL_S = 0.005
CURRENT_BOUND_S = 30.0


def unit_pdfs(root: Path) -> Path:
    """``big.pdf`` (24,000 pages, 48 copies of 500 different ones) and
    ``small-NN.pdf`` (40 pages each), with the same amount of text per page."""
    base = root / f"unitopen-{BIG_PAGES}p"

    def build(path: Path) -> None:
        import pymupdf

        rng = random.Random(12)
        # new_page() slows down as a document grows: the big one is made of
        # copies of a 500-page one (insert_pdf stays linear).
        block = pymupdf.open("pdf", gen.make_pdf(rng, 500, "big", lines_per_page=LINES_PER_PAGE))
        big = pymupdf.open()
        while big.page_count < BIG_PAGES:
            big.insert_pdf(block, to_page=min(499, BIG_PAGES - big.page_count - 1))
        (path / "big.pdf").write_bytes(big.tobytes(garbage=0, deflate=True))
        big.close()
        block.close()
        for i in range(SMALL_FILES):
            data = gen.make_pdf(rng, SMALL_PAGES, f"small{i}", lines_per_page=LINES_PER_PAGE)
            (path / f"small-{i:02d}.pdf").write_bytes(data)

    params = {"kind": "unitopen", "big": BIG_PAGES, "small": SMALL_PAGES, "n": SMALL_FILES}
    gen._cached(base, {**params, "lines": LINES_PER_PAGE, "blocks": 500}, build)
    return base


def daemon_cpu_ns(pid: int | None) -> int | None:
    """CPU time the daemon's threads have run so far (/proc/PID/task/*/schedstat,
    nanoseconds): what serving costs, whatever else keeps the machine busy."""
    if pid is None:
        return None
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return None
    return total


def _open_read(path: Path) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 1 << 20)
    finally:
        os.close(fd)
    return time.perf_counter() - t0, data


def unit_open(ctx: Ctx, result: WorkloadResult) -> None:
    """Median time of a first open + read of one ``.parsed`` page, 40-page
    PDFs against a 24,000-page one; ratio within 2x is the goal."""
    # The 24,000-page PDF parses in about a minute on a quiet machine; on a
    # loaded one it went past the default 120 s, and the store keeps that
    # failure.  This workload measures opens, not parsing: give it time.
    sw = swfs_mounter(ctx, "mount", "umount", "sync", options=("--parse-timeout", "1800"))
    src = unit_pdfs(ctx.data)
    small = result.metric("open_40p_ms", "ms", kind=ABSOLUTE, note="first open+read of a page")
    big = result.metric("open_24000p_ms", "ms", kind=ABSOLUTE, note="first open+read of a page")
    ratio = result.metric(
        "open_ratio", "x", kind=ABSOLUTE, target=Target("<=", 2.0, "<=2x (24,000 vs 40 pages)")
    )
    # On a busy machine the median carries the scheduler's noise; the 10th
    # percentile of a round shows what an open costs when it is not preempted.
    small10 = result.metric("open_40p_p10_ms", "ms", kind=ABSOLUTE, note="10th percentile")
    big10 = result.metric("open_24000p_p10_ms", "ms", kind=ABSOLUTE, note="10th percentile")
    ratio10 = result.metric(
        "open_ratio_p10", "x", kind=ABSOLUTE, target=Target("<=", 2.0, "<=2x (10th percentiles)")
    )
    # The daemon's CPU time per open: immune to the scheduler's noise.
    cpu_small = result.metric("daemon_cpu_40p_us", "us", kind=ABSOLUTE, note="per open")
    cpu_big = result.metric("daemon_cpu_24000p_us", "us", kind=ABSOLUTE, note="per open")
    cpu_ratio = result.metric(
        "daemon_cpu_ratio", "x", kind=ABSOLUTE, target=Target("<=", 2.0, "<=2x (daemon CPU)")
    )
    # The same while the workspace changes (a line appended to a file in SRC
    # every fifth open, as an agent writing while it greps): every change the
    # engine reports is a new generation of what the daemon caches.
    busy_small = result.metric("busy_cpu_40p_us", "us", kind=ABSOLUTE, note="per open, changing")
    busy_big = result.metric("busy_cpu_24000p_us", "us", kind=ABSOLUTE, note="per open, changing")
    busy_ratio = result.metric(
        "busy_cpu_ratio", "x", kind=ABSOLUTE, target=Target("<=", 2.0, "<=2x (daemon CPU)")
    )
    result.info.update(big_pages=BIG_PAGES, small_pages=SMALL_PAGES, opens=OPENS_PER_ROUND)
    rng = random.Random(5)
    small_units = [
        f"small-{i:02d}.pdf/page-{p:04d}.md"
        for i in range(SMALL_FILES)
        for p in range(1, SMALL_PAGES + 1)
    ]
    big_units = [f"big.pdf/page-{p:04d}.md" for p in range(1, BIG_PAGES + 1)]
    rng.shuffle(small_units)
    rng.shuffle(big_units)
    if len(small_units) < (ctx.rounds + 1) * OPENS_PER_ROUND:
        raise BenchError(f"{len(small_units)} small-PDF pages for {ctx.rounds} rounds")

    t0 = time.perf_counter()
    with sw.mounted(src, ctx.mountpoint("unitopen")) as m:
        sw.settle(m)
        result.info["mount_and_parse_s"] = round(time.perf_counter() - t0, 1)
        parsed = m.mountpoint / ".parsed"
        # Each side's view once (its first listing), outside the timing.
        for name in ("big.pdf", "small-00.pdf"):
            if not (parsed / name).is_dir():
                raise BenchError(f"{parsed / name}: missing")
            if (parsed / name / "error.md").exists():
                why = (parsed / name / "error.md").read_text(errors="replace").strip()
                raise BenchError(
                    f"{name} did not parse (remove {src / '.swfs'} to retry): {why[-200:]}"
                )
        for r in range(ctx.rounds):
            sides = [("small", small_units, small), ("big", big_units, big)]
            if r % 2:
                sides.reverse()
            medians: dict[str, float] = {}
            p10: dict[str, float] = {}
            cpu: dict[str, float] = {}
            for side, units, metric in sides:
                times = []
                cpu0 = daemon_cpu_ns(m.pid)
                for rel in units[r * OPENS_PER_ROUND : (r + 1) * OPENS_PER_ROUND]:
                    secs, data = _open_read(parsed / rel)
                    if b'freshness="current"' not in data.partition(b"\n")[0]:
                        raise BenchError(f"{rel}: not a current unit: {data[:200]!r}")
                    times.append(secs * 1000)
                cpu1 = daemon_cpu_ns(m.pid)
                if cpu0 is not None and cpu1 is not None:
                    cpu[side] = (cpu1 - cpu0) / 1000 / len(times)
                    (cpu_small if side == "small" else cpu_big).values.append(cpu[side])
                medians[side] = statistics.median(times)
                p10[side] = statistics.quantiles(times, n=10)[0]
                metric.values.append(medians[side])
                (small10 if side == "small" else big10).values.append(p10[side])
            ratio.values.append(medians["big"] / medians["small"])
            ratio10.values.append(p10["big"] / p10["small"])
            if len(cpu) == 2:
                cpu_ratio.values.append(cpu["big"] / cpu["small"])
            log.info(
                "unit_open round %d: 40 pages %.2f ms (p10 %.2f, daemon CPU %.0f us), "
                "%d pages %.2f ms (p10 %.2f, daemon CPU %.0f us)",
                r + 1,
                medians["small"],
                p10["small"],
                cpu.get("small", math.nan),
                BIG_PAGES,
                medians["big"],
                p10["big"],
                cpu.get("big", math.nan),
            )
        # While the workspace changes.
        busy_file = src / "busy.txt"
        busy_file.write_text("busy\n")
        sw.settle(m)
        r = ctx.rounds
        busy_cpu: dict[str, float] = {}
        for side, units, metric in (
            ("small", small_units, busy_small),
            ("big", big_units, busy_big),
        ):
            cpu0 = daemon_cpu_ns(m.pid)
            batch = units[r * OPENS_PER_ROUND : (r + 1) * OPENS_PER_ROUND]
            for i, rel in enumerate(batch):
                if i % 5 == 0:
                    with open(busy_file, "a") as f:
                        f.write(f"{side} {i}\n")
                _open_read(parsed / rel)
            cpu1 = daemon_cpu_ns(m.pid)
            if cpu0 is not None and cpu1 is not None:
                busy_cpu[side] = (cpu1 - cpu0) / 1000 / len(batch)
                metric.values.append(busy_cpu[side])
            sw.settle(m)
        if len(busy_cpu) == 2:
            busy_ratio.values.append(busy_cpu["big"] / busy_cpu["small"])
        log.info("unit_open while changing: daemon CPU per open %s us", busy_cpu)
        busy_file.unlink()


def _wait_view(unit: Path, marker: bytes) -> float:
    """Poll ``unit`` until it holds ``marker`` and says ``current``; the time
    that was first seen (perf_counter).  Raises TimeoutError."""
    deadline = time.perf_counter() + CURRENT_BOUND_S
    while True:
        try:
            data = Path(unit).read_bytes()
        except FileNotFoundError:
            data = b""
        now = time.perf_counter()
        head = data.partition(b"\n")[0]
        if marker in data and b'freshness="current"' in head:
            return now
        if now > deadline:
            raise TimeoutError(f"{unit}: not current with the new text after {CURRENT_BOUND_S} s")
        time.sleep(POLL_S)


def edit_current(ctx: Ctx, result: WorkloadResult) -> None:
    """Write -> ``.parsed`` shows the new text as current: through a hard link
    of the file whose view is read, and behind the mount in SRC."""
    sw = swfs_mounter(ctx, "mount", "umount", "sync")
    work = ctx.scratch("editcurrent")
    (work / "notes").mkdir()
    (work / "notes" / "readme.md").write_text("# Readme\nfirst words\n")
    (work / "notes" / "behind.md").write_text("# Behind\nfirst words\n")
    target = Target("<", 1000.0, "<1000 ms")
    linked = result.metric("hardlink_write_ms", "ms", kind=ABSOLUTE, target=target)
    behind = result.metric("behind_mount_ms", "ms", kind=ABSOLUTE, target=target)
    linked.note = "append via another hard link -> view current with the text"
    behind.note = "append in SRC -> view current with the text"
    timeouts = 0
    with sw.mounted(work, ctx.mountpoint("editcurrent")) as m:
        sw.settle(m)
        mnt = m.mountpoint
        os.link(mnt / "notes" / "readme.md", mnt / "notes" / "hardlink.md")
        sw.settle(m)
        views = {
            "link": mnt / ".parsed" / "notes" / "readme.md" / "content.txt",
            "behind": mnt / ".parsed" / "notes" / "behind.md" / "content.txt",
        }
        for view in views.values():
            _wait_view(view, b"first words")  # the view exists before timing
        for r in range(ctx.sizes.fresh_rounds):
            for name, path, metric in (
                ("link", mnt / "notes" / "hardlink.md", linked),
                ("behind", work / "notes" / "behind.md", behind),
            ):
                marker = f"edit {r} {name} {time.time_ns()}".encode()
                with open(path, "ab") as f:
                    f.write(marker + b"\n")
                t_closed = time.perf_counter()
                try:
                    ms = (_wait_view(views[name], marker) - t_closed) * 1000
                except TimeoutError as exc:
                    log.warning("%s", exc)
                    timeouts += 1
                    ms = CURRENT_BOUND_S * 1000
                metric.values.append(ms)
                sw.settle(m)
    if timeouts:
        result.add_note(f"{timeouts} edits not current within {CURRENT_BOUND_S:.0f} s")


WORKLOADS = {"unit_open": unit_open, "edit_current": edit_current}
