"""CSV and TSV: small files as ``content.txt``, large ones as row-range units.

A file up to ``SPLIT_BYTES`` and ``SPLIT_ROWS`` records is shown as it is, one
``content.txt`` (like any text file).  A larger one becomes units of
consecutive records, ``rows-000001-005000.md``, ``rows-005001-010000.md``, ...
(locator ``rows=1-5000``), so that ``cat`` of one unit stays bounded and a grep
hit names its row.  Each unit is a Markdown table that starts with the header
row; every line after it is one record, numbered in its first column::

    | row | id | name | amount |
    | --- | --- | --- | --- |
    | 1 | 7 | Alice | 10 |

Rows are numbered from 1, counting records (a quoted field may span lines)
after the header.  A unit holds 5,000 records, or 2,000, 1,000, ... 100 when
records are wide, so that a unit stays under ``UNIT_BYTES`` (256 KiB).  When
the first record does not look like a header (a field is empty or a number),
there is none: columns are named A, B, C as in a spreadsheet and row 1 is the
first record.  Cells are
escaped for Markdown: ``|`` as ``\\|``, a backslash as ``\\\\``, a line break
inside a quoted field as ``<br>``.

Bytes are decoded as UTF-8 (or UTF-16 with a BOM); files that are not UTF-8
as the encoding ``parsers.text.decode`` finds (cp1252 for most Western exports,
Shift-JIS and other CJK encodings when detected).
"""

from __future__ import annotations

import csv
import io
import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import ClassVar

from parsers._base import FileInfo, ParseOptions, Parser, Unit
from parsers._common import TextBudget
from parsers.text import decode, read_bytes

log = logging.getLogger(__name__)

SPLIT_BYTES = 128 * 1024
SPLIT_ROWS = 5000
UNIT_BYTES = 256 * 1024
# Rows per unit, from the most to the fewest: a unit takes the first that
# keeps it under UNIT_BYTES (by the file's average record size).
_ROWS_PER_UNIT = (5000, 2000, 1000, 500, 200, 100)
_SNIFF_BYTES = 64 * 1024
_DELIMITERS = ",;\t|"
ROW_COLUMN = "row"
_MAX_FIELD_LINES = 500


@dataclass(frozen=True)
class Table:
    """A delimited file's records: column names and the rows under them, with
    cells escaped as in the units."""

    columns: list[str]
    rows: list[list[str]]
    has_header: bool


def cell(text: str) -> str:
    """A cell as a Markdown table shows it (one line, pipes escaped)."""
    text = text.replace("\\", "\\\\").replace("|", "\\|")
    if "\n" in text or "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")
    return text


def column_name(index: int) -> str:
    """Spreadsheet letters for column ``index`` (0 -> A, 26 -> AA)."""
    letters = ""
    n = index + 1
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


def dialect_for(text: str, extension: str) -> type[csv.Dialect] | csv.Dialect:
    """The file's dialect: tab for .tsv/.tab, else sniffed among , ; tab | (comma
    when the sniffer cannot tell)."""
    if extension in (".tsv", ".tab"):
        return csv.excel_tab
    try:
        sniffed = csv.Sniffer().sniff(text[:_SNIFF_BYTES], delimiters=_DELIMITERS)
    except csv.Error:
        return csv.excel
    # Only the delimiter is taken: the sniffer may take an apostrophe for the
    # quote character, and every common writer quotes with '"'.

    class Sniffed(csv.excel):
        delimiter = sniffed.delimiter

    return Sniffed


def _looks_numeric(value: str) -> bool:
    v = value.strip().replace(",", "").replace("%", "").lstrip("$€£-+")
    try:
        float(v)
    except ValueError:
        return False
    return True


def has_header(first: list[str], records: int) -> bool:
    """The first record is a header when there are more records after it and
    none of its fields is empty or a number."""
    return records > 1 and all(f.strip() and not _looks_numeric(f) for f in first)


@dataclass(frozen=True)
class _Shape:
    """What one pass over the records tells: how to read them again, how many
    there are (without trailing empty lines), how wide, and the first one."""

    dialect: type[csv.Dialect] | csv.Dialect
    literal: bool  # quotes read as characters (see _shape)
    count: int
    width: int
    first: list[str]

    @property
    def header(self) -> bool:
        return has_header(self.first, self.count)

    def columns(self) -> list[str]:
        names = [cell(f) for f in self.first] if self.header else []
        return names + [column_name(i) for i in range(len(names), self.width)]


def _shape(text: str, extension: str) -> _Shape:
    """Measure the records.

    A quote that is never closed makes the csv module read the rest of the
    file as one field (up to its field size limit, then it fails); a file
    where that happens (a field of more than _MAX_FIELD_LINES lines) is read
    with quotes taken literally, one record per line, so it still gets row
    units.  Raises csv.Error when that fails too.
    """
    dialect = dialect_for(text, extension)
    try:
        return _measure(text, dialect, literal=False)
    except csv.Error as exc:
        log.debug("csv: %s; reading quotes literally", exc)
        return _measure(text, dialect, literal=True)


def _records(
    text: str, dialect: type[csv.Dialect] | csv.Dialect, literal: bool
) -> Iterator[list[str]]:
    stream = io.StringIO(text, newline="")
    if literal:
        return csv.reader(stream, dialect, quoting=csv.QUOTE_NONE)
    return csv.reader(stream, dialect)


def _measure(text: str, dialect: type[csv.Dialect] | csv.Dialect, literal: bool) -> _Shape:
    width = last = 0
    first: list[str] | None = None
    for count, record in enumerate(_records(text, dialect, literal), start=1):
        if first is None:
            first = record
        if any(record):
            last = count
            width = max(width, len(record))
        for field_ in record:
            if "\n" in field_ and field_.count("\n") > _MAX_FIELD_LINES:
                raise csv.Error(f"a quoted field spans more than {_MAX_FIELD_LINES} lines")
    # Trailing empty lines are not records.
    return _Shape(dialect, literal, last, width, first or [])


def _rows(text: str, shape: _Shape) -> Iterator[list[str]]:
    """The records after the header, escaped and padded to the full width."""
    records = itertools.islice(_records(text, shape.dialect, shape.literal), shape.count)
    if shape.header:
        next(records, None)
    for record in records:
        yield [cell(f) for f in record] + [""] * (shape.width - len(record))


def read_table(text: str, extension: str) -> Table:
    """All records of delimited ``text`` (see ``_shape``); raises csv.Error."""
    shape = _shape(text, extension)
    return Table(shape.columns(), list(_rows(text, shape)), shape.header)


def header_lines(columns: list[str]) -> str:
    return (
        "| " + " | ".join([ROW_COLUMN, *columns]) + " |\n|" + " --- |" * (len(columns) + 1) + "\n"
    )


def row_line(number: int, row: Iterable[str]) -> str:
    return "| " + " | ".join([str(number), *row]) + " |\n"


def rows_per_unit(sample: list[list[str]]) -> int:
    """Rows per unit, from the rendered size of the first rows (a fixed count
    per file keeps unit names stable across edits)."""
    average = sum(len(row_line(0, r)) for r in sample) / max(1, len(sample))
    for n in _ROWS_PER_UNIT:
        if n * average <= UNIT_BYTES:
            return n
    return _ROWS_PER_UNIT[-1]


def row_units(text: str, shape: _Shape, budget: TextBudget) -> list[Unit]:
    """Units of ``rows_per_unit`` records, rendered as the records are read:
    the file's records are never all held as cells at once."""
    per_unit = rows_per_unit(list(itertools.islice(_rows(text, shape), 1000)))
    head = header_lines(shape.columns())
    units = []
    rows = _rows(text, shape)
    first = 1
    while chunk := list(itertools.islice(rows, per_unit)):
        last = first + len(chunk) - 1
        body = "".join(row_line(first + i, row) for i, row in enumerate(chunk))
        units.append(
            Unit(f"rows-{first:06d}-{last:06d}.md", budget.add(head + body), f"rows={first}-{last}")
        )
        first = last + 1
    return units


class DelimitedParser(Parser):
    id = "csv"
    version = 1
    priority = 12.0  # before the generic text parser, which also lists .csv

    extensions: ClassVar[frozenset[str]] = frozenset({".csv", ".tsv", ".tab"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        data = read_bytes(path, options)
        text = decode(data)
        content = [Unit("content.txt", text, "content")]
        if len(data) <= SPLIT_BYTES and text.count("\n") < SPLIT_ROWS:
            return content
        try:
            shape = _shape(text, info.extension)
        except csv.Error as exc:  # shown whole rather than lost
            log.debug("csv: %s: %s, shown as text", info.name, exc)
            return content
        rows = shape.count - shape.header
        if rows == 0 or (rows <= SPLIT_ROWS and len(data) <= SPLIT_BYTES):
            return content
        return row_units(text, shape, TextBudget(options.max_text_bytes))
