"""Spreadsheets in the 1904 date system, and Excel 2.x-4.0 files (issue 41).

A workbook saved with the 1904 date system (Excel for the Mac, XlsxWriter's
``date_1904``) stores 2009-01-01 as 38352, not 39814: every reader must show
the date, never the serial.  The workbook is written by XlsxWriter and saved
by LibreOffice as .xls and .ods (LibreOffice keeps the 1904 flag in both).

Excel 2.x to 4.0 wrote a bare BIFF stream (no OLE container), which calamine
refuses: xlrd reads it.  No program we have writes one (LibreOffice exports
BIFF8 only, xlwt too), so that fixture is built by hand, record by record.
"""

from __future__ import annotations

import datetime
import io
import pathlib
import struct

import pytest

from parsers import registry, spreadsheet
from parsers._base import ParseFailed, ParseOptions, Unit
from tests import sheetgen


def parse(path: pathlib.Path) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def lines(units: list[Unit]) -> list[str]:
    return [line for u in units for line in u.text.splitlines()]


def write_1904(path: pathlib.Path) -> pathlib.Path:
    import xlsxwriter

    wb = xlsxwriter.Workbook(str(path), {"date_1904": True})
    ws = wb.add_worksheet("Dates")
    ws.write("A1", "When")
    ws.write_datetime(
        "A2", datetime.datetime(2009, 1, 1), wb.add_format({"num_format": "yyyy-mm-dd"})
    )
    ws.write_datetime(
        "A3",
        datetime.datetime(2009, 1, 1, 12, 30),
        wb.add_format({"num_format": "yyyy-mm-dd hh:mm"}),
    )
    ws.write_number("B2", 38352)  # a plain number stays one
    wb.close()
    return path


DATES = ["Dates!A2 = 2009-01-01", "Dates!A3 = 2009-01-01 12:30:00", "Dates!B2 = 38352"]


@pytest.fixture(scope="module")
def book_1904(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return write_1904(tmp_path_factory.mktemp("d1904") / "mac.xlsx")


@pytest.fixture(scope="module")
def saved_1904(
    book_1904: pathlib.Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, pathlib.Path]:
    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    out = tmp_path_factory.mktemp("lo1904")
    return {fmt: sheetgen.soffice_convert(book_1904, fmt, out / fmt) for fmt in ("xls", "ods")}


def test_xlsx_in_the_1904_system_shows_dates(book_1904: pathlib.Path) -> None:
    kind, units = parse(book_1904)
    assert kind == "xlsx"
    got = lines(units)
    for line in DATES:
        assert line in got
    assert "Dates!A2 = 38352" not in got


@pytest.mark.parametrize("fmt", ["xls", "ods"])
def test_libreoffice_1904_workbooks_show_dates(
    saved_1904: dict[str, pathlib.Path], fmt: str
) -> None:
    kind, units = parse(saved_1904[fmt])
    assert kind == "spreadsheet"
    got = lines(units)
    for line in DATES:
        assert line in got, got
    assert "Dates!A2 = 38352" not in got


def test_libreoffice_keeps_the_1904_flag_in_xls(saved_1904: dict[str, pathlib.Path]) -> None:
    """Else the test above would prove nothing about the 1904 system."""
    import xlrd

    assert xlrd.open_workbook(str(saved_1904["xls"])).datemode == 1


def test_xlrd_reader_follows_the_1904_system(saved_1904: dict[str, pathlib.Path]) -> None:
    """The second .xls reader, on the same file, gives the same lines."""
    got = lines(spreadsheet._xlrd_units(str(saved_1904["xls"]), ParseOptions()))
    for line in DATES:
        assert line in got, got


# -- Excel 2.x (BIFF2), built by hand: no program we have writes one -------------------------


def _rec(kind: int, data: bytes) -> bytes:
    return struct.pack("<HH", kind, len(data)) + data


def _attr(fmt: int = 0) -> bytes:
    return bytes([0, fmt & 0x3F, 0])  # XF 0, FORMAT index, font 0


def biff2(path: pathlib.Path, *, date1904: bool) -> pathlib.Path:
    serial = 38352.0 if date1904 else 39814.0  # 2009-01-01 either way
    out = _rec(0x0009, struct.pack("<HH", 2, 0x0010))  # BOF: BIFF2 worksheet
    out += _rec(0x0042, struct.pack("<H", 1252))  # CODEPAGE
    out += _rec(0x0022, struct.pack("<H", int(date1904)))  # DATEMODE
    out += _rec(0x001E, bytes([7]) + b"General")  # FORMAT 0
    out += _rec(0x001E, bytes([10]) + b"yyyy-mm-dd")  # FORMAT 1
    out += _rec(0x0000, struct.pack("<HHHH", 0, 3, 0, 2))  # DIMENSIONS
    out += _rec(0x0004, struct.pack("<HH", 0, 0) + _attr() + bytes([6]) + b"Budget")  # LABEL
    out += _rec(0x0003, struct.pack("<HH", 1, 0) + _attr() + struct.pack("<d", 1250.5))
    out += _rec(0x0003, struct.pack("<HH", 2, 0) + _attr(1) + struct.pack("<d", serial))
    out += _rec(0x0004, struct.pack("<HH", 0, 1) + _attr() + bytes([4]) + b"Note")
    out += _rec(0x000A, b"")  # EOF
    path.write_bytes(out)
    return path


@pytest.mark.parametrize("date1904", [False, True])
def test_excel_2_worksheet_is_read_by_xlrd(tmp_path: pathlib.Path, date1904: bool) -> None:
    """Before: 'unsupported' (calamine refuses a bare BIFF stream)."""
    path = biff2(tmp_path / "old.xls", date1904=date1904)
    kind, units = parse(path)
    assert kind == "spreadsheet"
    assert [u.locator for u in units] == ["sheet=Sheet 1"]
    got = lines(units)
    for line in (
        "'Sheet 1'!A1 = Budget",
        "'Sheet 1'!B1 = Note",
        "'Sheet 1'!A2 = 1250.5",
        "'Sheet 1'!A3 = 2009-01-01",
    ):
        assert line in got, got


def test_a_damaged_bare_biff_stream_fails_naming_the_format(tmp_path: pathlib.Path) -> None:
    good = biff2(tmp_path / "good.xls", date1904=False).read_bytes()
    cut = tmp_path / "cut.xls"
    cut.write_bytes(good[:30])
    with pytest.raises(ParseFailed, match="not a valid Excel file"):
        parse(cut)


def test_text_named_xls_is_not_taken_for_biff(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "export.xls"
    path.write_text("a\tb\n1\t2\n")
    info = registry.file_info(str(path), path.name)
    assert not spreadsheet.SpreadsheetParser().accepts(info)


# -- a file that makes calamine panic ---------------------------------------------------------


def test_calamine_panic_fails_the_file_naming_it(tmp_path: pathlib.Path) -> None:
    """Before: the panic (no Exception) went past the parser, and past the
    engine's worker before 5d25e09: the file stayed pending."""
    from tests import panicgen

    path = panicgen.fuzzed_xls(tmp_path)
    assert panicgen.panics_calamine(path)
    with pytest.raises(ParseFailed, match="calamine panicked: range start index") as caught:
        parse(path)
    assert "\n" not in str(caught.value)


# -- an OpenDocument spreadsheet calamine refuses ----------------------------------------------


def indented(ods: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """``ods`` with its content.xml indented, as KOffice's KSpread wrote it
    (odfpy's pythagoras-kspread.ods): calamine refuses the white space
    between cells ("Expecting 'table-cell'")."""
    import zipfile
    from xml.etree import ElementTree

    with zipfile.ZipFile(ods) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "content.xml":
                # The same prefixes (table:, office:...), only indented.
                for _event, (prefix, uri) in ElementTree.iterparse(
                    io.BytesIO(data), events=["start-ns"]
                ):
                    ElementTree.register_namespace(prefix, uri)
                root = ElementTree.fromstring(data)
                ElementTree.indent(root)
                data = ElementTree.tostring(root, xml_declaration=True, encoding="utf-8")
            dst.writestr(item, data)
    return out


def test_ods_calamine_refuses_is_read_from_its_content(
    saved_1904: dict[str, pathlib.Path], tmp_path: pathlib.Path
) -> None:
    import python_calamine

    clear = saved_1904["ods"]
    _, expected = parse(clear)
    path = indented(clear, tmp_path / "kspread.ods")
    with pytest.raises(Exception):  # noqa: B017,PT011 (calamine's own error types)
        python_calamine.CalamineWorkbook.from_path(str(path)).get_sheet_by_index(0).to_python()
    kind, units = parse(path)
    assert kind == "spreadsheet"
    assert [(u.name, u.locator) for u in units] == [(u.name, u.locator) for u in expected]
    assert lines(units) == lines(expected)
    for line in DATES:
        assert line in lines(units)
