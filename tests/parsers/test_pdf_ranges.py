"""``PdfParser.parse_range``: a long PDF's pages, range by range, each as a
whole parse gives it (swfs.ranged stores the ranges only when they add up
to the whole parse)."""

from __future__ import annotations

from pathlib import Path

import pytest

from parsers import registry
from parsers._base import ParseOptions, Unit
from parsers.pdf import PdfParser
from tests import docgen

OPTIONS = ParseOptions()


def _pdf(path: Path, pages: int, *, blank: frozenset[int] = frozenset(), table: int = 0) -> Path:
    import pymupdf

    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        if number in blank:
            continue
        page.insert_text((72, 72), f"Section {number}\nfiller for page {number}", fontsize=11)
        if number == table:  # a ruled 3x3 grid: its words come out as Markdown rows
            for i in range(4):
                page.draw_line((72, 100 + 20 * i), (372, 100 + 20 * i))
                page.draw_line((72 + 100 * i, 100), (72 + 100 * i, 160))
            for r in range(3):
                for c in range(3):
                    page.insert_text((80 + 100 * c, 115 + 20 * r), f"r{r}c{c}", fontsize=9)
    doc.save(str(path))
    doc.close()
    return path


def _ranges(path: Path, size: int, threshold: int = 100) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    units: list[Unit] = []
    start = 0
    while True:
        got = PdfParser().parse_range(
            str(path), info, OPTIONS, start=start, stop=start + size, threshold=threshold
        )
        assert got is not None
        assert got.start == start
        assert len(got.blank) == len(got.units)
        units += got.units
        start += len(got.units)
        if start >= len(got.names):
            assert [(u.name, u.locator) for u in units] == list(got.names)
            return units


def _whole(path: Path) -> list[Unit]:
    return PdfParser().parse(str(path), registry.file_info(str(path), path.name), OPTIONS)


@pytest.mark.parametrize("size", [1, 7, 64, 1000])
def test_ranges_add_up_to_the_whole_parse(tmp_path: Path, size: int) -> None:
    path = _pdf(tmp_path / "long.pdf", 150, blank=frozenset({3, 149}), table=20)
    whole = _whole(path)
    assert "| r0c0 | r0c1 | r0c2 |" in whole[19].text
    assert "no text on this page (blank page)" in whole[2].text
    assert _ranges(path, size) == whole


def test_a_range_marks_its_pages_without_text(tmp_path: Path) -> None:
    path = _pdf(tmp_path / "long.pdf", 120, blank=frozenset({2}))
    info = registry.file_info(str(path), path.name)
    got = PdfParser().parse_range(str(path), info, OPTIONS, start=0, stop=4, threshold=100)
    assert got is not None
    assert got.blank == (False, True, False, False)
    assert got.chars == sum(len(u.text) for i, u in enumerate(got.units) if i != 1)


def test_a_file_without_text_is_left_to_the_whole_parse(tmp_path: Path) -> None:
    """Its pages all say the same note, known only from the whole file: the
    ranges mark every page blank, and the engine parses it whole."""
    path = _pdf(tmp_path / "scan.pdf", 110, blank=frozenset(range(1, 111)))
    info = registry.file_info(str(path), path.name)
    got = PdfParser().parse_range(str(path), info, OPTIONS, start=0, stop=8, threshold=100)
    assert got is not None
    assert all(got.blank)
    assert "no text found" in _whole(path)[0].text


def test_a_range_is_not_taken_for_a_short_or_unsound_pdf(tmp_path: Path) -> None:
    parser = PdfParser()
    short = tmp_path / "short.pdf"
    short.write_bytes(docgen.pdf_bytes(20))
    info = registry.file_info(str(short), "short.pdf")
    assert parser.parse_range(str(short), info, OPTIONS, start=0, stop=8, threshold=100) is None
    for path in (docgen.truncated_pdf(tmp_path), docgen.encrypted_pdf(tmp_path)):
        info = registry.file_info(str(path), path.name)
        assert parser.parse_range(str(path), info, OPTIONS, start=0, stop=8, threshold=0) is None
    long = tmp_path / "long.pdf"
    long.write_bytes(docgen.pdf_bytes(300))
    info = registry.file_info(str(long), "long.pdf")
    got = parser.parse_range(str(long), info, OPTIONS, start=290, stop=400, threshold=100)
    assert got is not None
    assert got.start == 290
    assert len(got.units) == 10
    assert len(got.names) == 300
    assert list(got.units) == _whole(long)[290:]


def test_the_registry_ranges_only_what_its_parser_can(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n" * 500)
    info = registry.file_info(str(text), "notes.txt")
    assert registry.parse_range(str(text), info, OPTIONS, start=0, stop=8, threshold=1) is None
    long = tmp_path / "long.pdf"
    long.write_bytes(docgen.pdf_bytes(120))
    info = registry.file_info(str(long), "long.pdf")
    got = registry.parse_range(str(long), info, OPTIONS, start=0, stop=8, threshold=100)
    assert got is not None
    assert len(got.units) == 8
