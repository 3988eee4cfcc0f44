"""Parser vectors: for each format, what a unit must contain, where, and what it must not."""

from __future__ import annotations

import datetime
import os
import pathlib

import pytest

from parsers import registry
from parsers._base import FileInfo, ParseFailed, ParseOptions, Unit, UnsupportedFormat
from parsers.cells import format_value, sheet_ref
from swfs import samples
from swfs.samples import CHURN_SENTENCE, TARGET_SENTENCE, build_sample_workspace
from tests import docgen


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("sample")
    build_sample_workspace(root)
    return root


def parse(path: pathlib.Path, rel: str | None = None, **limits: int) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), rel or path.name)
    parser, units = registry.parse(str(path), info, ParseOptions(**limits))
    return parser.id, units


def by_name(units: list[Unit]) -> dict[str, Unit]:
    return {u.name: u for u in units}


def holders(units: list[Unit], needle: str) -> list[str]:
    return [u.name for u in units if needle in u.text]


# -- registry ------------------------------------------------------------------------------


def test_parsers_sorted_by_priority_with_unique_keys() -> None:
    parsers = registry.all_parsers()
    priorities = [p.priority for p in parsers]
    assert priorities == sorted(priorities, reverse=True)
    keys = [p.key() for p in parsers]
    assert len(set(keys)) == len(keys)
    assert all("@" in k for k in keys)
    assert parsers[-1].id == "text-sniff"


@pytest.mark.parametrize(
    ("name", "head", "expected"),
    [
        ("a.pdf", b"%PDF-1.7\n", "pdf"),
        ("no-extension", b"junk\n%PDF-1.4\n", "pdf"),
        ("drawing.ai", b"%PDF-1.5\n", "pdf"),
        ("notes.md", b"The header is %PDF-1.4, see\n", "text"),
        ("a.XLSX", b"PK\x03\x04", "xlsx"),
        ("a.xlsm", b"PK\x03\x04", "xlsx"),
        ("a.docx", b"PK\x03\x04", "docx"),
        ("a.pptx", b"PK\x03\x04", "pptx"),
        ("a.xlsx", docgen.OLE_MAGIC, "ole-office"),
        ("a.doc", docgen.OLE_MAGIC, "ole-office"),
        ("a.ppt", docgen.OLE_MAGIC, "ole-office"),
        ("a.rtf", b"{\\rtf1\\ansi", "soffice"),
        ("a.doc", b"{\\rtf1\\ansi", "soffice"),
        ("a.odt", b"PK\x03\x04", "soffice"),
        ("a.odp", b"PK\x03\x04", "soffice"),
        ("a.odt", b"\x00\x01 not a zip", None),
        ("a.msg", docgen.OLE_MAGIC, "msg"),
        ("a.html", b"<html>", "html"),
        ("a.epub", b"PK\x03\x04", "epub"),
        ("a.ipynb", b"{}", "ipynb"),
        ("a.csv", b"a,b\n", "csv"),
        ("src/main.rs", b"fn main() {}", "text"),
        ("Makefile", b"all:\n\ttrue\n", "text-sniff"),
        ("a.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", None),
        ("blob", bytes(range(256)), None),
        ("a.doc", b"\x00\x01\x02", None),
    ],
)
def test_select(name: str, head: bytes, expected: str | None) -> None:
    info = FileInfo(name=name, extension=registry.extension_of(name), size=10_000, head=head)
    parser = registry.select(info)
    assert (parser.id if parser else None) == expected


def test_file_info(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "Report.Final.PDF"
    path.write_bytes(b"%PDF-" + bytes(10_000))
    info = registry.file_info(str(path), "docs/Report.Final.PDF")
    assert info.name == "docs/Report.Final.PDF"
    assert info.extension == ".pdf"
    assert info.size == 10_005
    assert info.head == (b"%PDF-" + bytes(10_000))[:4096]
    assert registry.extension_of("dir.d/README") == ""
    assert registry.extension_of(".bashrc") == ""


def test_unknown_binary_is_unsupported(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "photo.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(2000))
    with pytest.raises(UnsupportedFormat):
        parse(path)
    noise = tmp_path / "noise"
    noise.write_bytes(b"\x00\xff" * 1000)
    with pytest.raises(UnsupportedFormat):
        parse(noise)


def test_parse_through_proc_fd(workspace: pathlib.Path) -> None:
    """The engine passes /proc/self/fd/N: the type comes from the name in FileInfo only."""
    for rel in (
        "budget.xlsx",
        "reports/q3-report.pdf",
        "deck/pitch.pptx",
        "notes/meeting memo.docx",
    ):
        fd = os.open(workspace / rel, os.O_RDONLY)
        try:
            proc = f"/proc/self/fd/{fd}"
            info = registry.file_info(proc, rel)
            assert info.size == (workspace / rel).stat().st_size
            _, units = registry.parse(proc, info, ParseOptions())
        finally:
            os.close(fd)
        assert units, rel


def test_no_unit_starts_with_a_header(workspace: pathlib.Path) -> None:
    for path in sorted(p for p in workspace.rglob("*") if p.is_file()):
        _, units = parse(path, str(path.relative_to(workspace)))
        for unit in units:
            assert not unit.text.startswith("<!--"), (path, unit.name)


# -- PDF -----------------------------------------------------------------------------------


def test_pdf_fact_on_page_17_only(tmp_path: pathlib.Path) -> None:
    kind, units = parse(docgen.pdf_with_fact(tmp_path))
    assert kind == "pdf"
    assert [u.name for u in units] == [f"page-{n:04d}.md" for n in range(1, 41)]
    assert [u.locator for u in units][:2] == ["page=1", "page=2"]
    assert holders(units, docgen.FACT) == ["page-0017.md"]
    assert by_name(units)["page-0017.md"].locator == "page=17"
    assert "Section 17" in by_name(units)["page-0017.md"].text
    assert "Section 17" not in by_name(units)["page-0016.md"].text


def test_sample_report_page_7(workspace: pathlib.Path) -> None:
    _, units = parse(workspace / "reports" / "q3-report.pdf")
    assert len(units) == 12
    assert holders(units, CHURN_SENTENCE) == ["page-0007.md"]


def test_pdf_max_pages(tmp_path: pathlib.Path) -> None:
    path = docgen.pdf_with_fact(tmp_path, pages=5, fact_page=1)
    with pytest.raises(ParseFailed, match=r"too many pages \(>4\)"):
        parse(path, max_pages=4)


def test_pdf_without_extension_by_magic(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "scan"
    path.write_bytes(docgen.pdf_bytes(2, fact_page=2))
    kind, units = parse(path)
    assert kind == "pdf"
    assert holders(units, docgen.FACT) == ["page-0002.md"]


# -- spreadsheets --------------------------------------------------------------------------


def test_budget_cells(workspace: pathlib.Path) -> None:
    kind, units = parse(workspace / "budget.xlsx")
    assert kind == "xlsx"
    assert [(u.name, u.locator) for u in units] == [
        ("sheet-Sheet1.md", "sheet=Sheet1"),
        ("sheet-Summary.md", "sheet=Summary"),
    ]
    sheet1 = units[0].text.splitlines()
    assert "Sheet1!B12 = 1200" in sheet1
    assert "Sheet1!C12 = =B12*2 -> 2400" in sheet1
    assert "Sheet1!A12 = Contingency" in sheet1
    assert "Sheet1!A2 = Salaries" in sheet1
    assert not any(line.startswith("Summary!") for line in sheet1)
    summary = units[1].text.splitlines()
    assert "Summary!B2 = =Sheet1!C12 -> 2400" in summary
    assert "Summary!B1 = =SUM(Sheet1!B2:B12) -> 13290" in summary
    assert holders(units, "Sheet1!B12 = ") == ["sheet-Sheet1.md"]


def test_formula_without_cached_value(tmp_path: pathlib.Path) -> None:
    path = docgen.simple_xlsx(tmp_path, [[1, 2, "=A1+B1"]])
    _, units = parse(path)
    lines = units[0].text.splitlines()
    # No cached value in the file: computed, and marked so.
    assert "Sheet!C1 = =A1+B1 -> 3 (computed)" in lines
    assert "Sheet!C1 = =A1+B1" not in lines
    assert "Sheet!C1 = =A1+B1 -> 3" not in lines


def test_set_cached_values_roundtrip(workspace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    import openpyxl

    path = tmp_path / "budget.xlsx"
    path.write_bytes((workspace / "budget.xlsx").read_bytes())
    wb = openpyxl.load_workbook(path)
    wb["Sheet1"]["B12"] = 1350
    wb.save(path)
    _, units = parse(path)
    assert "Sheet1!C12 = =B12*2 -> 2700 (computed)" in units[0].text.splitlines()
    samples.set_cached_values(path, {("Sheet1", "C12"): 2700, ("Summary", "A1"): "Sum"})
    _, units = parse(path)
    assert "Sheet1!B12 = 1350" in units[0].text.splitlines()
    assert "Sheet1!C12 = =B12*2 -> 2700" in units[0].text.splitlines()
    with pytest.raises(KeyError):
        samples.set_cached_values(path, {("Nope", "A1"): 1})


def test_sheet_names_quoting_order_and_escapes(tmp_path: pathlib.Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    first = wb.active
    assert first is not None
    first.title = "Q3 Plan"
    first["A1"] = "line one\nline two \\ end"
    first["B1"] = "=not a formula"
    first.cell(row=1, column=2).data_type = "s"
    second = wb.create_sheet("it's")
    second["A1"] = 0.1
    second["A2"] = True
    second["A3"] = datetime.datetime(2024, 9, 30, 17, 45)
    second["A4"] = 2.0
    third = wb.create_sheet("data_2024.v1")
    third["C3"] = -7
    path = tmp_path / "names.xlsm"
    wb.save(path)
    _, units = parse(path)
    assert [u.name for u in units] == ["sheet-Q3 Plan.md", "sheet-it's.md", "sheet-data_2024.v1.md"]
    assert units[1].locator == "sheet=it's"
    assert units[0].text.splitlines() == [
        "'Q3 Plan'!A1 = line one line two \\ end",
        "'Q3 Plan'!B1 = '=not a formula",
    ]
    assert units[1].text.splitlines() == [
        "'it''s'!A1 = 0.1",
        "'it''s'!A2 = TRUE",
        "'it''s'!A3 = 2024-09-30 17:45:00",
        "'it''s'!A4 = 2",
    ]
    assert units[2].text == "data_2024.v1!C3 = -7\n"


FORMULA_KINDS = [
    "Sheet1!A1 = 1",
    "Sheet1!B1 = 10",
    "Sheet1!C1 = =A1*2 -> 2",
    "Sheet1!D1 = =SUM(A1:A3*B1:B3) -> 140",
    "Sheet1!E1 = =1/0 -> #DIV/0!",
    "Sheet1!A2 = 2",
    "Sheet1!B2 = 20",
    "Sheet1!C2 = =A2*2 -> 4",
    "Sheet1!E2 = =A2>1 -> TRUE",
    "Sheet1!A3 = 3",
    "Sheet1!B3 = 30",
    "Sheet1!C3 = =A3*2 -> 6",
    'Sheet1!E3 = ="x"&A3 -> x3',
    "Sheet1!F3 = inline text",
]


def test_formula_kinds(tmp_path: pathlib.Path) -> None:
    _, units = parse(docgen.formula_kinds_xlsx(tmp_path))
    assert units[0].text.splitlines() == FORMULA_KINDS


@pytest.fixture
def lockstep(monkeypatch: pytest.MonkeyPatch) -> None:
    from parsers.xlsx import XlsxParser

    monkeypatch.setattr(XlsxParser, "lockstep", True)


@pytest.mark.usefixtures("lockstep")
def test_lockstep_fallback_matches(workspace: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """The two-pass public-API path gives the same lines as the one-pass fast path."""
    _, units = parse(docgen.formula_kinds_xlsx(tmp_path))
    assert units[0].text.splitlines() == FORMULA_KINDS
    _, units = parse(workspace / "budget.xlsx")
    assert "Sheet1!C12 = =B12*2 -> 2400" in units[0].text.splitlines()
    assert "Summary!B1 = =SUM(Sheet1!B2:B12) -> 13290" in units[1].text.splitlines()


def test_chart_sheet_without_cache_reads_its_range(tmp_path: pathlib.Path) -> None:
    import openpyxl
    from openpyxl.chart import BarChart, Reference

    wb = openpyxl.Workbook()
    data = wb.active
    assert data is not None
    data.title = "Data"
    for row in ([1], [2], [3]):
        data.append(row)
    chart = BarChart()
    chart.add_data(Reference(data, min_col=1, min_row=1, max_row=3))
    wb.create_chartsheet("Chart").add_chart(chart)
    path = tmp_path / "chart.xlsx"
    wb.save(path)
    _, units = parse(path)
    assert [(u.name, u.text) for u in units] == [
        ("sheet-Data.md", "Data!A1 = 1\nData!A2 = 2\nData!A3 = 3\n"),
        # openpyxl caches no chart points: the series is read from its range.
        (
            "sheet-Chart.md",
            "chart: (no title) (bar)\n  series (no name) ('Data'!$A$1:$A$3): 1 | 2 | 3\n",
        ),
    ]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1200.0, "1200"),
        (1200, "1200"),
        (-0.5, "-0.5"),
        (1e21, "1e+21"),
        (0.1 + 0.2, "0.3"),  # Excel's 15 significant digits
        (1 / 3, "0.333333333333333"),
        (float("nan"), "nan"),
        (False, "FALSE"),
        (datetime.date(2024, 2, 29), "2024-02-29"),
        (datetime.time(8, 30), "08:30:00"),
        ("a\\b\nc\r\nd", "a\\b c d"),  # line breaks read as a space, no escapes
        ("#DIV/0!", "#DIV/0!"),
    ],
)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text


@pytest.mark.parametrize(
    ("name", "ref"),
    [("Sheet1", "Sheet1"), ("a.b_c", "a.b_c"), ("My Sheet", "'My Sheet'"), ("O'Neil", "'O''Neil'")],
)
def test_sheet_ref(name: str, ref: str) -> None:
    assert sheet_ref(name) == ref


def test_max_cells(tmp_path: pathlib.Path) -> None:
    path = docgen.simple_xlsx(tmp_path, [[1, 2, 3], [4, 5, 6]])
    with pytest.raises(ParseFailed, match=r"too many cells \(>5\)"):
        parse(path, max_cells=5)
    _, units = parse(path, max_cells=6)
    assert len(units[0].text.splitlines()) == 6


# -- documents, slides, markup -------------------------------------------------------------


def test_docx_memo(workspace: pathlib.Path) -> None:
    kind, units = parse(workspace / "notes" / "meeting memo.docx")
    assert kind == "docx"
    assert [(u.name, u.locator) for u in units] == [
        ("section-001.md", "h=Meeting memo: Q4 planning"),
        ("section-002.md", "h=Meeting memo: Q4 planning/Action items"),
    ]
    first, text = units[0].text, units[1].text
    assert "# Meeting memo: Q4 planning" in first.splitlines()
    assert "Attendees: Dana (Finance), Ravi (Sales), Mei (Product)." in first
    assert "## Action items" in text.splitlines()
    assert "| Owner |" not in first
    assert "| Owner | Task | Due |" in text
    assert "| Dana | Update the budget forecast | 2024-10-04 |" in text
    assert text.index("| Owner |") < text.index("| --- |") < text.index("| Dana |")


def test_docx_structure(tmp_path: pathlib.Path) -> None:
    _, units = parse(docgen.rich_docx(tmp_path))
    assert [(u.name, u.locator) for u in units] == [
        ("section-001.md", "h=Bericht"),
        ("section-002.md", "h=Bericht/Kapitel"),
    ]
    assert units[0].text == "# Bericht\n"
    assert units[1].text.split("\n\n") == [
        "## Kapitel",
        "Plain body text.",
        "- first item",
        "  - sub item",
        "kept [-REMOVED-]{+inserted+}",
        "col1\tcol2",
        "boxed once",
        "inside a content control",
        "| Key | Value |\n| --- | --- |\n| pipe \\| here | inner-a inner-b |\n",
    ]


def test_pptx_pitch(workspace: pathlib.Path) -> None:
    kind, units = parse(workspace / "deck" / "pitch.pptx")
    assert kind == "pptx"
    assert [(u.name, u.locator) for u in units] == [
        ("slide-001.md", "slide=1"),
        ("slide-002.md", "slide=2"),
        ("slide-003.md", "slide=3"),
    ]
    assert holders(units, TARGET_SENTENCE) == ["slide-002.md"]
    assert units[1].text.startswith("# Go-to-market\n")
    assert holders(units, "Mention the signed letters of intent.") == ["slide-003.md"]
    assert "## Notes" in units[2].text
    assert "| 2024 | 1.2M |" in units[2].text
    assert "## Notes" not in units[1].text


def test_pptx_reading_order(tmp_path: pathlib.Path) -> None:
    _, units = parse(docgen.layout_pptx(tmp_path))
    assert units[0].text.split("\n\n") == [
        "# Layout test",
        "top box",
        "top right box",
        "grouped\nsecond line",
        "bottom box\n",
    ]
    assert units[1] == Unit("slide-002.md", "", "slide=2")


def test_pptx_media_is_not_loaded(tmp_path: pathlib.Path) -> None:
    import tracemalloc

    path = docgen.media_heavy_pptx(tmp_path, mib=32)
    tracemalloc.start()
    try:
        _, units = parse(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "Watch the recording" in units[0].text
    assert peak < 8 * 1024 * 1024


def test_pptx_max_slides(workspace: pathlib.Path) -> None:
    with pytest.raises(ParseFailed, match="too many slides"):
        parse(workspace / "deck" / "pitch.pptx", max_pages=2)


def test_html(tmp_path: pathlib.Path) -> None:
    kind, units = parse(docgen.html_file(tmp_path))
    assert kind == "html"
    assert [(u.name, u.locator) for u in units] == [("document.md", "document")]
    assert "# Quarterly note" in units[0].text
    assert "Revenue grew **12%**." in units[0].text
    assert "SCRIPT-ONLY" not in units[0].text


def test_notebook(tmp_path: pathlib.Path) -> None:
    kind, units = parse(docgen.notebook_file(tmp_path))
    assert kind == "ipynb"
    assert "# Churn model" in units[0].text
    assert "rate = 0.032" in units[0].text


def test_epub(tmp_path: pathlib.Path) -> None:
    doctype = (
        '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
        '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
    )
    kind, units = parse(docgen.epub_file(tmp_path, chapter_doctype=doctype))
    assert kind == "epub"
    assert "# Chapter one" in units[0].text
    assert "Owls hunt at dusk." in units[0].text


def test_outlook_msg(tmp_path: pathlib.Path) -> None:
    path = docgen.outlook_msg(
        tmp_path, "Renewal terms", "dana@example.com", "The renewal discount is 12 percent."
    )
    kind, units = parse(path)
    assert kind == "msg"
    assert [(u.name, u.locator) for u in units] == [("document.md", "document")]
    assert "**Subject:** Renewal terms" in units[0].text
    assert "**From:** dana@example.com" in units[0].text
    assert "The renewal discount is 12 percent." in units[0].text


# -- plain text ----------------------------------------------------------------------------


def test_text_files(workspace: pathlib.Path) -> None:
    cases = {
        "README.md": "# Sample workspace",
        "src/analysis.py": "def totals(path):",
        "data/sales.csv": "2024-09,EMEA,131200",
        "notes/café.txt": "Réunion déplacée à jeudi.",
    }
    for rel, needle in cases.items():
        kind, units = parse(workspace / rel, rel)
        assert kind == ("csv" if rel.endswith(".csv") else "text"), rel
        assert [(u.name, u.locator) for u in units] == [("content.txt", "content")]
        assert needle in units[0].text
        assert units[0].text == (workspace / rel).read_text(encoding="utf-8")


def test_text_decoding(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 ok".encode("latin-1"))
    assert parse(bad)[1][0].text == "café ok"  # not UTF-8: read as cp1252
    utf16 = tmp_path / "wide.txt"
    utf16.write_text("wide text", encoding="utf-16")
    assert parse(utf16)[1][0].text == "wide text"
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfa,b\n")
    assert parse(bom)[1][0].text == "a,b\n"
    sniffed = tmp_path / "LICENSE"
    sniffed.write_text("MIT License\n", encoding="utf-8")
    assert parse(sniffed) == ("text-sniff", [Unit("content.txt", "MIT License\n", "content")])


def test_fifo_is_not_waited_on(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ParseFailed, match="not a regular file"):
        parse(fifo)


def test_text_limit(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "big.log"
    path.write_text("x" * 1000, encoding="utf-8")
    with pytest.raises(ParseFailed, match="too much text"):
        parse(path, max_text_bytes=999)
