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
    sw = ctx.mounter
    pages = 600 if ctx.quick else 2500
    late = pages - 10
    src = ctx.scratch("longpdf-src")
    (src / "warmup.txt").write_text("warm up the parse workers\n")
    names = ("first_listing_s", "first_page_s", "late_page_s", "whole_parse_s")
    metrics = {name: result.metric(name, "s", kind=ABSOLUTE) for name in names}
    share = result.metric("first_page_share", "x", kind=ABSOLUTE)
    share.note = "first_page_s / whole_parse_s"
    rng = random.Random(37)
    with sw.mounted(src, ctx.mountpoint("longpdf")) as m:
        sw.settle(m)
        mnt = m.mountpoint
        for r in range(ctx.rounds):
            tag = f"round{r}-{time.time_ns()}"
            data = make_pdf(rng, pages, tag)
            name = f"long-{r}.pdf"
            with open(mnt / name, "wb") as f:
                f.write(data)
            t0 = time.perf_counter()
            view = mnt / ".parsed" / name
            t_list = _until(f"{view} listed by page", lambda v=view: _listed(v))
            metrics["first_listing_s"].values.append(t_list - t0)
            _read(view / "page-0001.md", f"{tag} page 1\n".encode())
            t_first = time.perf_counter()
            metrics["first_page_s"].values.append(t_first - t0)
            metrics["late_page_s"].values.append(
                _read(view / f"page-{late:04d}.md", f"{tag} page {late}\n".encode())
            )
            t_all = _until(
                f"{view} current",
                lambda v=view: os.getxattr(v, "user.sw.freshness") == b"current",
            )
            metrics["whole_parse_s"].values.append(t_all - t0)
            share.values.append((t_first - t0) / (t_all - t0))
            if r == 0:
                result.info["pdf_bytes"] = len(data)
                result.info["raw_parse_s"] = round(_raw_parse_s(src / name), 3)
            sw.settle(m)
    result.info["pages"] = pages


def _listed(view: Path) -> bool:
    try:
        return "page-0001.md" in os.listdir(view)
    except FileNotFoundError:
        return False


WORKLOADS = {"long_pdf": long_pdf}
