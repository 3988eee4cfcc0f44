"""A long PDF just written: how soon its first page reads (issue 37).

Each round writes a new 2,500-page PDF (600 with ``--quick``; new text, so
no parse is reused) into the mount, then times from its close:

* ``first_listing_s``: ``os.listdir`` of its ``.parsed`` folder until it
  names the real page units (before range-by-range parsing: only
  ``pending.md`` until the whole file was parsed).
* ``first_page_s``: reading ``page-0001.md`` (the read waits for its page).
* ``late_page_s``: then reading a page near the end (its range is parsed
  next).
* ``whole_parse_s``: until the folder says ``current`` (every page parsed).
* ``first_page_share``: ``first_page_s / whole_parse_s``.

The same files are then written into a mount that parses every file whole
(``--range-pages 0``, as before issue 37): ``whole_*`` are its times, and
``first_page_vs_whole`` is ``first_page_s / whole_first_page_s``.
``info.raw_parse_s`` is the PDF parser alone on the same file, in this
process, for scale.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from bench.common import Ctx
from bench.gen import make_pdf
from bench.mounter import BenchError, SwfsMounter, Unsupported
from bench.report import ABSOLUTE, WorkloadResult

BOUND_S = 600.0  # a step that takes longer is an error
POLL_S = 0.01


def _until(what: str, ok: object) -> float:
    """Poll ``ok()`` until true; the time that was first seen (perf_counter)."""
    assert callable(ok)
    deadline = time.perf_counter() + BOUND_S
    while not ok():
        if time.perf_counter() > deadline:
            raise BenchError(f"{what}: not seen within {BOUND_S:.0f} s")
        time.sleep(POLL_S)
    return time.perf_counter()


def _read(path: Path, marker: bytes) -> float:
    t0 = time.perf_counter()
    data = path.read_bytes()
    elapsed = time.perf_counter() - t0
    head, _, body = data.partition(b"\n")
    if b'freshness="current"' not in head or marker not in body:
        raise BenchError(f"{path}: not its current text: {head[:200]!r}")
    return elapsed


def _raw_parse_s(path: Path) -> float:
    from parsers import registry
    from parsers._base import ParseOptions

    t0 = time.perf_counter()
    registry.parse(str(path), registry.file_info(str(path), path.name), ParseOptions())
    return time.perf_counter() - t0


def long_pdf(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    pages = 600 if ctx.quick else 2500
    rng = random.Random(37)
    # The same files on both sides (each its own store): made up front, new
    # text each round.
    files = [(f"round{r}-{rng.random()}", r) for r in range(ctx.rounds)]
    made = {tag: make_pdf(random.Random(r), pages, tag) for tag, r in files}
    sides: dict[str, dict[str, list[float]]] = {}
    for side, options in (("ranged", ()), ("whole", ("--range-pages", "0"))):
        sw = ctx.mounter.with_options(*options) if options else ctx.mounter
        times: dict[str, list[float]] = {name: [] for name in _STEPS}
        # A workspace (and store) per side: the same bytes must be parsed
        # on both, not found in the other's parse cache.
        src = ctx.scratch(f"longpdf-{side}")
        (src / "warmup.txt").write_text("warm up the parse workers\n")
        with sw.mounted(src, ctx.mountpoint(f"longpdf-{side}")) as m:
            sw.settle(m)
            for tag, r in files:
                step = _round(m.mountpoint, f"{side}-{r}.pdf", tag, made[tag], pages)
                for name, value in step.items():
                    times[name].append(value)
                sw.settle(m)
        sides[side] = times
    for name in _STEPS:
        metric = result.metric(name, "s", kind=ABSOLUTE)
        metric.values = sides["ranged"][name]
        before = result.metric(f"whole_{name}", "s", kind=ABSOLUTE)
        before.note = "parsed whole (--range-pages 0)"
        before.values = sides["whole"][name]
    share = result.metric("first_page_share", "x", kind=ABSOLUTE)
    share.note = "first_page_s / whole_parse_s"
    share.values = [
        first / whole
        for first, whole in zip(
            sides["ranged"]["first_page_s"], sides["ranged"]["whole_parse_s"], strict=True
        )
    ]
    gain = result.metric("first_page_vs_whole", "x", kind=ABSOLUTE)
    gain.note = "first_page_s / whole_first_page_s, same file"
    gain.values = [
        a / b
        for a, b in zip(
            sides["ranged"]["first_page_s"], sides["whole"]["first_page_s"], strict=True
        )
    ]
    data = made[files[0][0]]
    path = src / "raw.pdf"
    path.write_bytes(data)
    result.info.update(pages=pages, pdf_bytes=len(data), raw_parse_s=round(_raw_parse_s(path), 3))
    path.unlink()


_STEPS = ("first_listing_s", "first_page_s", "late_page_s", "whole_parse_s")


def _round(mnt: Path, name: str, tag: str, data: bytes, pages: int) -> dict[str, float]:
    """Write ``data`` as ``name`` and time its view from the close."""
    late = pages - 10
    with open(mnt / name, "wb") as f:
        f.write(data)
    t0 = time.perf_counter()
    view = mnt / ".parsed" / name
    t_list = _until(f"{view} listed by page", lambda: _listed(view))
    _read(view / "page-0001.md", f"{tag} page 1\n".encode())
    t_first = time.perf_counter()
    t_late0 = time.perf_counter()
    _read(view / f"page-{late:04d}.md", f"{tag} page {late}\n".encode())
    t_late = time.perf_counter() - t_late0
    t_all = _until(f"{view} current", lambda: os.getxattr(view, "user.sw.freshness") == b"current")
    return {
        "first_listing_s": t_list - t0,
        "first_page_s": t_first - t0,
        "late_page_s": t_late,
        "whole_parse_s": t_all - t0,
    }


def _listed(view: Path) -> bool:
    try:
        return "page-0001.md" in os.listdir(view)
    except FileNotFoundError:
        return False


WORKLOADS = {"long_pdf": long_pdf}
