"""A workspace whose one file has a parse of thousands of pages (a long PDF
stands behind it), and the peak of Python allocations while answering: costs
measured as memory, not time (the machine may be busy)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from swfs.store.records import ParseRecord
from swfs.workspace import Workspace

PAGES = 12_000
PAGE_TEXT = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 20 + "\n"


def peak_bytes(fn: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@contextmanager
def big_parse(src: Path, page_text: Callable[[int], str]) -> Iterator[tuple[Workspace, int]]:
    """A workspace in ``src`` (made here) with ``report.txt`` parsed into
    ``PAGES`` units ``page-NNNNN.md`` (locator ``page=N``) holding
    ``page_text(N)``; yields it with the units' total text length."""
    src.mkdir()
    (src / "report.txt").write_text("stands in for a long PDF\n")
    ws = Workspace(src)
    try:
        ws.scan()
        rec = ws.store.get_file("report.txt")
        assert rec is not None
        assert rec.parser is not None
        units = [(f"page-{i:05d}.md", f"page={i}", page_text(i)) for i in range(1, PAGES + 1)]
        ws.store.put_parse(rec.hash, rec.parser, ParseRecord("ok", secs=1.0), units)
        yield ws, sum(len(u[2]) for u in units)
    finally:
        ws.close()
