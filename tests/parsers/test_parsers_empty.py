"""An empty view says why: a parse that finds no text gives units that say so.

Fixtures are written by the programs' usual libraries: python-docx (an empty
document), python-pptx (a slide holding only a picture), openpyxl (a workbook
with an empty sheet).  PDFs count pages and images (tests/parsers/test_parsers_pdf.py).
"""

from __future__ import annotations

import pathlib

from parsers import registry
from parsers._base import ParseOptions, Unit


def parse(path: pathlib.Path) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def _png() -> bytes:
    import pymupdf

    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 32, 24), False)
    pix.clear_with(90)
    return bytes(pix.tobytes("png"))


def test_empty_docx(tmp_path: pathlib.Path) -> None:
    import docx

    path = tmp_path / "blank.docx"
    docx.Document().save(str(path))
    kind, units = parse(path)
    assert kind == "docx"
    assert [(u.name, u.locator) for u in units] == [("document.md", "document")]
    assert "[swfs: no text found (1 document)]" in units[0].text


def test_image_only_slides(tmp_path: pathlib.Path) -> None:
    import io

    import pptx
    from pptx.util import Inches

    deck = pptx.Presentation()
    for _ in range(2):
        slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank layout
        pic = slide.shapes.add_picture(io.BytesIO(_png()), Inches(1), Inches(1))
        # python-pptx files the image's name as its alt text; a scan has none.
        pic._element.nvPicPr.cNvPr.set("descr", "")
    path = tmp_path / "photos.pptx"
    deck.save(str(path))
    kind, units = parse(path)
    assert kind == "pptx"
    assert [u.locator for u in units] == ["slide=1", "slide=2"]
    for u in units:
        assert "[swfs: no text found (2 slides)]" in u.text


def test_empty_sheet(tmp_path: pathlib.Path) -> None:
    import openpyxl

    path = tmp_path / "empty.xlsx"
    openpyxl.Workbook().save(str(path))
    kind, units = parse(path)
    assert kind == "xlsx"
    assert len(units) == 1
    # The spreadsheet reader says so itself, per sheet.
    assert units[0].text == "# empty sheet: no cells with a value\n"


def test_a_file_with_some_text_is_left_alone(tmp_path: pathlib.Path) -> None:
    import pptx

    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[6])
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Roadmap"
    path = tmp_path / "mixed.pptx"
    deck.save(str(path))
    _, units = parse(path)
    assert "no text found" not in "".join(u.text for u in units)
    assert "Roadmap" in units[1].text


def test_empty_text_file_stays_empty(tmp_path: pathlib.Path) -> None:
    """content.txt shows a text file byte for byte: an empty file is empty."""
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    assert parse(path) == ("text", [Unit("content.txt", "", "content")])


def test_no_units_at_all() -> None:
    assert registry.explain_empty([]) == [
        Unit(
            "document.md", "[swfs: no text found (the file holds no parts with text)]\n", "document"
        )
    ]
    blank = [Unit("page-0001.md", " \n", "page=1"), Unit("sheet-A.md", "", "sheet=A")]
    assert [u.text for u in registry.explain_empty(blank)] == [
        "[swfs: no text found (1 page, 1 sheet)]\n"
    ] * 2
