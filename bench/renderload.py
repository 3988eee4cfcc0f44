"""``.render`` latency: a PDF page and a PowerPoint slide, cold and cached.

Each round writes new files into the mount (new content, so nothing is in
the render cache), waits until they are parsed (``swfs sync``, untimed),
then times reading one image with Python's ``open().read()``:

* ``pdf_page_cold``: a PDF page never rendered (a worker renders it).
* ``pdf_page_cached``: the same page again (from the cache).
* ``slide_cold``: the first slide of a new deck: LibreOffice converts the
  deck to PDF, then the slide is rendered.
* ``slide_next``: another slide of that deck (conversion already cached).
* ``slide_cached``: the first slide again.

The first image the daemon renders also starts its render worker
processes; that one is timed apart, as ``first_render_s`` in the info.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from bench.common import Ctx
from bench.mounter import BenchError, SwfsMounter, Unsupported
from bench.report import ABSOLUTE, WorkloadResult


def _pdf(path: Path, tag: str, pages: int = 20) -> None:
    import pymupdf

    doc = pymupdf.open()
    for n in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 72), f"Round {tag}, page {n}: regional revenue north", fontsize=14)
        for row in range(30):
            page.insert_text((72, 110 + 20 * row), f"{row:3d}  figure {row * 17 + n}", fontsize=10)
        page.draw_rect(pymupdf.Rect(300, 500, 500, 700), color=(0, 0, 1), fill=(0.9, 0.3, 0.2))
    doc.save(str(path))
    doc.close()


def _deck(path: Path, tag: str, slides: int = 8) -> None:
    from pptx import Presentation
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    deck = Presentation()
    for n in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[5])
        assert slide.shapes.title is not None
        slide.shapes.title.text = f"Round {tag}, slide {n}"
        data = CategoryChartData()
        data.categories = ["North", "South", "West"]
        data.add_series("FY", (n, n + 1.5, n + 3))
        slide.shapes.add_chart(
            XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(8), Inches(4.5), data
        )
    deck.save(str(path))


def _read(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    elapsed = time.perf_counter() - t0
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise BenchError(f"{path}: not a PNG ({len(data)} bytes)")
    return elapsed


def render(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    if shutil.which("soffice") is None:
        raise Unsupported("needs LibreOffice (soffice) for the slide")
    sw = ctx.mounter
    src = ctx.scratch("render-src")
    _pdf(src / "warmup.pdf", "warmup", pages=2)
    metrics = {
        name: result.metric(name, "s", kind=ABSOLUTE)
        for name in ("pdf_page_cold", "pdf_page_cached", "slide_cold", "slide_next", "slide_cached")
    }
    with sw.mounted(src, ctx.mountpoint("render")) as m:
        sw.settle(m)
        mnt = m.mountpoint
        result.info["first_render_s"] = round(_read(mnt / ".render/warmup.pdf/page-0001.png"), 3)
        for r in range(ctx.rounds):
            stamp = f"{r}-{time.time_ns()}"
            _pdf(mnt / f"report-{r}.pdf", stamp)
            _deck(mnt / f"deck-{r}.pptx", stamp)
            sw.settle(m)
            page = mnt / ".render" / f"report-{r}.pdf" / "page-0007.png"
            metrics["pdf_page_cold"].values.append(_read(page))
            metrics["pdf_page_cached"].values.append(_read(page))
            first = mnt / ".render" / f"deck-{r}.pptx" / "slide-001.png"
            metrics["slide_cold"].values.append(_read(first))
            metrics["slide_next"].values.append(
                _read(mnt / ".render" / f"deck-{r}.pptx" / "slide-005.png")
            )
            metrics["slide_cached"].values.append(_read(first))
    result.info.update(pdf_pages=20, slides=8, dpi=110)


WORKLOADS = {"render": render}
