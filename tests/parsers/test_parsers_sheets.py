"""Spreadsheet parser vectors on files written by XlsxWriter, LibreOffice and raw OOXML.

Each vector names the unit (the locator) a line must be in, and lines that
must not appear anywhere.
"""

from __future__ import annotations

import pathlib
import zipfile

import pytest

from parsers import cells, registry
from parsers._base import ParseFailed, ParseOptions, Unit
from swfs.review import diffs
from tests import sheetgen


def parse(path: pathlib.Path, **limits: int) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions(**limits))
    return parser.id, units


def by_unit(units: list[Unit]) -> dict[str, list[str]]:
    return {u.name: u.text.splitlines() for u in units}


def check(units: list[Unit], must: dict[str, list[str]], must_not: list[str]) -> None:
    lines = by_unit(units)
    for unit, wanted in must.items():
        assert unit in lines, f"no unit {unit}: {sorted(lines)}"
        for line in wanted:
            assert line in lines[unit], f"{unit}: missing {line!r}\n" + "\n".join(lines[unit])
    everything = "\n".join(u.text for u in units)
    for text in must_not:
        assert text not in everything, f"{text!r} should not appear"


@pytest.fixture(scope="module")
def excel_like(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return sheetgen.excel_like_xlsx(tmp_path_factory.mktemp("xw") / "report.xlsx")


# Lines every reader of the XlsxWriter workbook must give, whatever the format.
VALUES = {
    "sheet-Data.md": [
        "Data!A1 = Region",  # a shared string
        "Data!B2 = 1200",
        "Data!E1 = Total revenue",  # in-cell line break: one space
        "Data!E2 = plain bold tail",  # rich text runs joined
        "Data!D3 = 2024-03-05",  # a date as an ISO date
        "Data!D4 = 2024-03-05 14:30:00",
        "Data!A10 = 0.3",  # 15 significant digits, as Excel shows it
        "Data!A9 = Merged heading",
    ],
    "sheet-Hidden.md": ["# hidden sheet", "Hidden!A1 = hidden text"],
    "sheet-Q1-Q2 plan.md": ["'Q1-Q2 plan'!A1 = plan"],
}
NEVER = ["\\n", "Total\nrevenue", "0.30000000000000004", "IndexError"]


def test_xlsxwriter_workbook(excel_like: pathlib.Path) -> None:
    kind, units = parse(excel_like)
    assert kind == "xlsx"
    assert [u.name for u in units] == [
        "sheet-Data.md",
        "sheet-Chart1.md",
        "sheet-Hidden.md",
        "sheet-Secret.md",
        "sheet-Q1-Q2 plan.md",
        "names.md",
    ]
    assert units[0].locator == "sheet=Data"
    check(
        units,
        {
            **VALUES,
            "sheet-Data.md": [
                *VALUES["sheet-Data.md"],
                "Data!C2 = =B2/SUM($B$2:$B$4) -> 48.0%",  # cached value, percent format
                "Data!D2 = 12.5%",
                "Data!B5 = =SUM(B2:B4) -> 2500",
                "Data!B6 = =B5/0 -> #DIV/0!",
                "Data!B7 = =#REF!+1 -> #REF!",
                "Data!D5 = TRUE",
                "Data!A9:C9 merged",
                "Data!B5 note by Ann Analyst: Checked against the ledger",
            ],
            "sheet-Chart1.md": [
                "chart: Revenue by region (bar)",
                "  categories (Data!$A$2:$A$4): North | South | East",
                "  series Revenue (Data!$B$2:$B$4): 1200 | 800 | 500",
            ],
            "sheet-Secret.md": [
                "# very hidden sheet (only a macro can show it)",
                "Secret!A1 = very hidden text",
            ],
            "names.md": ["TotalRevenue = Data!$B$5", "Data!LocalRate = 0.2"],
        },
        [*NEVER, "(computed)", "not computed", "Data!D2 = 0.125", "2024-03-05T00:00:00"],
    )
    # Annotation lines are not cell lines: the diff reads only the cells.
    data = cells.parse_cell_lines(units[0].text)
    assert data["B5"] == cells.Cell(value="2500", formula="=SUM(B2:B4)")
    assert not any(":" in addr for addr in data)


@pytest.fixture(scope="module")
def converted(
    excel_like: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, pathlib.Path]:
    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    out = tmp_path_factory.mktemp("lo")
    return {
        fmt: sheetgen.soffice_convert(excel_like, fmt, out / fmt) for fmt in ("xls", "ods", "xlsx")
    }


@pytest.mark.parametrize("fmt", ["xls", "ods"])
def test_libreoffice_binary_and_opendocument(converted: dict[str, pathlib.Path], fmt: str) -> None:
    kind, units = parse(converted[fmt])
    assert kind == "spreadsheet"
    check(
        units,
        {**VALUES, "sheet-Secret.md": ["Secret!A1 = very hidden text"]},
        [*NEVER, "=SUM("],  # calamine gives values only
    )
    assert "Data!B5 = 2500" in by_unit(units)["sheet-Data.md"]


def test_libreoffice_xlsx(converted: dict[str, pathlib.Path]) -> None:
    kind, units = parse(converted["xlsx"])
    assert kind == "xlsx"
    check(
        units,
        {
            **VALUES,
            "sheet-Data.md": [
                *VALUES["sheet-Data.md"],
                "Data!B5 = =SUM(B2:B4) -> 2500",
                "Data!C3 = =B3/SUM($B$2:$B$4) -> 32.0%",
                "Data!B6 = =B5/0 -> #DIV/0!",
                "Data!B5 note: Checked against the ledger",
            ],
            "sheet-Chart1.md": ["  series Revenue (Data!$B$2:$B$4): 1200 | 800 | 500"],
            "names.md": ["TotalRevenue = Data!$B$5"],
        },
        [*NEVER, "note by  "],
    )


def test_strict_ooxml(tmp_path: pathlib.Path) -> None:
    kind, units = parse(sheetgen.strict_xlsx(tmp_path / "strict.xlsx"))
    assert kind == "xlsx"
    check(
        units,
        {
            "sheet-Strict Sheet.md": [
                "'Strict Sheet'!A1 = strict text",
                "'Strict Sheet'!B1 = 4200",
                "'Strict Sheet'!C1 = =B1*2 -> 8400",
            ],
            "names.md": ["Amount = 'Strict Sheet'!$B$1"],
        },
        ["purl.oclc.org"],
    )


def test_recomputed_formulas(tmp_path: pathlib.Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    ws.title = "Sheet1"
    ws["B12"] = 1350
    ws["C12"] = "=B12*2"
    ws["D1"] = "=FOOBAR(1)"  # no engine knows it
    ws["D2"] = "=D3+1"  # a cycle
    ws["D3"] = "=D2+1"
    ws["D4"] = "=B12/0"
    ws["D5"] = "=SUM(B1:B12)"
    ws["D5"].number_format = "0.0%"
    ws["E1"] = "=TODAY()"  # its value depends on the day it is computed
    ws["E2"] = "=E1+30"
    plan = wb.create_sheet("My Plan")
    plan["A1"] = "='Sheet1'!C12+1"
    path = tmp_path / "saved-by-openpyxl.xlsx"
    wb.save(path)
    _, units = parse(path)
    check(
        units,
        {
            "sheet-Sheet1.md": [
                "Sheet1!C12 = =B12*2 -> 2700 (computed)",
                "Sheet1!D1 = =FOOBAR(1) -> ? (not computed: FOOBAR unsupported)",
                "Sheet1!D2 = =D3+1 -> ? (not computed: circular reference)",
                "Sheet1!D4 = =B12/0 -> #DIV/0! (computed)",
                "Sheet1!D5 = =SUM(B1:B12) -> 135000.0% (computed)",
                "Sheet1!E1 = =TODAY() -> ? (not computed: TODAY changes with every calculation)",
                "Sheet1!E2 = =E1+30 -> ? (not computed: TODAY changes with every calculation)",
            ],
            "sheet-My Plan.md": ["'My Plan'!A1 = ='Sheet1'!C12+1 -> 2701 (computed)"],
        },
        ["Sheet1!C12 = =B12*2\n", "-> 2700\n", "FOOBAR(1) -> 0", "Traceback"],
    )
    # The diff reads the marked value back as the cell's value.
    cell = cells.parse_cell_lines(units[0].text)["C12"]
    assert cell == cells.Cell(value="2700 (computed)", formula="=B12*2")


def test_recomputed_formulas_follow_excel(tmp_path: pathlib.Path) -> None:
    """What the formula engine used to get wrong: implicit intersection,
    defined names, a lookup through a named range, SUBTOTAL, Excel's errors,
    TEXT; and a workbook from XlsxWriter whose cached values were dropped."""
    import openpyxl
    import xlsxwriter

    raw = tmp_path / "xw.xlsx"
    wb = xlsxwriter.Workbook(str(raw))
    ws = wb.add_worksheet("Data")
    for row, (code, price) in enumerate([("a", 10), ("b", 20), ("c", 30)]):
        ws.write_string(row, 0, code)
        ws.write_number(row, 1, price)
    ws.write_formula("C2", "=B1:B3*2")  # the row's own B2
    ws.write_formula("D1", '=VLOOKUP("b",Prices,2,FALSE)')
    ws.write_formula("D2", "=SUBTOTAL(9,B1:B3)+SUBTOTAL(9,B1:B3)")
    ws.write_formula("D3", "=Rate*B3")
    ws.write_formula("D4", '=TEXT(B3*1000,"#,##0.00")')
    ws.write_formula("D5", '=INDEX(B1:B3,MATCH("z",A1:A3,0))')
    ws.write_formula("D6", '=IFERROR(MATCH("z",A1:A3,0),"none")')
    wb.define_name("Prices", "=Data!$A$1:$B$3")
    wb.define_name("Rate", "=0.5")
    wb.close()
    path = tmp_path / "no-cache.xlsx"
    openpyxl.load_workbook(raw).save(path)  # drops XlsxWriter's cached zeros
    _, units = parse(path)
    check(
        units,
        {
            "sheet-Data.md": [
                "Data!C2 = =B1:B3*2 -> 40 (computed)",
                'Data!D1 = =VLOOKUP("b",Prices,2,FALSE) -> 20 (computed)',
                "Data!D2 = =SUBTOTAL(9,B1:B3)+SUBTOTAL(9,B1:B3) -> 120 (computed)",
                "Data!D3 = =Rate*B3 -> 15 (computed)",
                'Data!D4 = =TEXT(B3*1000,"#,##0.00") -> 30,000.00 (computed)',
                'Data!D5 = =INDEX(B1:B3,MATCH("z",A1:A3,0)) -> #N/A (computed)',
                'Data!D6 = =IFERROR(MATCH("z",A1:A3,0),"none") -> none (computed)',
            ],
        },
        ["#NAME?", "Traceback", "(1+", "j)"],
    )


def test_recompute_is_bounded(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from parsers import xlsx_recalc

    monkeypatch.setattr(xlsx_recalc, "MAX_FORMULAS", 2)
    path = tmp_path / "many.xlsx"
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    for row in range(1, 5):
        ws.cell(row=row, column=1, value=row)
        ws.cell(row=row, column=2, value=f"=A{row}*10")
    wb.save(path)
    _, units = parse(path)
    lines = units[0].text.splitlines()
    assert "Sheet!B1 = =A1*10 -> 10 (computed)" in lines
    assert "Sheet!B2 = =A2*10 -> 20 (computed)" in lines
    assert "Sheet!B3 = =A3*10 -> ? (not computed: more than 2 formulas to compute)" in lines
    assert not any("-> 30" in line for line in lines)
    monkeypatch.setattr(xlsx_recalc, "MAX_WORKBOOK_CELLS", 4)
    _, units = parse(path)
    assert "Sheet!B1 = =A1*10 -> ? (not computed: workbook over 4 cells)" in units[0].text
    # A budget that runs out inside the engine (here: while it loads the
    # workbook) leaves every value uncomputed, and the parse still succeeds.
    monkeypatch.setattr(xlsx_recalc, "MAX_WORKBOOK_CELLS", 1000)
    monkeypatch.setattr(xlsx_recalc, "MAX_FORMULAS", 1000)
    monkeypatch.setattr(xlsx_recalc, "TIME_BUDGET_S", 0.000_001)
    _, units = parse(path)
    lines = units[0].text.splitlines()
    late = "? (not computed: time limit of 1e-06 s reached)"
    assert [line for line in lines if "=A" in line] == [
        f"Sheet!B{row} = =A{row}*10 -> {late}" for row in range(1, 5)
    ]


def test_renamed_sheet_address_is_the_same_in_diff(tmp_path: pathlib.Path) -> None:
    """A sheet whose name cannot be a file name ('/') keeps its own name in
    the cell lines, and the review diff, fed the units as the engine stores
    them (name, locator, text), uses the same address."""
    import openpyxl

    from swfs.review import changes as review

    def book(value: int) -> list[Unit]:
        wb = openpyxl.Workbook()
        ws = wb.active
        assert ws is not None
        ws.title = "AxB"
        ws["B2"] = value
        saved = tmp_path / f"saved{value}.xlsx"
        wb.save(saved)
        # Excel refuses '/' in a sheet name; other writers (and hostile files) do not.
        path = tmp_path / f"v{value}.xlsx"
        with zipfile.ZipFile(saved) as src, zipfile.ZipFile(path, "w") as dst:
            for item in src.infolist():
                data = src.read(item)
                if item.filename == "xl/workbook.xml":
                    data = data.replace(b'name="AxB"', b'name="A/B"')
                dst.writestr(item, data)
        return parse(path)[1]

    old, new = book(1), book(2)
    assert old[0].name == "sheet-A_B.md"
    assert "'A/B'!B2 = 1" in old[0].text.splitlines()
    sheets = review._sheets  # what the review renders spreadsheets from
    text = diffs.spreadsheet_diff(
        "book.xlsx",
        sheets([(u.name, u.locator, u.text) for u in old]),
        sheets([(u.name, u.locator, u.text) for u in new]),
        old_hash="a" * 16,
        new_hash="b" * 16,
    )
    assert "'A/B'!B2: 1 -> 2" in text
    assert "A_B" not in text


# -- bounds


def failed(path: pathlib.Path, **limits: int) -> str:
    """The one-line reason.  No wall-clock bound here (the machine may be
    busy): each of these stops before the work it refuses, not after it."""
    with pytest.raises(ParseFailed) as caught:
        parse(path, **limits)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_shared_string_deflate_bomb(tmp_path: pathlib.Path) -> None:
    message = failed(sheetgen.shared_string_bomb_xlsx(tmp_path / "sst.xlsx"))
    assert "zip bomb" in message
    assert "xl/sharedStrings.xml" in message


def test_shared_string_fanout_hits_the_text_budget(tmp_path: pathlib.Path) -> None:
    path = sheetgen.shared_string_fanout_xlsx(tmp_path / "fan.xlsx", cells=2000, kib=64)
    message = failed(path, max_text_bytes=16 * 1024 * 1024)
    assert message == f"too much text (>{16 * 1024 * 1024} bytes)"


def test_hundred_thousand_sheets(tmp_path: pathlib.Path) -> None:
    message = failed(sheetgen.many_sheets_xlsx(tmp_path / "sheets.xlsx"))
    assert message == f"too many sheets (100000 > {cells.MAX_SHEETS})"


def test_empty_sheet_says_so(tmp_path: pathlib.Path) -> None:
    import xlsxwriter

    path = tmp_path / "empty.xlsx"
    wb = xlsxwriter.Workbook(str(path))
    wb.add_worksheet("Blank")
    wb.add_worksheet("Full").write("A1", "x")
    wb.close()
    _, units = parse(path)
    check(
        units,
        {"sheet-Blank.md": [cells.EMPTY_SHEET], "sheet-Full.md": ["Full!A1 = x"]},
        [],
    )
    assert cells.EMPTY_SHEET not in by_unit(units)["sheet-Full.md"]


def test_broken_comments_part_keeps_the_cells(
    excel_like: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "broken-notes.xlsx"
    with zipfile.ZipFile(excel_like) as src, zipfile.ZipFile(path, "w") as dst:
        names = [i.filename for i in src.infolist()]
        assert "xl/comments1.xml" in names
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "xl/comments1.xml":
                data = data[: len(data) // 2]  # cut mid-element: the root starts, the rest is gone
            dst.writestr(item, data)
    _, units = parse(path)
    lines = by_unit(units)["sheet-Data.md"]
    assert "Data!B5 = =SUM(B2:B4) -> 2500" in lines
    assert any(line.startswith("# notes unreadable: ") for line in lines), lines
    assert not any(" note by " in line for line in lines)


def test_web_export_named_xls_is_left_to_the_text_parsers(tmp_path: pathlib.Path) -> None:
    """Web apps export HTML tables named .xls; no OLE magic, so not ours."""
    path = tmp_path / "export.xls"
    path.write_text("<html><body><table><tr><td>Revenue</td><td>1200</td></tr></table>")
    kind, units = parse(path)
    assert kind != "spreadsheet"
    assert "Revenue" in units[0].text
