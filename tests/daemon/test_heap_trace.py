"""The daemon's optional heap trace (SWFS_TRACEMALLOC): each dump names the
allocation sites that grew since the previous one."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest
import trio

from mountd.dump import TRACE_ENV, HeapTrace, dump_text

KEPT: list[bytes] = []


def _hold_memory() -> None:
    KEPT.extend(b"x" * 1000 + i.to_bytes(4, "little") for i in range(5000))


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    was = tracemalloc.is_tracing()
    monkeypatch.setenv(TRACE_ENV, "1")
    yield
    KEPT.clear()
    if not was:
        tracemalloc.stop()


def growth_by_site(lines: list[str]) -> dict[str, float]:
    """MB grown per site: each size line, then the frames it is about."""
    out: dict[str, float] = {}
    size = 0.0
    for line in lines[1:]:
        if line.startswith("  ") and not line.startswith("      "):
            size = float(line.split()[0])
        elif line.strip().startswith("File "):
            out[line.strip()] = out.get(line.strip(), 0.0) + size
    return out


def test_dump_names_the_site_that_grew(traced: None) -> None:
    heap = HeapTrace()
    _hold_memory()
    lines = heap.lines()
    assert lines[0].startswith("python heap: ")
    grown = {site: mb for site, mb in growth_by_site(lines).items() if "test_heap_trace.py" in site}
    assert grown, lines
    assert max(grown.values()) >= 4.0, lines  # 5,000 x ~1 KB, in MB
    # The next dump compares with this one: that memory is old news.
    again = growth_by_site(heap.lines())
    assert all(mb < 1.0 for site, mb in again.items() if "test_heap_trace.py" in site), again


def test_no_trace_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    heap = HeapTrace()
    assert heap.lines() == []
    assert "python heap" not in trio.run(_dump, heap)


async def _dump(heap: HeapTrace) -> str:
    return dump_text(None, heap)
