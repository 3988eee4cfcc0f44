"""Spreadsheets (XLSX/XLSM, transitional and strict): one unit per sheet.

Each unit has one line per non-empty cell in the format of ``parsers.cells``
(``Sheet1!B12 = 1200``, ``Sheet1!C12 = =B12*2 -> 2400``), then lines that
describe the sheet: ``# hidden sheet`` first for a hidden one, merged ranges
(``Sheet1!A1:C1 merged``), notes with their cell (``Sheet1!B2 note by Ann:
...``) and charts (title, kind, categories, each series with its values).
A chart sheet's unit has its charts.  Defined names go to one more unit,
``names.md`` (``Total = Data!$B$12``; local names as ``Data!Total``).

Formulas without a cached value (a workbook saved by openpyxl has none) are
computed by ``parsers.xlsx_recalc`` and marked ``(computed)``, or marked
``? (not computed: <why>)``: never shown as if the file said so.

Why openpyxl for values and formulas, and python-calamine only for the
other formats (``parsers.spreadsheet``): calamine reads values about ten
times faster, but it gives no formulas and no number formats, and a cell
line needs the formula, its cached value and the format the value is shown
in (a percentage, a date) together.  openpyxl's worksheet parser streams the
sheet XML once; ``_CellParser`` replaces its per-cell decoding to keep all
three, and reads shared strings from the table each read-only worksheet
holds (``wb.shared_strings`` is empty in read-only mode: that is why files
with a shared-string table, which is what Excel and LibreOffice write,
failed with ``IndexError``).  ``WorkSheetParser`` is private API: if it ever
changes shape, the parser falls back to two public read-only passes in
lockstep (values and formulas, no number formats), at half the speed.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import io
import logging
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, TypeVar

import openpyxl
from openpyxl.styles.numbers import BUILTIN_FORMATS, BUILTIN_FORMATS_MAX_SIZE
from openpyxl.utils.cell import coordinate_to_tuple, get_column_letter, range_boundaries
from openpyxl.worksheet._read_only import ReadOnlyWorksheet
from openpyxl.worksheet.formula import ArrayFormula, DataTableFormula

from parsers import cells, xlsx_parts, zipguard
from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, quiet
from parsers.xlsx_recalc import Pending

log = logging.getLogger(__name__)
T = TypeVar("T")

# Rows are padded with empty cells up to their last cell; a hostile sheet can
# put one cell in column XFD on every row.  Empty slots count at this rate.
_SCAN_FACTOR = 4
# Stands for the value of a formula without a cached one until it is computed.
_PENDING = "\x00pending\x00"
NAMES_UNIT = "names.md"


def format_formula(formula: object) -> str:
    """Formula text with its leading ``=``."""
    if isinstance(formula, ArrayFormula):
        return formula.text or "="
    if isinstance(formula, DataTableFormula):
        args = ",".join(str(a) for a in (formula.r1, formula.r2) if a)
        return f"=TABLE({args})"
    return str(formula)


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


@dataclass
class _Sheet:
    """What reading one worksheet gave besides its cell lines."""

    merged: list[str] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)


def _line(
    ref: str, coord: str, value: Any, formula: object, fmt: cells.NumberFormat, sheet: _Sheet
) -> str:
    if formula is None:
        return cells.value_line(ref, coord, value, fmt)
    if value is None:
        sheet.pending.append(Pending(ref, coord, fmt))
        return cells.formula_line(ref, coord, format_formula(formula), _PENDING)
    return cells.formula_line(ref, coord, format_formula(formula), cells.format_value(value, fmt))


def _number_formats(wb: openpyxl.Workbook) -> list[cells.NumberFormat]:
    """Number format of each cell style index (the ``s`` of a cell)."""
    custom = list(wb._number_formats)
    out = []
    for style in wb._cell_styles:
        num = style.numFmtId
        code = (
            custom[num - BUILTIN_FORMATS_MAX_SIZE]
            if num >= BUILTIN_FORMATS_MAX_SIZE and num - BUILTIN_FORMATS_MAX_SIZE < len(custom)
            else BUILTIN_FORMATS.get(num)
        )
        out.append(cells.number_format(code))
    return out


# -- fast path: one pass, openpyxl's worksheet parser keeping all we need ----------------------


def _cell_parser() -> type[Any] | None:
    try:
        from openpyxl.utils.datetime import from_excel, from_ISO8601
        from openpyxl.worksheet._reader import (
            FORMULA_TAG,
            INLINE_STRING,
            VALUE_TAG,
            WorkSheetParser,
            _cast_number,
        )
    except ImportError:  # a future openpyxl moved its internals: use the public path
        return None

    text_tag = INLINE_STRING.replace("}is", "}t")
    run_tag = INLINE_STRING.replace("}is", "}r")

    def _inline_text(element: Any) -> str:
        """The text of an inline string: its <t>, or its runs' <t> (not the
        phonetic runs).  openpyxl's Text object does the same at several
        times the cost, and openpyxl writes every string inline."""
        parts = []
        for child in element:
            if child.tag == text_tag:
                parts.append(child.text or "")
            elif child.tag == run_tag:
                parts.extend(t.text or "" for t in child if t.tag == text_tag)
        return "".join(parts)

    class CellParser(WorkSheetParser):
        """Cells as (row, column, value, formula, style index)."""

        def parse_cell(self, element: Any) -> tuple[int, int, Any, object, int]:
            data_type = element.get("t", "n")
            coordinate = element.get("r")
            style = element.get("s")
            style_id = int(style) if style and style.isdigit() else 0
            if coordinate:
                row, column = coordinate_to_tuple(coordinate)
                self.col_counter = column
            else:
                self.col_counter += 1
                row, column = self.row_counter, self.col_counter
            formula = self.parse_formula(element) if element.find(FORMULA_TAG) is not None else None
            value: Any = None
            if data_type == "inlineStr":
                child = element.find(INLINE_STRING)
                if child is not None:
                    value = _inline_text(child)
            else:
                raw = element.findtext(VALUE_TAG, None) or None
                if raw is not None:
                    value = self._decode(raw, data_type, style_id)
            return row, column, value, formula, style_id

        def _decode(self, raw: str, data_type: str, style_id: int) -> Any:
            if data_type == "n":
                try:
                    number = _cast_number(raw)
                except ValueError:
                    return raw
                if style_id in self.date_formats:
                    try:
                        return from_excel(
                            number, self.epoch, timedelta=style_id in self.timedelta_formats
                        )
                    except (OverflowError, ValueError):
                        return number
                return number
            if data_type == "s":
                try:
                    return self.shared_strings[int(raw)]
                except (IndexError, ValueError):
                    return f"#BROKEN! (shared string {raw} missing)"
            if data_type == "b":
                return raw.strip() in ("1", "true")
            if data_type == "d":
                try:
                    return from_ISO8601(raw)
                except ValueError:
                    return raw
            return raw  # 'str' (a formula's text result), 'e' (an error value)

    return CellParser


_CellParser = _cell_parser()


def _one_pass_lines(
    sheet: ReadOnlyWorksheet,
    counter: _CellCounter,
    formats: list[cells.NumberFormat],
    info: _Sheet,
) -> Iterator[str]:
    assert _CellParser is not None
    ref = cells.sheet_ref(sheet.title)
    wb = sheet.parent
    general = cells.GENERAL
    nformats = len(formats)
    with sheet._get_source() as src:
        parser = _CellParser(
            src,
            sheet._shared_strings,
            data_only=False,
            epoch=wb.epoch,
            date_formats=wb._date_formats,
            timedelta_formats=wb._timedelta_formats,
        )
        for _index, row in parser.parse():
            counter.row(len(row))
            for r, c, value, formula, style_id in row:
                if value is None and formula is None:
                    continue
                counter.cell()
                fmt = formats[style_id] if style_id < nformats else general
                yield _line(ref, f"{get_column_letter(c)}{r}", value, formula, fmt, info)
        merged = parser.merged_cells
        if merged is not None:
            info.merged.extend(str(m.coord) for m in merged.mergeCell)


# -- fallback: two public read-only passes in lockstep ----------------------------------------


def _lockstep_lines(
    formulas: ReadOnlyWorksheet, values: ReadOnlyWorksheet, counter: _CellCounter, info: _Sheet
) -> Iterator[str]:
    ref = cells.sheet_ref(formulas.title)
    general = cells.GENERAL
    # Without this, a stale <dimension> (or a hostile one) pads every row and
    # adds empty rows up to it.
    formulas.reset_dimensions()
    values.reset_dimensions()
    for frow, vrow in zip(formulas.iter_rows(), values.iter_rows(), strict=True):
        counter.row(len(frow))
        for fcell, vcell in zip(frow, vrow, strict=True):
            if fcell.data_type == "f":
                counter.cell()
                yield _line(ref, fcell.coordinate, vcell.value, fcell.value, general, info)
            elif vcell.value is not None:
                counter.cell()
                yield _line(ref, vcell.coordinate, vcell.value, None, general, info)


# -- the workbook -------------------------------------------------------------------------------


LinesFn = Callable[[str, _CellCounter, _Sheet], Iterator[str]]


def _workbook_units(
    wb: openpyxl.Workbook,
    zf: zipfile.ZipFile,
    pkg: xlsx_parts.Package,
    options: ParseOptions,
    lines: LinesFn,
    recompute: Callable[[list[Pending], int], list[str]],
) -> list[Unit]:
    counter = _CellCounter(options)
    budget = TextBudget(options.max_text_bytes)
    taken: set[str] = set()
    entries = {e.name: e for e in pkg.sheets}
    texts: list[tuple[str, str, list[Pending]]] = []
    for name in wb.sheetnames:
        entry = entries.get(name)
        out = io.StringIO()
        if entry is not None and entry.state in ("hidden", "veryHidden"):
            out.write(cells.hidden_line(entry.state) + "\n")
        info = _Sheet()
        ws = wb[name]
        if isinstance(ws, ReadOnlyWorksheet):
            for line in lines(name, counter, info):
                budget.add(line)
                out.write(line)
                out.write("\n")
        ref = cells.sheet_ref(name)
        extra = [cells.merged_line(ref, m) for m in info.merged]
        if entry is not None and entry.part is not None:
            notes = _extra("notes", functools.partial(xlsx_parts.comments, zf, entry.part), extra)
            extra.extend(cells.note_line(ref, c, text, who) for c, who, text in notes)
        for line in extra:
            out.write(budget.add(line) + "\n")
        texts.append((name, out.getvalue(), info.pending))

    pending = [p for _, _, ps in texts for p in ps]
    if pending:
        shown = iter(recompute(pending, counter.cells))
        texts = [(name, _fill(text, shown) if ps else text, ps) for name, text, ps in texts]

    # Charts last: a chart's series may read cells of any sheet.
    resolve = _RangeResolver({name: text for name, text, _ in texts})
    for i, (name, text, ps) in enumerate(texts):
        entry = entries.get(name)
        if entry is not None and entry.part is not None:
            charts: list[str] = []
            charts.extend(
                _extra(
                    "charts",
                    functools.partial(xlsx_parts.chart_lines, zf, entry.part, resolve),
                    charts,
                )
            )
            if charts:
                texts[i] = (name, text + budget.add("\n".join(charts) + "\n"), ps)

    units = [
        Unit(
            cells.sheet_unit_name(name, taken),
            text or cells.EMPTY_SHEET + "\n",  # a view that says why it is empty
            cells.sheet_locator(name),
        )
        for name, text, _ in texts
    ]
    names = _names_text(pkg, wb.sheetnames)
    if names:
        units.append(Unit(NAMES_UNIT, budget.add(names), "names"))
    log.debug("xlsx: %d sheets, %d cells, %d computed", len(texts), counter.cells, len(pending))
    return units


def _extra(what: str, read: Callable[[], list[T]], notes: list[str]) -> list[T]:
    """``read()``, or nothing plus a line in ``notes`` saying why: a broken
    comments or chart part must not cost the sheet its cells."""
    try:
        return read()
    except Exception as exc:  # ElementTree.ParseError, a bad zip member, ...
        log.debug("xlsx: %s unreadable", what, exc_info=True)
        notes.append(f"# {what} unreadable: {describe(exc)}")
        return []


class _RangeResolver:
    """Values of a range like ``'Data'!$B$2:$B$4`` from the parsed cell lines
    (values, or formulas' values), row by row; None when it cannot tell."""

    MAX_CELLS = 10_000

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.parsed: dict[str, dict[str, cells.Cell]] = {}

    def __call__(self, formula: str) -> list[str] | None:
        sheet, _, area = formula.rpartition("!")
        if sheet.startswith("'") and sheet.endswith("'"):
            sheet = sheet[1:-1].replace("''", "'")
        if sheet not in self.texts:
            return None
        try:
            min_col, min_row, max_col, max_row = range_boundaries(area.replace("$", ""))
        except (ValueError, TypeError):
            return None
        if None in (min_col, min_row, max_col, max_row):
            return None
        assert min_col
        assert min_row
        assert max_col
        assert max_row
        if (max_col - min_col + 1) * (max_row - min_row + 1) > self.MAX_CELLS:
            return None
        if sheet not in self.parsed:
            self.parsed[sheet] = cells.parse_cell_lines(self.texts[sheet])
        found = self.parsed[sheet]
        out = []
        for r in range(min_row, max_row + 1):
            for c in range(min_col, max_col + 1):
                cell = found.get(f"{get_column_letter(c)}{r}")
                value = cell.value if cell is not None else None
                out.append(value.removesuffix(" " + cells.COMPUTED) if value else "")
        return out


def _fill(text: str, shown: Iterator[str]) -> str:
    parts = text.split(_PENDING)
    out = [parts[0]]
    for part in parts[1:]:
        out.append(next(shown, cells.not_computed("no value")))
        out.append(part)
    return "".join(out)


def _names_text(pkg: xlsx_parts.Package, sheetnames: list[str]) -> str:
    lines = []
    for n in pkg.names:
        if n.name.startswith("_xlnm."):  # print areas, filter ranges: Excel's own
            continue
        scope = ""
        if n.sheet is not None and n.sheet < len(pkg.sheets):
            scope = cells.sheet_ref(pkg.sheets[n.sheet].name) + "!"
        hidden = " (hidden)" if n.hidden else ""
        lines.append(f"{scope}{n.name} = {cells.one_line_text(n.text)}{hidden}\n")
    return "".join(lines)


def _open(stream: IO[bytes], *, data_only: bool) -> openpyxl.Workbook:
    # A stream, not the path: openpyxl refuses names without an Excel
    # extension, and the engine passes /proc/self/fd/N.
    return openpyxl.load_workbook(stream, read_only=True, data_only=data_only, keep_links=False)


class XlsxParser(Parser):
    id = "xlsx"
    version = 2
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".xlsx", ".xlsm", ".xltx", ".xltm"})
    lockstep: ClassVar[bool] = False  # force the two-pass public-API path (tests)

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        zipguard.check_container(path, info, options)
        try:
            with quiet(), contextlib.ExitStack() as stack:
                zf = stack.enter_context(zipfile.ZipFile(path))
                pkg = xlsx_parts.read_package(zf)
                source = path
                if pkg.strict:
                    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="swfs-xlsx-"))
                    source = os.path.join(tmp, "transitional.xlsx")
                    xlsx_parts.transitional_copy(zf, source)
                return self._parse(source, zf, pkg, options)
        except ParseFailed:
            raise
        except Exception as exc:  # openpyxl raises anything from KeyError to TypeError
            raise ParseFailed(f"unreadable spreadsheet: {describe(exc)}") from exc

    def _parse(
        self, source: str, zf: zipfile.ZipFile, pkg: xlsx_parts.Package, options: ParseOptions
    ) -> list[Unit]:
        epoch: datetime.datetime

        def recompute(pending: list[Pending], total: int) -> list[str]:
            from parsers import xlsx_recalc

            with open(source, "rb") as stream:
                return xlsx_recalc.compute(stream, pending, total_cells=total, epoch=epoch)

        if _CellParser is not None and not self.lockstep:
            with open(source, "rb") as stream:
                wb = _open(stream, data_only=True)
                try:
                    epoch = wb.epoch
                    formats = _number_formats(wb)
                    return _workbook_units(
                        wb,
                        zf,
                        pkg,
                        options,
                        lambda name, counter, info: _one_pass_lines(
                            wb[name], counter, formats, info
                        ),
                        recompute,
                    )
                finally:
                    wb.close()
        with open(source, "rb") as fstream, open(source, "rb") as vstream:
            wb_f = _open(fstream, data_only=False)
            wb_v = _open(vstream, data_only=True)
            try:
                epoch = wb_f.epoch
                return _workbook_units(
                    wb_f,
                    zf,
                    pkg,
                    options,
                    lambda name, counter, info: _lockstep_lines(
                        wb_f[name], wb_v[name], counter, info
                    ),
                    recompute,
                )
            finally:
                wb_f.close()
                wb_v.close()
