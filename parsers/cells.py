"""The spreadsheet cell-line format: written by the spreadsheet parsers, read back by the diffs.

One line per non-empty cell, in row and column order::

    Sheet1!B12 = 1200
    Sheet1!C12 = =B12*2 -> 2400                      formula with its cached value
    Sheet1!C12 = =B12*2 -> 2700 (computed)           no cached value: computed by swfs
    Sheet1!D3 = =FOO(1) -> ? (not computed: FOO unsupported)
    'My Sheet'!A1 = it's quoted Excel-style

* The sheet reference is quoted (``'...'``, inner ``'`` doubled) unless it
  consists only of ASCII letters, digits, ``_`` and ``.``.  Quoting is always
  valid Excel syntax, so anything else (spaces, non-ASCII letters) is quoted.
  The name is always the sheet's own name, never the unit's file name (which
  may have had ``/`` replaced): parsed views and diffs show the same address.
* Values as a user sees them: integral numbers as integers (``1200``, below
  2**53), other numbers with Excel's 15 significant digits, percentages as
  formatted (``12.5%``), dates in ISO 8601 (``2024-03-05``; with the time only
  when the number format shows one), booleans ``TRUE``/``FALSE``, errors as
  Excel shows them (``#DIV/0!``).  In-cell line breaks become one space, so
  that every cell stays on one line and a phrase split over two lines of a
  cell is still found by ``grep``.
* A text cell whose text starts with ``=`` or ``'`` gets a leading ``'``
  (Excel's own text prefix), so ``A1 = '=not a formula`` never reads as a
  formula.  Cached formula results are never prefixed: they follow `` -> ``.

Lines that are not cell lines describe the sheet and are skipped by the
diffs: ``# hidden sheet``, ``Sheet1!A1:C1 merged``, ``Sheet1!B2 note by
Ann: check this``, and chart lines.
"""

from __future__ import annotations

import datetime
import functools
import math
import re
from dataclasses import dataclass

_PLAIN_SHEET = re.compile(r"[A-Za-z0-9_.]+")
_EXACT_INT = 2.0**53
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029]")
# C0 controls other than tab cannot be shown; XML 1.0 files rarely carry them.
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f]")

PREFIX_UNIT = "sheet-"
SUFFIX_UNIT = ".md"
LOCATOR_PREFIX = "sheet="
COMPUTED = "(computed)"
# Workbooks with more sheets fail: each sheet is a unit (a file in .parsed),
# and Excel's practical limit is far lower.
MAX_SHEETS = 10_000

# The shape of a cell line: the diffs read it back with this.
CELL_LINE = re.compile(
    r"^(?:'(?:[^'\n]|'')*'|[A-Za-z0-9_.]+)!([A-Z]{1,3})([0-9]+) = (.*)$", re.MULTILINE
)


def sheet_ref(name: str) -> str:
    """``Sheet1`` or ``'My Sheet'``: a sheet name as it appears before ``!``."""
    if _PLAIN_SHEET.fullmatch(name):
        return name
    return "'" + name.replace("'", "''") + "'"


def one_line_text(text: str) -> str:
    """Text on one line: line breaks become a space, other control characters go."""
    if not text.isprintable():
        text = _LINE_BREAKS.sub(" ", text)
        text = _CONTROLS.sub("", text)
    return text


# -- number formats


@dataclass(frozen=True)
class NumberFormat:
    """What a cell's number format changes in how its value reads."""

    percent_decimals: int | None = None  # '0.0%' -> 1
    has_date: bool = False
    has_time: bool = False


GENERAL = NumberFormat()
_QUOTED = re.compile(r'"[^"]*"|\\.|\[[^\]]*\]|_.|\*.')


@functools.lru_cache(maxsize=1024)
def number_format(code: str | None) -> NumberFormat:
    """Classify an Excel number format code (its first section)."""
    if not code or code == "General":
        return GENERAL
    section = _QUOTED.sub("", code.split(";", 1)[0])
    if "%" in section:
        decimals = 0
        if "." in section:
            decimals = sum(1 for ch in section.split(".", 1)[1] if ch in "0#?")
        return NumberFormat(percent_decimals=decimals)
    low = section.lower()
    has_date = any(ch in low for ch in "yd") or ("m" in low and "h" not in low and "s" not in low)
    has_time = "h" in low or "s" in low
    if has_date or has_time:
        return NumberFormat(has_date=has_date, has_time=has_time)
    return GENERAL


def format_number(value: float) -> str:
    if value.is_integer() and abs(value) < _EXACT_INT:
        return str(int(value))
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    # Excel keeps and shows 15 significant digits: 0.1+0.2 reads 0.3 there too.
    text = f"{value:.15g}"
    return text


def format_value(value: object, fmt: NumberFormat = GENERAL) -> str:
    """A cell value as it appears after `` = `` (or after `` -> `` for a formula)."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        if fmt.percent_decimals is not None:
            return f"{value * 100:.{fmt.percent_decimals}f}%"
        return str(value) if isinstance(value, int) else format_number(value)
    if isinstance(value, datetime.datetime):
        if fmt.has_time and not fmt.has_date:
            return value.time().isoformat()
        if fmt.has_date and not fmt.has_time:
            return value.date().isoformat()
        if not fmt.has_time and value.time() == datetime.time(0):
            return value.date().isoformat()
        return value.isoformat(sep=" ")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return str(value)
    return one_line_text(str(value))


def format_literal(value: object, fmt: NumberFormat = GENERAL) -> str:
    """A non-formula cell's value: like ``format_value``, text that looks like a formula quoted."""
    if isinstance(value, str) and value.startswith(("=", "'")):
        return "'" + one_line_text(value)
    return format_value(value, fmt)


def value_line(ref: str, coord: str, value: object, fmt: NumberFormat = GENERAL) -> str:
    return f"{ref}!{coord} = {format_literal(value, fmt)}"


def formula_line(ref: str, coord: str, formula: str, shown: str) -> str:
    """``shown`` is the formatted value, or a marked computed / not computed one."""
    return f"{ref}!{coord} = {one_line_text(formula)} -> {shown}"


def computed(shown: str) -> str:
    return f"{shown} {COMPUTED}"


def not_computed(reason: str) -> str:
    return f"? (not computed: {one_line_text(reason)})"


# -- annotation lines (not cell lines: the diffs skip them)


def hidden_line(state: str) -> str:
    if state == "veryHidden":
        return "# very hidden sheet (only a macro can show it)"
    return "# hidden sheet"


EMPTY_SHEET = "# empty sheet: no cells with a value"


def merged_line(ref: str, cell_range: str) -> str:
    return f"{ref}!{cell_range} merged"


def note_line(ref: str, coord: str, text: str, author: str | None) -> str:
    author = one_line_text(author).strip() if author else ""
    who = f" by {author}" if author else ""
    return f"{ref}!{coord} note{who}: {one_line_text(text)}"


# -- units


def sheet_unit_name(name: str, taken: set[str]) -> str:
    """``sheet-<Name>.md``; '/' and NUL cannot appear in a file name."""
    safe = name.replace("/", "_").replace("\x00", "_")
    unit = f"{PREFIX_UNIT}{safe}{SUFFIX_UNIT}"
    n = 2
    while unit.lower() in taken:
        unit = f"{PREFIX_UNIT}{safe}~{n}{SUFFIX_UNIT}"
        n += 1
    taken.add(unit.lower())
    return unit


def sheet_locator(name: str) -> str:
    return f"{LOCATOR_PREFIX}{name}"


def sheet_name(unit: str, locator: str | None) -> str | None:
    """The sheet's own name from a unit's locator (``sheet=<Name>``), else from
    its file name; None for units that are not sheets (``names.md``)."""
    if locator is not None and locator.startswith(LOCATOR_PREFIX):
        return locator[len(LOCATOR_PREFIX) :]
    if unit.startswith(PREFIX_UNIT) and unit.endswith(SUFFIX_UNIT):
        return unit[len(PREFIX_UNIT) : -len(SUFFIX_UNIT)]
    return None


# -- reading lines back


@dataclass(frozen=True)
class Cell:
    """One non-empty cell as a line shows it: a plain value, or a formula
    (with its leading '=') and the value after `` -> `` if the line has one."""

    value: str | None
    formula: str | None = None

    def render(self) -> str:
        if self.formula is None:
            return self.value if self.value is not None else ""
        if self.value is None:
            return self.formula
        return f"{self.formula} -> {self.value}"


def split_formula(rest: str) -> tuple[str, str | None]:
    """'=<formula> -> <cached>' into its parts; the separator is the first
    ' -> ' outside string literals ("...") and quoted sheet names ('...')."""
    if "'" not in rest and '"' not in rest:
        at = rest.find(" -> ")
        return (rest, None) if at < 0 else (rest[:at], rest[at + 4 :])
    quote: str | None = None
    i = 0
    while i < len(rest):
        ch = rest[i]
        if quote:
            if ch == quote:
                quote = None  # a doubled quote reopens at the next character
        elif ch in "\"'":
            quote = ch
        elif rest.startswith(" -> ", i):
            return rest[:i], rest[i + 4 :]
        i += 1
    return rest, None


@functools.lru_cache(maxsize=4096)
def parse_cell(rest: str) -> Cell:
    """The text after `` = `` of a cell line."""
    if rest.startswith("="):
        formula, cached = split_formula(rest)
        return Cell(value=cached, formula=formula)
    return Cell(value=rest)


def count_cells(text: str) -> int:
    """Cell lines in a sheet unit (annotation lines are not cells)."""
    return sum(1 for _ in CELL_LINE.finditer(text))


def parse_cell_lines(text: str) -> dict[str, Cell]:
    """The cells of one sheet unit, by A1 address ('B12').  Lines that are not
    cell lines (headers, annotations, blank lines) are skipped."""
    return {m[1] + m[2]: parse_cell(m[3].rstrip("\r")) for m in CELL_LINE.finditer(text)}
