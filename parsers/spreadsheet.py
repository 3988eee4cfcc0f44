"""Binary and OpenDocument spreadsheets (.xls, .xlsb, .ods) through python-calamine.

Same units and cell lines as ``parsers.xlsx`` (``parsers.cells``): one unit
per sheet, ``# hidden sheet`` first for a hidden one, merged ranges after the
cells.  calamine (Rust) reads these formats' values, dates included, about
ten times faster than openpyxl reads xlsx; it gives no formulas and no number
formats, so cells show their values (a formula's cached result) in general
format.  Chart sheets give a unit that says so.

Excel 2.x to 4.0 files (BIFF2 to BIFF4: a bare BIFF stream, no OLE
container) are refused by calamine; xlrd reads them, with the same units
and lines.  xlrd is also tried on an ``.xls`` calamine cannot read.  Dates
follow the workbook's date system (1900 or 1904) in both readers.  An
OpenDocument spreadsheet calamine cannot read (KOffice's KSpread wrote its
content.xml indented, which calamine refuses) is read from its content.xml
here, values only, after the zip guard has checked it.
"""

from __future__ import annotations

import datetime
import io
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

from parsers import cells, zipguard
from parsers._base import EncryptedDocument, FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, quiet

log = logging.getLogger(__name__)

_SCAN_FACTOR = 4
_ZIPPED = frozenset({".xlsb", ".ods", ".ots"})
_BINARY = frozenset({".xls", ".xlt"})
_OPENDOCUMENT = frozenset({".ods", ".ots"})
# The BOF record that starts a bare BIFF stream (Excel 2.x to 5.0 saved
# without an OLE container): record type 0x0009 (BIFF2), 0x0209 (BIFF3),
# 0x0409 (BIFF4), 0x0809 (BIFF5), little-endian.
_BIFF_BOF = (b"\x09\x00", b"\x09\x02", b"\x09\x04", b"\x09\x08")


def _bare_biff(head: bytes) -> bool:
    return head[:2] in _BIFF_BOF and 4 <= int.from_bytes(head[2:4], "little") <= 20


def _col(n: int) -> str:
    letters = ""
    n += 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


def _range(start: tuple[int, int], end: tuple[int, int]) -> str:
    return f"{_col(start[1])}{start[0] + 1}:{_col(end[1])}{end[0] + 1}"


class SpreadsheetParser(Parser):
    id = "spreadsheet"
    version = 2
    priority = 30.0  # after ole-office, which names encrypted .xls files

    extensions: ClassVar[frozenset[str]] = frozenset({".xls", ".xlt", ".xlsb", ".ods", ".ots"})

    def accepts(self, info: FileInfo) -> bool:
        # By magic too: web exports named .xls are often HTML or CSV, which
        # the text parsers read better than a "cannot detect" failure here.
        if info.extension in zipguard.OLE_WHEN_ENCRYPTED and info.head.startswith(
            zipguard.OLE_MAGIC
        ):
            return True  # encrypted, or not a workbook: the zip guard says which
        if info.extension in _ZIPPED:
            return info.head.startswith(zipguard.ZIP_MAGIC)
        if info.extension not in self.extensions:
            return False
        return info.head.startswith(zipguard.OLE_MAGIC) or _bare_biff(info.head)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.extension in _ZIPPED:
            zipguard.check_container(path, info, options)
        elif not info.head.startswith(zipguard.OLE_MAGIC):
            return _xlrd_units(path, options)
        try:
            import python_calamine
        except ImportError as exc:  # declared as a dependency; a broken install
            raise ParseFailed("python-calamine is not installed") from exc
        try:
            with quiet(), open(path, "rb") as stream:
                wb = python_calamine.CalamineWorkbook.from_filelike(stream)
                try:
                    return _units(wb, options)
                finally:
                    wb.close()
        except ParseFailed:
            raise
        except python_calamine.PasswordError as exc:
            raise EncryptedDocument("encrypted or password-protected spreadsheet") from exc
        except Exception as exc:  # calamine raises its own errors, ValueError, ...
            reason = f"unreadable spreadsheet: {describe(exc)}"
            if info.extension in _BINARY or info.extension in _OPENDOCUMENT:
                return _second_reader(path, options, reason, exc, info.extension)
            raise ParseFailed(reason) from exc
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            # A Rust panic in calamine, unwound through pyo3 (no Exception):
            # a fuzzed .xls whose sheet offset points past its stream does it.
            reason = f"unreadable spreadsheet: calamine panicked: {describe(exc)}"
            if info.extension in _BINARY or info.extension in _OPENDOCUMENT:
                return _second_reader(path, options, reason, exc, info.extension)
            raise ParseFailed(reason) from exc


def _second_reader(
    path: str, options: ParseOptions, reason: str, exc: BaseException, extension: str
) -> list[Unit]:
    """The units of a file calamine refused, read by xlrd (``.xls``) or by
    our own OpenDocument reader (``.ods``); else calamine's reason."""
    try:
        if extension in _OPENDOCUMENT:
            return _ods_units(path, options)
        return _xlrd_units(path, options)
    except (EncryptedDocument, MemoryError, RecursionError):
        raise
    except ParseFailed as second:
        if "too many" in str(second):
            raise
        raise ParseFailed(reason) from exc
    except Exception as second:
        log.debug("spreadsheet: xlrd failed too: %s", describe(second))
        raise ParseFailed(reason) from exc


def _units(wb: Any, options: ParseOptions) -> list[Unit]:
    if len(wb.sheets_metadata) > cells.MAX_SHEETS:
        raise ParseFailed(f"too many sheets ({len(wb.sheets_metadata)} > {cells.MAX_SHEETS})")
    budget = TextBudget(options.max_text_bytes)
    limit = options.max_cells
    count = 0
    taken: set[str] = set()
    units = []
    for meta in wb.sheets_metadata:
        name = meta.name
        ref = cells.sheet_ref(name)
        out = io.StringIO()
        visible = str(meta.visible).rsplit(".", 1)[-1].lower()
        if visible == "hidden":
            out.write(cells.hidden_line("hidden") + "\n")
        elif visible == "veryhidden":
            out.write(cells.hidden_line("veryHidden") + "\n")
        kind = str(meta.typ).rsplit(".", 1)[-1].lower()
        if kind == "chartsheet":
            out.write("chart sheet (charts in this format are not read)\n")
        else:
            sheet = wb.get_sheet_by_name(name)
            first_row, first_col = sheet.start or (0, 0)
            # Empty slots are walked too: a lone cell at XFD1048576 is a big range.
            if sheet.width * sheet.height > limit * _SCAN_FACTOR:
                raise ParseFailed(f"too many cells (>{limit})")
            for r, row in enumerate(sheet.iter_rows(), start=first_row + 1):
                for c, value in enumerate(row, start=first_col):
                    if value == "" or value is None:
                        continue
                    count += 1
                    if count > limit:
                        raise ParseFailed(f"too many cells (>{limit})")
                    out.write(budget.add(cells.value_line(ref, f"{_col(c)}{r}", value)))
                    out.write("\n")
            for start, end in sheet.merged_cell_ranges or ():
                out.write(cells.merged_line(ref, _range(start, end)) + "\n")
        text = out.getvalue() or cells.EMPTY_SHEET + "\n"
        units.append(Unit(cells.sheet_unit_name(name, taken), text, cells.sheet_locator(name)))
    if not units:
        raise ParseFailed("no sheets in the workbook")
    log.debug("spreadsheet: %d sheets, %d cells", len(units), count)
    return units


# -- xlrd: Excel 2.x to 4.0 (BIFF2 to BIFF4), and what calamine refuses ----------------------


def _xlrd_units(path: str, options: ParseOptions) -> list[Unit]:
    try:
        import xlrd
    except ImportError as exc:  # declared as a dependency; a broken install
        raise ParseFailed("xlrd is not installed") from exc
    try:
        with quiet():
            book = xlrd.open_workbook(path, on_demand=True, logfile=io.StringIO())
    except xlrd.biffh.XLRDError as exc:
        text = str(exc)
        if "encrypted" in text.lower():
            raise EncryptedDocument("encrypted or password-protected spreadsheet") from exc
        raise ParseFailed(f"not a valid Excel file: {describe(exc)}") from exc
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # xlrd's struct and index errors on a damaged stream
        raise ParseFailed(f"not a valid Excel file: {describe(exc)}") from exc
    try:
        return _xlrd_sheets(xlrd, book, options)
    finally:
        book.release_resources()


def _xlrd_sheets(xlrd: Any, book: Any, options: ParseOptions) -> list[Unit]:
    if book.nsheets > cells.MAX_SHEETS:
        raise ParseFailed(f"too many sheets ({book.nsheets} > {cells.MAX_SHEETS})")
    budget = TextBudget(options.max_text_bytes)
    limit = options.max_cells
    count = 0
    taken: set[str] = set()
    units = []
    for index in range(book.nsheets):
        sheet = book.sheet_by_index(index)
        name = sheet.name
        ref = cells.sheet_ref(name)
        out = io.StringIO()
        if sheet.visibility == 1:
            out.write(cells.hidden_line("hidden") + "\n")
        elif sheet.visibility == 2:
            out.write(cells.hidden_line("veryHidden") + "\n")
        if sheet.nrows * sheet.ncols > limit * _SCAN_FACTOR:
            raise ParseFailed(f"too many cells (>{limit})")
        for r in range(sheet.nrows):
            for c, cell in enumerate(sheet.row(r)):
                value = _xlrd_value(xlrd, cell, book.datemode)
                if value == "" or value is None:
                    continue
                count += 1
                if count > limit:
                    raise ParseFailed(f"too many cells (>{limit})")
                out.write(budget.add(cells.value_line(ref, f"{_col(c)}{r + 1}", value)))
                out.write("\n")
        for r0, r1, c0, c1 in sheet.merged_cells or ():
            out.write(cells.merged_line(ref, _range((r0, c0), (r1 - 1, c1 - 1))) + "\n")
        book.unload_sheet(index)
        text = out.getvalue() or cells.EMPTY_SHEET + "\n"
        units.append(Unit(cells.sheet_unit_name(name, taken), text, cells.sheet_locator(name)))
    if not units:
        raise ParseFailed("no sheets in the workbook")
    log.debug("spreadsheet (xlrd): %d sheets, %d cells", len(units), count)
    return units


def _xlrd_value(xlrd: Any, cell: Any, datemode: int) -> object:
    """A cell's value as calamine gives it: dates by the workbook's date
    system (``datemode`` 1: the 1904 one), errors by name."""
    kind, value = cell.ctype, cell.value
    if kind in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
        return None
    if kind == xlrd.XL_CELL_BOOLEAN:
        return bool(value)
    if kind == xlrd.XL_CELL_ERROR:
        return xlrd.error_text_from_code.get(value, f"#ERR{value}")
    if kind == xlrd.XL_CELL_DATE:
        try:
            when = xlrd.xldate.xldate_as_datetime(value, datemode)
        except (ValueError, OverflowError, xlrd.xldate.XLDateError):
            return value
        if 0 <= value < 1:
            return when.time()
        if when.time() == datetime.time(0):
            return when.date()
        return when
    return value


# -- OpenDocument content.xml: what calamine refuses ---------------------------------------

_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_NUMERIC = frozenset({"float", "percentage", "currency"})
_ROW_GROUPS = frozenset(
    {_TABLE + "table-header-rows", _TABLE + "table-rows", _TABLE + "table-row-group"}
)
_CELLS = frozenset({_TABLE + "table-cell", _TABLE + "covered-table-cell"})


def _ods_units(path: str, options: ParseOptions) -> list[Unit]:
    """Sheets of an OpenDocument spreadsheet from its content.xml (checked by
    the zip guard: no DOCTYPE, no entity), as calamine's units give them."""
    import zipfile
    from xml.etree import ElementTree

    with zipfile.ZipFile(path) as archive:
        try:
            member = archive.getinfo("content.xml")
        except KeyError as exc:
            raise ParseFailed("not a valid OpenDocument spreadsheet file: no content.xml") from exc
        root = ElementTree.fromstring(archive.read(member))
    budget = TextBudget(options.max_text_bytes)
    counter = [0, options.max_cells]
    taken: set[str] = set()
    units: list[Unit] = []
    tables = list(root.iter(_TABLE + "table"))
    if len(tables) > cells.MAX_SHEETS:
        raise ParseFailed(f"too many sheets ({len(tables)} > {cells.MAX_SHEETS})")
    for table in tables:
        name = table.get(_TABLE + "name") or f"Sheet{len(units) + 1}"
        ref = cells.sheet_ref(name)
        out = io.StringIO()
        for coord, value in _ods_cells(table, counter):
            out.write(budget.add(cells.value_line(ref, coord, value)) + "\n")
        text = out.getvalue() or cells.EMPTY_SHEET + "\n"
        units.append(Unit(cells.sheet_unit_name(name, taken), text, cells.sheet_locator(name)))
    if not units:
        raise ParseFailed("no sheets in the workbook")
    return units


def _ods_rows(parent: Any) -> Iterator[Any]:
    """The rows of a table, header rows and grouped rows included, in order."""
    for child in parent:
        if child.tag == _TABLE + "table-row":
            yield child
        elif child.tag in _ROW_GROUPS:
            yield from _ods_rows(child)


def _repeat(element: Any, attribute: str) -> int:
    try:
        return max(1, int(element.get(_TABLE + attribute, "1")))
    except ValueError:
        return 1


def _ods_cells(table: Any, counter: list[int]) -> Iterator[tuple[str, object]]:
    """(A1 coordinate, value) of the table's non-empty cells; ``counter`` is
    [cells so far, limit].  Repeated empty rows and cells cost nothing."""
    r = 0
    for row in _ods_rows(table):
        rows = _repeat(row, "number-rows-repeated")
        found: list[tuple[int, object]] = []
        c = 0
        for cell in row:
            if cell.tag not in _CELLS:
                continue
            span = _repeat(cell, "number-columns-repeated")
            value = _ods_value(cell)
            if value is not None and value != "":
                found.extend((c + k, value) for k in range(min(span, counter[1] + 1)))
            c += span
        for k in range(min(rows, counter[1] + 1) if found else 0):
            for col, value in found:
                counter[0] += 1
                if counter[0] > counter[1]:
                    raise ParseFailed(f"too many cells (>{counter[1]})")
                yield f"{_col(col)}{r + k + 1}", value
        r += rows


def _ods_value(cell: Any) -> object:
    kind = cell.get(_OFFICE + "value-type")
    if kind in _NUMERIC:
        try:
            return float(cell.get(_OFFICE + "value", ""))
        except ValueError:
            pass
    elif kind == "boolean":
        return cell.get(_OFFICE + "boolean-value", "").lower() == "true"
    elif kind == "date":
        raw = cell.get(_OFFICE + "date-value", "")
        try:
            when = datetime.datetime.fromisoformat(raw)
        except ValueError:
            pass
        else:
            return when if "T" in raw else when.date()
    paragraphs = ["".join(p.itertext()) for p in cell.iter(_TEXT + "p")]
    return "\n".join(paragraphs) if paragraphs else None
