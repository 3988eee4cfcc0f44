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
import logging
from collections.abc import Iterable
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


def _swallowed(records: list[list[str]]) -> bool:
    """Whether one field holds more than _MAX_FIELD_LINES line breaks: an
    unclosed quote, not a cell anyone typed."""
    return any(f.count("\n") > _MAX_FIELD_LINES for r in records for f in r if "\n" in f)


def read_table(text: str, extension: str) -> Table:
    """Parse delimited ``text``.

    A quote that is never closed makes the csv module read the rest of the
    file as one field (up to its field size limit, then it fails); a file
    where that happens (a field of more than _MAX_FIELD_LINES lines) is read
    again with quotes taken literally, one record per line, so it still gets
    row units.  Raises csv.Error when that fails too.
    """
    dialect = dialect_for(text, extension)
    try:
        records = list(csv.reader(io.StringIO(text, newline=""), dialect))
        if text.count("\n") - len(records) > _MAX_FIELD_LINES and _swallowed(records):
            raise csv.Error(f"a quoted field spans more than {_MAX_FIELD_LINES} lines")
    except csv.Error as exc:
        log.debug("csv: %s; reading quotes literally", exc)
        records = list(csv.reader(io.StringIO(text, newline=""), dialect, quoting=csv.QUOTE_NONE))
    # A trailing empty line is not a record.
    while records and not any(records[-1]):
        records.pop()
    width = max((len(r) for r in records), default=0)
    header = bool(records) and has_header(records[0], len(records))
    names = [cell(f) for f in records[0]] if header else []
    names += [column_name(i) for i in range(len(names), width)]
    body = records[1:] if header else records
    rows = [[cell(f) for f in r] + [""] * (width - len(r)) for r in body]
    return Table(names, rows, header)


def header_lines(columns: list[str]) -> str:
    return (
        "| " + " | ".join([ROW_COLUMN, *columns]) + " |\n|" + " --- |" * (len(columns) + 1) + "\n"
    )


def row_line(number: int, row: Iterable[str]) -> str:
    return "| " + " | ".join([str(number), *row]) + " |\n"


def rows_per_unit(table: Table) -> int:
    """Rows per unit for this table, from the rendered size of up to 1,000
    rows spread over the file (a fixed count per file keeps unit names stable
    across small edits)."""
    step = max(1, len(table.rows) // 1000)
    sample = table.rows[::step]
    average = sum(len(row_line(0, r)) for r in sample) / max(1, len(sample))
    for n in _ROWS_PER_UNIT:
        if n * average <= UNIT_BYTES:
            return n
    return _ROWS_PER_UNIT[-1]


def row_units(table: Table, budget: TextBudget) -> list[Unit]:
    per_unit = rows_per_unit(table)
    head = header_lines(table.columns)
    units = []
    for start in range(0, len(table.rows), per_unit):
        chunk = table.rows[start : start + per_unit]
        first, last = start + 1, start + len(chunk)
        body = "".join(row_line(first + i, row) for i, row in enumerate(chunk))
        units.append(
            Unit(f"rows-{first:06d}-{last:06d}.md", budget.add(head + body), f"rows={first}-{last}")
        )
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
            table = read_table(text, info.extension)
        except csv.Error as exc:  # shown whole rather than lost
            log.debug("csv: %s: %s, shown as text", info.name, exc)
            return content
        if len(table.rows) <= SPLIT_ROWS and len(data) <= SPLIT_BYTES:
            return content
        return row_units(table, TextBudget(options.max_text_bytes))
