"""What an open in ``.parsed`` asks the engine (the file's freshness) must not
cost in proportion to the document: the parse record of a 24,000-page PDF
holds every page's text, tens of MB, and copying it out of the store to read
its status made one open take 44-82 ms instead of well under one.

Measured as memory, not time (the machine may be busy): the peak of Python
allocations while answering, against the size of the record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swfs.api import Freshness, RelPath
from swfs.views.serving import Views
from swfs.workspace import LiveSource, Workspace
from tests.bigparse import PAGE_TEXT, PAGES, big_parse, peak_bytes


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, int]]:
    with big_parse(tmp_path_factory.mktemp("cost") / "src", lambda _i: PAGE_TEXT) as b:
        yield b


def test_freshness_does_not_copy_the_parse_record(big: tuple[Workspace, int]) -> None:
    ws, size = big
    assert size > 10_000_000
    assert ws.freshness(RelPath("report.txt")) is Freshness.CURRENT
    peak = peak_bytes(lambda: ws.freshness(RelPath("report.txt")))
    assert peak < size // 100, f"{peak} bytes allocated for a {size}-byte record"


def test_has_parse_does_not_copy_the_parse_record(big: tuple[Workspace, int]) -> None:
    ws, size = big
    rec = ws.store.get_file("report.txt")
    assert rec is not None
    assert rec.parser is not None
    parser = rec.parser

    def ask() -> None:
        with ws.store.read() as txn:
            assert ws.store.has_parse(txn, rec.hash, parser)
            assert not ws.store.has_parse(txn, rec.hash, parser + "x")

    peak = peak_bytes(ask)
    assert peak < size // 100, f"{peak} bytes allocated for a {size}-byte record"


def test_the_view_still_has_every_page(big: tuple[Workspace, int]) -> None:
    ws, _ = big
    view = Views(LiveSource(ws)).parsed_view(RelPath("report.txt"))
    assert view is not None
    assert len(view.units) == PAGES
    last = view.units[-1]
    assert last.name == f"page-{PAGES:05d}.md"
    assert b'freshness="current"' in last.content.splitlines()[0]
    assert b"lorem ipsum" in last.content
