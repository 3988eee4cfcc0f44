"""Binary and OpenDocument spreadsheets (.xls, .xlsb, .ods) through python-calamine.

Same units and cell lines as ``parsers.xlsx`` (``parsers.cells``): one unit
per sheet, ``# hidden sheet`` first for a hidden one, merged ranges after the
cells.  calamine (Rust) reads these formats' values, dates included, about
ten times faster than openpyxl reads xlsx; it gives no formulas and no number
formats, so cells show their values (a formula's cached result) in general
format.  Chart sheets give a unit that says so.
"""

from __future__ import annotations

import io
import logging
from typing import Any, ClassVar

from parsers import cells, zipguard
from parsers._base import EncryptedDocument, FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, quiet

log = logging.getLogger(__name__)

_SCAN_FACTOR = 4
_ZIPPED = frozenset({".xlsb", ".ods", ".ots"})


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
    version = 1
    priority = 30.0  # after ole-office, which names encrypted .xls files

    extensions: ClassVar[frozenset[str]] = frozenset({".xls", ".xlt", ".xlsb", ".ods", ".ots"})

    def accepts(self, info: FileInfo) -> bool:
        # By magic too: web exports named .xls are often HTML or CSV, which
        # the text parsers read better than a "cannot detect" failure here.
        if info.extension in _ZIPPED:
            return info.head.startswith(zipguard.ZIP_MAGIC)
        return info.extension in self.extensions and info.head.startswith(zipguard.OLE_MAGIC)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.extension in _ZIPPED:
            zipguard.check_container(path, info, options)
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
            raise ParseFailed(f"unreadable spreadsheet: {describe(exc)}") from exc


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
