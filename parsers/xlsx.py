"""Spreadsheets (XLSX/XLSM): one unit per sheet, one line per non-empty cell.

The line format is fixed; ``swfs`` parses it back for cell-level diffs::

    Sheet1!B12 = 1200
    Sheet1!C12 = =B12*2 -> 2400          formula with its cached value
    Sheet1!D12 = =B12*3                  formula, file has no cached value
    'My Sheet'!A1 = it''s quoted Excel-style

* The sheet reference is quoted (``'...'``, inner ``'`` doubled) unless it
  consists only of ASCII letters, digits, ``_`` and ``.``.  Quoting is always
  valid Excel syntax, so anything else (spaces, non-ASCII letters) is quoted.
* Values: integral floats as integers (``1200``; below 2**53), other numbers by ``repr``,
  booleans ``TRUE``/``FALSE``, dates and times in ISO 8601, error values as
  Excel shows them (``#DIV/0!``), strings as-is with ``\\`` -> ``\\\\``, newline
  -> ``\\n`` and carriage return -> ``\\r`` so that every cell stays on one line.
* A text cell whose text starts with ``=`` or ``'`` gets a leading ``'``
  (Excel's own text prefix), so ``A1 = '=not a formula`` never reads as a
  formula.  Cached formula results are never prefixed: they follow `` -> ``.
* Sheets come in workbook order; a chart sheet gives an empty unit.

Why openpyxl and not python-calamine: calamine (Rust) reads values several
times faster, but it exposes either values or formulas, not a formula together
with its cached value, and it would be one more compiled dependency.  openpyxl
is already required, streams in ``read_only`` mode (memory stays flat in the
number of cells: only shared strings are held), converts dates by number
format and expands shared formulas.

Formulas and cached values: openpyxl's public read-only API yields either the
formulas (``data_only=False``) or the cached values (``data_only=True``).  The
fast path reads both in one pass with a small subclass of openpyxl's own
worksheet parser (``WorkSheetParser``: the cell decoding, date conversion and
shared-formula translation stay openpyxl's).  That class is private API, so if
it ever changes shape the parser falls back to the public way: the workbook
opened twice and both row streams walked in lockstep (the same XML parsed
twice yields the same rows), at half the speed.
"""

from __future__ import annotations

import datetime
import io
import logging
import re
from collections.abc import Callable, Iterator
from typing import IO, Any, ClassVar

import openpyxl
from openpyxl.utils.cell import get_column_letter
from openpyxl.worksheet._read_only import ReadOnlyWorksheet
from openpyxl.worksheet.formula import ArrayFormula, DataTableFormula

from parsers import zipguard
from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, quiet

log = logging.getLogger(__name__)

_PLAIN_SHEET = re.compile(r"[A-Za-z0-9_.]+")
# Rows are padded with empty cells up to their last cell; a hostile sheet can
# put one cell in column XFD on every row.  Empty slots count at this rate.
_SCAN_FACTOR = 4
_EXACT_INT = 2.0**53


def sheet_ref(name: str) -> str:
    """``Sheet1`` or ``'My Sheet'``: a sheet name as it appears before ``!``."""
    if _PLAIN_SHEET.fullmatch(name):
        return name
    return "'" + name.replace("'", "''") + "'"


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def format_literal(value: object) -> str:
    """A non-formula cell's value: like ``format_value``, text that looks like a formula quoted."""
    if isinstance(value, str) and value.startswith(("=", "'")):
        return "'" + escape(value)
    return format_value(value)


def format_value(value: object) -> str:
    """A cell value as it appears after `` = `` (or after `` -> `` for a formula)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # Beyond 2**53 a float's integer digits are not all real: 1e+21, not 1000...0.
        if value.is_integer() and abs(value) < _EXACT_INT:
            return str(int(value))
        return repr(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return str(value)
    return escape(str(value))


def format_formula(formula: object) -> str:
    """Formula text with its leading ``=``."""
    if isinstance(formula, ArrayFormula):
        text = formula.text or "="
    elif isinstance(formula, DataTableFormula):
        args = ",".join(str(a) for a in (formula.r1, formula.r2) if a)
        text = f"=TABLE({args})"
    else:
        text = str(formula)
    return escape(text)


def sheet_unit_name(name: str, taken: set[str]) -> str:
    """``sheet-<Name>.md``; '/' and NUL cannot appear in a file name."""
    safe = name.replace("/", "_").replace("\x00", "_")
    unit = f"sheet-{safe}.md"
    n = 2
    while unit.lower() in taken:
        unit = f"sheet-{safe}~{n}.md"
        n += 1
    taken.add(unit.lower())
    return unit


class _CellCounter:
    def __init__(self, options: ParseOptions) -> None:
        self.limit = options.max_cells
        self.cells = 0
        self.slots = 0

    def row(self, width: int) -> None:
        self.slots += width
        if self.slots > self.limit * _SCAN_FACTOR:
            raise ParseFailed(f"too many cells (>{self.limit})")

    def cell(self) -> None:
        self.cells += 1
        if self.cells > self.limit:
            raise ParseFailed(f"too many cells (>{self.limit})")


def _line(ref: str, coord: str, value: Any, formula: object) -> str:
    if formula is None:
        return f"{ref}!{coord} = {format_literal(value)}"
    if value is None:
        return f"{ref}!{coord} = {format_formula(formula)}"
    return f"{ref}!{coord} = {format_formula(formula)} -> {format_value(value)}"


# -- fast path: one pass, openpyxl's worksheet parser keeping both ----------------------------


def _formula_and_value_parser() -> type[Any] | None:
    """openpyxl's worksheet parser, made to decode the cached value and keep the formula."""
    try:
        from openpyxl.worksheet._reader import FORMULA_TAG, WorkSheetParser
    except ImportError:  # a future openpyxl moved its internals: use the public path
        return None

    class FormulaAndValueParser(WorkSheetParser):
        def parse_cell(self, element: Any) -> dict[str, Any]:
            cell: dict[str, Any] = super().parse_cell(element)
            has_formula = element.find(FORMULA_TAG) is not None
            cell["formula"] = self.parse_formula(element) if has_formula else None
            return cell

    return FormulaAndValueParser


_FormulaAndValueParser = _formula_and_value_parser()


def _one_pass_lines(sheet: ReadOnlyWorksheet, counter: _CellCounter) -> Iterator[str]:
    assert _FormulaAndValueParser is not None
    ref = sheet_ref(sheet.title)
    wb = sheet.parent
    with sheet._get_source() as src:
        parser = _FormulaAndValueParser(
            src,
            wb.shared_strings,
            data_only=True,
            epoch=wb.epoch,
            date_formats=wb._date_formats,
            timedelta_formats=wb._timedelta_formats,
        )
        for _index, row in parser.parse():
            counter.row(len(row))
            for cell in row:
                value, formula = cell["value"], cell["formula"]
                if value is None and formula is None:
                    continue
                counter.cell()
                coord = f"{get_column_letter(cell['column'])}{cell['row']}"
                yield _line(ref, coord, value, formula)


def _one_pass_units(stream: IO[bytes], options: ParseOptions) -> list[Unit]:
    wb = _open(stream, data_only=True)
    try:
        return _units(wb, options, lambda name, counter: _one_pass_lines(wb[name], counter))
    finally:
        wb.close()


# -- fallback: two public read-only passes in lockstep ----------------------------------------


def _lockstep_lines(
    formulas: ReadOnlyWorksheet, values: ReadOnlyWorksheet, counter: _CellCounter
) -> Iterator[str]:
    ref = sheet_ref(formulas.title)
    # Without this, a stale <dimension> (or a hostile one) pads every row and
    # adds empty rows up to it.
    formulas.reset_dimensions()
    values.reset_dimensions()
    for frow, vrow in zip(formulas.iter_rows(), values.iter_rows(), strict=True):
        counter.row(len(frow))
        for fcell, vcell in zip(frow, vrow, strict=True):
            if fcell.data_type == "f":
                counter.cell()
                yield _line(ref, fcell.coordinate, vcell.value, fcell.value)
            elif vcell.value is not None:
                counter.cell()
                yield _line(ref, vcell.coordinate, vcell.value, None)


def _lockstep_units(path: str, options: ParseOptions) -> list[Unit]:
    with open(path, "rb") as fstream, open(path, "rb") as vstream:
        wb_formulas = _open(fstream, data_only=False)
        wb_values = _open(vstream, data_only=True)
        try:
            return _units(
                wb_formulas,
                options,
                lambda name, counter: _lockstep_lines(wb_formulas[name], wb_values[name], counter),
            )
        finally:
            wb_formulas.close()
            wb_values.close()


def _units(
    wb: openpyxl.Workbook,
    options: ParseOptions,
    lines: Callable[[str, _CellCounter], Iterator[str]],
) -> list[Unit]:
    counter = _CellCounter(options)
    budget = TextBudget(options.max_text_bytes)
    taken: set[str] = set()
    units = []
    for name in wb.sheetnames:
        if isinstance(wb[name], ReadOnlyWorksheet):
            out = io.StringIO()
            for line in lines(name, counter):
                out.write(line)
                out.write("\n")
            text = out.getvalue()
        else:
            text = ""  # chart sheet
        units.append(Unit(sheet_unit_name(name, taken), budget.add(text), f"sheet={name}"))
    log.debug("xlsx: %d sheets, %d cells", len(units), counter.cells)
    return units


def _open(stream: IO[bytes], *, data_only: bool) -> openpyxl.Workbook:
    # A stream, not the path: openpyxl refuses names without an Excel
    # extension, and the engine passes /proc/self/fd/N.
    return openpyxl.load_workbook(stream, read_only=True, data_only=data_only, keep_links=False)


class XlsxParser(Parser):
    id = "xlsx"
    version = 1
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".xlsx", ".xlsm", ".xltx", ".xltm"})
    lockstep: ClassVar[bool] = False  # force the two-pass public-API path (tests)

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        zipguard.check_container(path, info, options)
        try:
            with quiet():
                if _FormulaAndValueParser is not None and not self.lockstep:
                    with open(path, "rb") as stream:
                        return _one_pass_units(stream, options)
                return _lockstep_units(path, options)
        except ParseFailed:
            raise
        except Exception as exc:  # openpyxl raises anything from KeyError to TypeError
            raise ParseFailed(f"unreadable spreadsheet: {describe(exc)}") from exc
