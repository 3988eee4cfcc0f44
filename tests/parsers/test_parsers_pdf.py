"""PDF vectors: ruled tables as rows, the second reader, partial files, pages without text.

Every fixture is written at test time by PyMuPDF (as a PDF-producing program
would write it) or, for files MuPDF must refuse, by hand around a correct
xref table.  Each vector names the unit (locator) a string must or must not
be in.
"""

from __future__ import annotations

import io
import pathlib

import pytest

from parsers import pdf, registry
from parsers._base import ParseFailed, ParseOptions, Unit
from tests import docgen

ROWS = [
    ["Region", "Q1 revenue", "Q2 revenue"],
    ["North", "1,200", "1,350"],
    ["South", "980", "1,010"],
    ["East | West", "77", "81"],
]


def parse(path: pathlib.Path) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def unit(units: list[Unit], locator: str) -> str:
    [text] = [u.text for u in units if u.locator == locator]
    return text


def draw_table(page: object, rows: list[list[str]], *, top: float, per_cell: bool) -> None:
    """A table as word processors export it: ruled lines (or one rectangle per
    cell, as spreadsheet exports do) and each cell's text inside."""
    import pymupdf

    assert isinstance(page, pymupdf.Page)
    left, width, height = 72.0, 140.0, 22.0
    n_rows, n_cols = len(rows), len(rows[0])
    if per_cell:
        for r in range(n_rows):
            for c in range(n_cols):
                rect = pymupdf.Rect(
                    left + c * width,
                    top + r * height,
                    left + (c + 1) * width,
                    top + (r + 1) * height,
                )
                page.draw_rect(rect, color=(0, 0, 0), width=0.6)
    else:
        right, bottom = left + n_cols * width, top + n_rows * height
        for r in range(n_rows + 1):
            y = top + r * height
            page.draw_line((left, y), (right, y), color=(0, 0, 0), width=0.8)
        for c in range(n_cols + 1):
            x = left + c * width
            page.draw_line((x, top), (x, bottom), color=(0, 0, 0), width=0.8)
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            page.insert_text((left + c * width + 5, top + (r + 1) * height - 7), text, fontsize=10)


def table_pdf(directory: pathlib.Path, *, per_cell: bool = False) -> pathlib.Path:
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Quarterly summary\nRevenue by region follows.", fontsize=11)
    draw_table(page, ROWS, top=110, per_cell=per_cell)
    page.insert_text((72, 240), "Text after the table.", fontsize=11)
    # A framed note: one rectangle is a box, not a table.
    page.draw_rect(pymupdf.Rect(70, 300, 400, 340), color=(0, 0, 0), width=0.8)
    page.insert_text((80, 325), "Boxed remark stays plain text.", fontsize=11)
    page2 = doc.new_page()
    page2.insert_text((72, 72), "Second page without rules.", fontsize=11)
    path = directory / ("cells.pdf" if per_cell else "ruled.pdf")
    doc.save(str(path))
    doc.close()
    return path


@pytest.mark.parametrize("per_cell", [False, True], ids=["ruled-lines", "cell-rectangles"])
def test_ruled_table_is_rows(tmp_path: pathlib.Path, per_cell: bool) -> None:
    kind, units = parse(table_pdf(tmp_path, per_cell=per_cell))
    assert kind == "pdf"
    page1 = unit(units, "page=1")
    # must include: each row on one line, header row first, escaped pipe
    assert "| Region | Q1 revenue | Q2 revenue |\n| --- | --- | --- |\n" in page1
    assert "| North | 1,200 | 1,350 |" in page1
    assert "| South | 980 | 1,010 |" in page1
    assert "| East \\| West | 77 | 81 |" in page1
    # the text around it, in reading order, once
    assert page1.index("Revenue by region follows.") < page1.index("| Region |")
    assert page1.index("| East") < page1.index("Text after the table.")
    assert "Boxed remark stays plain text.\n" in page1
    assert "| Boxed" not in page1
    # must not include: one cell per line, or table words twice
    assert "North\n1,200" not in page1
    assert page1.count("North") == 1
    assert page1.count("1,350") == 1
    page2 = unit(units, "page=2")
    assert page2 == "Second page without rules.\n"
    assert "| North" not in page2


def test_table_inside_a_form_xobject(tmp_path: pathlib.Path) -> None:
    """Imposition and stamping tools wrap a page into a form XObject: its rules
    are not in the page's own content stream."""
    import pymupdf

    source = pymupdf.open(str(table_pdf(tmp_path)))
    doc = pymupdf.open()
    page = doc.new_page()
    page.show_pdf_page(page.rect, source, 0)
    path = tmp_path / "stamped.pdf"
    doc.save(str(path))
    _, units = parse(path)
    text = unit(units, "page=1")
    assert "| North | 1,200 | 1,350 |" in text
    assert text.count("South") == 1


def test_tables_off_gives_plain_text(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch the throughput figure uses: without tables, the plain text."""
    monkeypatch.setattr(pdf, "FIND_TABLES", False)
    _, units = parse(table_pdf(tmp_path))
    page1 = unit(units, "page=1")
    assert "| North" not in page1
    assert "North" in page1


# -- partial and refused files -------------------------------------------------------------


def test_truncated_pdf_served_as_partial(tmp_path: pathlib.Path) -> None:
    """Half of a 10-page file: pages 1-5 keep their text, 6-10 have none, and
    every unit says the file is partial."""
    kind, units = parse(docgen.truncated_pdf(tmp_path))
    assert kind == "pdf"
    assert [u.locator for u in units] == [f"page={n}" for n in range(1, 11)]
    marker = "[swfs: partial: truncated PDF (no end-of-file marker); showing what could be read"
    for u in units:
        assert u.text.startswith(marker), u.locator
        assert "5 of 10 pages have no text" in u.text
    assert "Ordinary filler text for page 3." in unit(units, "page=3")
    assert "page 7" not in unit(units, "page=7")
    assert "[swfs: no text on this page (blank page)]" in unit(units, "page=7")


def test_complete_pdf_is_not_partial(tmp_path: pathlib.Path) -> None:
    _, units = parse(docgen.pdf_with_fact(tmp_path, pages=3, fact_page=2))
    assert not any("partial" in u.text for u in units)
    assert not any("pdfminer" in u.text for u in units)


def _objects(catalog: bytes, pages: bytes) -> list[bytes]:
    stream = b"BT /F1 12 Tf 72 720 Td (Invoice 4471 total 918.40 EUR) Tj ET"
    return [
        catalog,
        pages,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]


REFUSED = {
    # /Kids is a reference to the page instead of an array of them.
    "kids-not-array.pdf": _objects(
        b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids 3 0 R /Count 1 >>"
    ),
    # The catalog lost its /Pages entry: MuPDF finds no page.
    "no-page-tree.pdf": _objects(
        b"<< /Type /Catalog >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>"
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_second_reader_where_mupdf_refuses(tmp_path: pathlib.Path, name: str) -> None:
    from pdfminer.high_level import extract_text

    path = tmp_path / name
    path.write_bytes(docgen._pdf_from_objects(REFUSED[name]))
    # MuPDF itself gives no page; pdfminer.six reads the text.
    mupdf = pdf._mupdf()
    try:
        doc = mupdf.open(str(path))
        readable = doc.page_count > 0 and bool(doc[0].get_text().strip())
    except Exception:
        readable = False
    assert not readable
    assert "Invoice 4471" in extract_text(io.BytesIO(path.read_bytes()))

    kind, units = parse(path)
    assert kind == "pdf"
    assert [u.locator for u in units] == ["page=1"]
    text = units[0].text
    assert text.startswith("[swfs: read by pdfminer.six: MuPDF could not read this file (")
    assert "Invoice 4471 total 918.40 EUR" in text
    assert "partial" not in text


def test_unreadable_by_both_keeps_mupdf_reason(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ParseFailed, match="cycle"):
        parse(docgen.cyclic_pdf(tmp_path))
    garbage = tmp_path / "garbage.pdf"
    garbage.write_bytes(b"%PDF-1.4\n" + b"not really a pdf\n" * 40)
    with pytest.raises(ParseFailed, match="^broken PDF"):
        parse(garbage)


# -- pages without text --------------------------------------------------------------------


def image_pdf(directory: pathlib.Path, *, text_pages: int) -> pathlib.Path:
    """A scan: every page is one image; the first ``text_pages`` pages also hold text."""
    import pymupdf

    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 64, 48), False)
    pix.clear_with(200)
    png = pix.tobytes("png")
    doc = pymupdf.open()
    for number in range(1, 4):
        page = doc.new_page()
        page.insert_image(pymupdf.Rect(72, 72, 472, 372), stream=png)
        if number <= text_pages:
            page.insert_text((72, 420), f"Caption of figure {number}", fontsize=11)
    path = directory / f"scan-{text_pages}.pdf"
    doc.save(str(path))
    doc.close()
    return path


def test_scanned_pdf_says_why_it_is_empty(tmp_path: pathlib.Path) -> None:
    _, units = parse(image_pdf(tmp_path, text_pages=0))
    assert [u.locator for u in units] == ["page=1", "page=2", "page=3"]
    for u in units:
        assert u.text == "[swfs: no text found (3 pages, 3 images)]\n"


def test_image_only_page_in_a_text_pdf(tmp_path: pathlib.Path) -> None:
    _, units = parse(image_pdf(tmp_path, text_pages=2))
    assert unit(units, "page=1") == "Caption of figure 1\n"
    assert unit(units, "page=3") == "[swfs: no text on this page (1 image)]\n"
    assert "no text found" not in unit(units, "page=2")


def test_table_benchmark_documents(tmp_path: pathlib.Path) -> None:
    """bench.pdftables measures what it says: its ruled pages give table rows,
    its text pages none; FIND_TABLES is restored afterwards.  No timing."""
    from bench import pdftables

    docs = pdftables.make_docs(tmp_path, 10)
    _, ruled = parse(docs["ruled"])
    assert all("| Region 4 | " in u.text for u in ruled)
    _, text = parse(docs["text"])
    assert not any("| --- |" in u.text for u in text)
    _, mixed = parse(docs["mixed"])
    assert ["| --- |" in u.text for u in mixed] == [n % 10 == 0 for n in range(10)]
    figures = pdftables.measure(pages=3, rounds=1)
    assert sorted(figures) == ["mixed", "ruled", "text"]
    assert all(off > 0 and on > 0 and ratio > 0 for off, on, ratio in figures.values())
    assert pdf.FIND_TABLES is True


def test_table_on_a_rotated_page(tmp_path: pathlib.Path) -> None:
    """Words and drawings are placed in the same space on a page shown rotated."""
    import pymupdf

    doc = pymupdf.open(str(table_pdf(tmp_path)))
    doc[0].set_rotation(90)
    path = tmp_path / "rotated.pdf"
    doc.save(str(path))
    _, units = parse(path)
    text = unit(units, "page=1")
    assert "| North | 1,200 | 1,350 |" in text
    assert text.count("North") == 1


@pytest.mark.parametrize("limit", ["PDFMINER_MAX_BYTES", "PDFMINER_SECONDS"])
def test_second_reader_is_bounded(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    """Past its size or time bound pdfminer gives up, and MuPDF's reason is
    the one reported (not the worker's timeout)."""
    path = tmp_path / "kids.pdf"
    path.write_bytes(docgen._pdf_from_objects(REFUSED["kids-not-array.pdf"]))
    monkeypatch.setattr(pdf, limit, -1)
    with pytest.raises(ParseFailed, match="^broken PDF: malformed page tree"):
        parse(path)


def test_shaded_header_cells_inside_the_grid(tmp_path: pathlib.Path) -> None:
    """Header cells shaded by a filled rectangle inset from the cell's sides
    (as typesetting systems draw them): its sides must not split columns."""
    import pymupdf

    doc = pymupdf.open()
    page = doc.new_page()
    left, top, width, height = 72.0, 110.0, 140.0, 22.0
    for c in range(3):
        x = left + c * width
        page.draw_rect(
            pymupdf.Rect(x + 4, top, x + width - 4, top + height),
            color=None,
            fill=(0.8, 0.8, 0.8),
        )
    draw_table(page, ROWS, top=top, per_cell=False)
    path = tmp_path / "shaded.pdf"
    doc.save(str(path))
    _, units = parse(path)
    text = unit(units, "page=1")
    assert "| Region | Q1 revenue | Q2 revenue |\n| --- | --- | --- |\n" in text
    assert "| North | 1,200 | 1,350 |" in text
    assert "|  |" not in text


# -- the second reader on pages MuPDF finds no text on ---------------------------------------


def clipped_text_pdf(directory: pathlib.Path) -> pathlib.Path:
    """Three pages written by MuPDF; page 2's text lies outside its media box
    (shrunk after the text was placed, as ImageMagick writes a label beside a
    16-pixel image): MuPDF clips it away, pdfminer reads it."""
    import pymupdf

    doc = pymupdf.open()
    for number in (1, 2, 3):
        page = doc.new_page(width=300, height=300)
        page.insert_text((20, 150), f"Label of page {number}")
    doc[1].set_mediabox(pymupdf.Rect(0, 0, 4, 4))
    path = directory / "labels.pdf"
    doc.save(str(path))
    doc.close()
    return path


def test_second_reader_where_mupdf_finds_no_text(tmp_path: pathlib.Path) -> None:
    import pymupdf

    path = clipped_text_pdf(tmp_path)
    with pymupdf.open(str(path)) as doc:
        assert not doc[1].get_text().strip()  # else this test proves nothing
        assert b"BT" in doc[1].read_contents()
    kind, units = parse(path)
    assert kind == "pdf"
    assert [u.locator for u in units] == ["page=1", "page=2", "page=3"]
    assert "Label of page 1" in unit(units, "page=1")
    assert "pdfminer" not in unit(units, "page=1")
    second = unit(units, "page=2")
    assert second.startswith("[swfs: text read by pdfminer.six: MuPDF found none on this page]")
    assert "Label of page 2" in second
    assert "Label of page 3" in unit(units, "page=3")


def parse_with(path: pathlib.Path, second_reader: pdf.SecondReader) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return pdf.PdfParser(second_reader).parse(str(path), info, ParseOptions())


def test_second_reader_not_tried_on_pages_without_text_operators(tmp_path: pathlib.Path) -> None:
    """A scanned page (an image, no text object) costs no pdfminer run."""
    calls: list[tuple[str, set[int], int]] = []

    def spy(path: str, wanted: set[int], count: int) -> dict[int, str]:
        calls.append((path, wanted, count))
        return pdf.pdfminer_texts(path, wanted, count)

    units = parse_with(image_pdf(tmp_path, text_pages=1), spy)
    assert "no text on this page (1 image)" in units[-1].text
    assert calls == []
    units = parse_with(clipped_text_pdf(tmp_path), spy)  # the spy sees what it is given
    assert [wanted for _, wanted, _ in calls] == [{2}]
    assert "Label of page 2" in unit(units, "page=2")


def test_second_reader_finding_nothing_keeps_mupdf_pages(tmp_path: pathlib.Path) -> None:
    units = parse_with(clipped_text_pdf(tmp_path), lambda *_a: {})
    assert unit(units, "page=2").startswith("[swfs: no text on this page")


def test_a_range_holding_such_a_page_is_left_to_the_whole_parse(tmp_path: pathlib.Path) -> None:
    path = clipped_text_pdf(tmp_path)
    info = registry.file_info(str(path), path.name)
    parser = pdf.PdfParser()
    options = ParseOptions()
    assert parser.parse_range(str(path), info, options, start=0, stop=1, threshold=2) is not None
    assert parser.parse_range(str(path), info, options, start=0, stop=3, threshold=2) is None
