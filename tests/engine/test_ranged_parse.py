"""Long PDFs parsed range by range (swfs.ranged): the page count at once,
each page readable once its range is in, the stored parse equal to a whole
parse.  Ranges after the first are held by a gate where a test must see a
parse under way (tests/evilparsers.py's GatedPdfParser)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from parsers import registry
from parsers._base import ParseOptions
from parsers.pdf import PdfParser
from swfs.api import Freshness, RelPath
from swfs.check import run_checks
from swfs.engine import Engine
from swfs.views import sandbox
from swfs.views.parsework import OK, Pages, ParseOutcome, Part, WorkerLimits
from swfs.views.ranged import FIRST_RANGE, Partials, parse_ranged
from swfs.workspace import Config
from tests import docgen, evilparsers

PAGES = 300  # above the default threshold (100 pages)
CONFIG = Config(limits=WorkerLimits(timeout=120.0, memory_mb=2048, workers=2), rescan_interval=0)


def whole_parse(path: Path) -> list[tuple[str, str, str]]:
    info = registry.file_info(str(path), path.name)
    return [(u.name, u.locator, u.text) for u in PdfParser().parse(str(path), info, ParseOptions())]


def stored(eng: Engine, rel: str) -> list[tuple[str, str, str]]:
    rec = eng.workspace.store.get_file(rel)
    assert rec is not None
    assert rec.parser is not None
    units = eng.workspace.parse_units(rec.hash, rec.parser)
    assert units is not None, eng.views.failures()
    return units


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SRC, with the gated PDF parser installed here and in the workers."""
    src = tmp_path / "src"
    src.mkdir()
    monkeypatch.setenv(registry.EXTRA_ENV, "tests.evilparsers:GatedPdfParser")
    monkeypatch.setenv(evilparsers.GATES_ENV, str(src))
    monkeypatch.setenv(sandbox.BIND_ENV, str(src))
    registry._instances.cache_clear()
    yield src
    monkeypatch.delenv(registry.EXTRA_ENV)
    registry._instances.cache_clear()


@pytest.mark.timeout(300)
def test_a_long_pdf_is_stored_as_a_whole_parse_would_be(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, pages in (("long.pdf", PAGES), ("short.pdf", 12)):
        (src / name).write_bytes(docgen.pdf_bytes(pages, fact_page=pages - 1))
    # A page without text, in a file that has some: its own note, as a whole parse says.
    (src / "blank.pdf").write_bytes(_with_blank_pages(PAGES, blank={5, 250}))
    # No text at all: every page says so for the whole file (parsed whole at the end).
    (src / "scan.pdf").write_bytes(_with_blank_pages(PAGES, blank=set(range(1, PAGES + 1))))
    with Engine.open(src, config=CONFIG) as eng:
        notices: list[str] = []
        eng.add_listener(notices.append)
        trio.run(eng.drain)
        for name in ("long.pdf", "short.pdf", "blank.pdf", "scan.pdf"):
            assert stored(eng, name) == whole_parse(src / name), name
        assert "no text found" in stored(eng, "scan.pdf")[0][2]
        assert eng.views.counts()["current"] == 4
        # Ranges came one by one (each a change notice), the short file whole.
        assert notices.count("long.pdf") >= notices.count("short.pdf") + 3
        assert run_checks(eng.workspace) == []


@pytest.mark.timeout(300)
def test_pages_read_as_their_range_comes_in(gated: Path) -> None:
    rel = "long.gpdf"
    (gated / rel).write_bytes(docgen.pdf_bytes(PAGES, fact_page=2))
    with Engine.open(gated, config=CONFIG) as eng:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(eng.run_background)
                # A listing's wait ends once the first range is in: the units are known.
                await eng.views.wait_view(RelPath(rel), 120)
                view = eng.views.view_state(RelPath(rel))
                assert view is not None
                assert view.partial, view
                assert view.freshness is Freshness.PENDING
                names = list(eng.views.view_unit_names(view))
                assert names == [f"page-{n:04d}.md" for n in range(1, PAGES + 1)]
                # A page of the first range: its text, current (made from the present hash).
                first = eng.views.view_unit(view, "page-0002.md")
                assert first is not None
                assert first.state is not None
                text = first.content.decode()
                assert 'freshness="current"' in text.splitlines()[0]
                assert docgen.FACT in text
                # A page not parsed yet says so and never claims current.
                last = eng.views.view_unit(view, f"page-{PAGES:04d}.md")
                assert last is not None
                assert last.state is not None
                head, _, body = last.content.decode().partition("\n")
                assert 'freshness="pending"' in head
                assert 'hash="none"' in head
                assert "has not parsed" in body
                # Waiting for it is bounded (its range is held by the gate).
                await eng.views.wait_view(RelPath(rel), 0.5, f"page-{PAGES:04d}.md")
                assert eng.workspace.freshness(RelPath(rel)) is Freshness.PENDING
                (gated / f"{rel}.go").touch()
                await eng.views.wait_view(RelPath(rel), 120, f"page-{PAGES:04d}.md")
                last = eng.views.view_unit(
                    eng.views.view_state(RelPath(rel)), f"page-{PAGES:04d}.md"
                )
                assert last is not None
                assert f"Section {PAGES}" in last.content.decode()
                for _ in range(2400):  # up to 120 s
                    if eng.workspace.freshness(RelPath(rel)) is Freshness.CURRENT:
                        break
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        trio.run(main)
        assert stored(eng, rel) == whole_parse(gated / rel)
        view = eng.views.view_state(RelPath(rel))
        assert view is not None
        assert not view.partial
        assert eng.workspace.partials.get(view.source_hash or "", view.parser or "") is None
        assert run_checks(eng.workspace) == []


def _with_blank_pages(pages: int, blank: set[int]) -> bytes:
    import pymupdf

    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        if number not in blank:
            page.insert_text((72, 72), f"Section {number}", fontsize=11)
    data = bytes(doc.tobytes())
    doc.close()
    return data


# -- the order of ranges, with a pool the test answers ---------------------------------------


class FakePool:
    """Answers ranges of a document of ``total`` pages, one at a time, each
    once the test lets it; records what was asked."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.asked: list[tuple[int, int]] = []
        self.limits = WorkerLimits(timeout=60.0)
        self.go = trio.Semaphore(0)

    async def parse(
        self, abs_path: str, rel: str, *, pages: Pages | None = None, budget: float | None = None
    ) -> ParseOutcome:
        assert pages is not None
        await self.go.acquire()
        stop = min(pages.stop, self.total)
        self.asked.append((pages.start, stop))
        names = tuple((f"p{k}", f"page={k + 1}") for k in range(self.total))
        units = tuple((f"p{k}", f"page={k + 1}", f"text {k}\n") for k in range(pages.start, stop))
        part = Part(names, pages.start, (False,) * len(units), len(units))
        return ParseOutcome(OK, hash="h", parser="pdf@2", units=units, part=part)


def test_a_page_a_reader_waits_for_is_parsed_next() -> None:
    pool = FakePool(1000)
    partials = Partials()
    wanted: list[int] = []
    published: list[int] = []

    async def main() -> ParseOutcome:
        result: list[ParseOutcome] = []
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                result.append(
                    await parse_ranged(
                        pool,  # type: ignore[arg-type]
                        "/nowhere",
                        "doc.pdf",
                        h="h",
                        parser="pdf@2",
                        partials=partials,
                        wanted=wanted,
                        publish=lambda: published.append(len(published)),
                    )
                )

            nursery.start_soon(run)
            pool.go.release()  # the first range
            await trio.testing.wait_all_tasks_blocked()
            partial = partials.get("h", "pdf@2")
            assert partial is not None
            assert partial.total == 1000
            assert partial.ready(0)
            assert not partial.ready(700)
            wanted.append(700)  # a reader of page 701
            for _ in range(1000):
                pool.go.release()
                await trio.testing.wait_all_tasks_blocked()
                if result:
                    break
        return result[0]

    outcome = trio.run(main)
    assert pool.asked[0] == (0, FIRST_RANGE)
    # The range already asked for when the reader came, then the reader's.
    assert pool.asked[1] == (FIRST_RANGE, 3 * FIRST_RANGE)
    assert pool.asked[2][0] == 700
    assert outcome.status == OK
    assert outcome.part is None
    assert [u[0] for u in outcome.units] == [f"p{k}" for k in range(1000)]
    assert len(published) == len(pool.asked)
    # Ranges cover every page once.
    covered = sorted(k for start, stop in pool.asked for k in range(start, stop))
    assert covered == list(range(1000))


@pytest.mark.timeout(300)
def test_range_pages_0_parses_every_file_whole(tmp_path: Path) -> None:
    import argparse

    from cli.base import config_from

    config = config_from(argparse.Namespace(range_pages=0, workers=1))
    assert config.limits.range_threshold == 0
    src = tmp_path / "src"
    src.mkdir()
    (src / "long.pdf").write_bytes(docgen.pdf_bytes(PAGES))
    (src / "short.pdf").write_bytes(docgen.pdf_bytes(12))
    with Engine.open(src, config=config) as eng:
        notices: list[str] = []
        eng.add_listener(notices.append)
        trio.run(eng.drain)
        assert stored(eng, "long.pdf") == whole_parse(src / "long.pdf")
        assert notices.count("long.pdf") == notices.count("short.pdf")


@pytest.mark.timeout(300)
def test_a_file_changed_while_its_ranges_come_in_shows_none_of_them(gated: Path) -> None:
    """Freshness stays derived from hashes: once the file's record names new
    bytes, the ranges of the old ones are not shown; the new bytes are parsed."""
    rel = RelPath("long.gpdf")
    (gated / rel).write_bytes(docgen.pdf_bytes(PAGES, fact_page=2))
    with Engine.open(gated, config=CONFIG) as eng:

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(eng.run_background)
                await eng.views.wait_view(rel, 120)
                view = eng.views.view_state(rel)
                assert view is not None
                assert view.partial
                (gated / rel).write_bytes(docgen.pdf_bytes(PAGES + 20, fact_page=PAGES + 5))
                await trio.to_thread.run_sync(lambda: eng.workspace.check_file(rel, force=True))
                view = eng.views.view_state(rel)
                assert view is not None
                assert not view.partial
                assert view.source_hash is None
                assert list(eng.views.view_unit_names(view)) == ["pending.md"]
                (gated / f"{rel}.go").touch()
                for _ in range(2400):  # up to 120 s
                    if eng.workspace.freshness(rel) is Freshness.CURRENT:
                        break
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        trio.run(main)
        assert eng.workspace.freshness(rel) is Freshness.CURRENT
        assert stored(eng, rel) == whole_parse(gated / rel)
        assert len(stored(eng, rel)) == PAGES + 20
        assert run_checks(eng.workspace) == []


def test_a_reader_ahead_of_the_parse_gets_a_short_range_one_at_its_heels_a_long_one() -> None:
    from swfs.views.ranged import WANTED_RANGE, PartialParse

    names = tuple((f"p{k}", f"page={k + 1}") for k in range(1000))
    partial = PartialParse(names)
    units = tuple((f"p{k}", f"page={k + 1}", "t\n") for k in range(8))
    partial.add(Part(names, 0, (False,) * 8, 8), units)
    assert partial.next_range(128, [500]) == (500, 500 + WANTED_RANGE)
    assert partial.next_range(128, [8]) == (8, 136)  # a reader of the next page (grep -r)
    assert partial.next_range(128, []) == (8, 136)
    partial.add(Part(names, 20, (False,), 1), (("p20", "page=21", "t\n"),))
    assert partial.next_range(128, []) == (8, 20)  # up to the next page parsed


def test_a_range_is_never_stored_as_a_parse(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "long.pdf").write_bytes(docgen.pdf_bytes(PAGES))
    with Engine.open(src, config=CONFIG) as eng:
        eng.scan()
        rec = eng.workspace.store.get_file("long.pdf")
        assert rec is not None
        assert rec.parser is not None
        names = tuple((f"page-{n:04d}.md", f"page={n}") for n in range(1, PAGES + 1))
        outcome = ParseOutcome(
            OK,
            hash=rec.hash,
            parser=rec.parser,
            units=(("page-0001.md", "page=1", "text\n"),),
            part=Part(names, 0, (False,), 5),
        )
        with pytest.raises(ValueError, match="a range of units"):
            eng.workspace.apply_parse(
                RelPath("long.pdf"), outcome, queued_hash=rec.hash, queued_parser=rec.parser
            )
        assert eng.workspace.store.get_parse(rec.hash, rec.parser) is None


def test_a_page_without_text_waits_until_the_file_is_known_to_hold_text() -> None:
    """Its note depends on the whole file ("no text on this page" or, in a
    file of no text, "no text found" on every page): it is not shown before."""
    from swfs.views.ranged import PartialParse

    names = tuple((f"p{k}", f"page={k + 1}") for k in range(200))
    partial = PartialParse(names)
    partial.add(Part(names, 0, (True, True), 0), (("p0", "page=1", "n\n"), ("p1", "page=2", "n\n")))
    assert not partial.ready(0)
    assert partial.unit("p0") is None
    partial.add(Part(names, 2, (False,), 2), (("p2", "page=3", "t\n"),))
    assert partial.ready(0)
    assert partial.unit("p0") == ("p0", "page=1", "n\n")
