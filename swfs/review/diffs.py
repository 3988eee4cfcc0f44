"""Review diffs: pure renderers from texts and parsed units to patch text.

Nothing here reads the store; callers pass what they have.  Every function
returns complete lines, each ending in ``\\n``, so per-file diffs concatenate
into ``ALL.diff``.  Output is bounded: after ``max_lines`` body lines (the
header lines are always shown) a renderer stops and ends with one line::

    [swfs: diff cut at 2000 lines; 1234 more lines not shown]

Every file's diff starts with git-style header lines::

    diff --git a/<old path> b/<new path>
    new file mode 100644            (added files only)
    deleted file mode 100644        (deleted files only)
    rename from <old path>          (when the path changed)
    rename to <new path>
    index <old>..<new>              (16 hex digits each, zeros for a missing side)

**Text files** (``text_diff``): a unified diff like ``git diff``, ``--- a/x``,
``+++ b/x`` (``/dev/null`` for a missing side), hunks of ``context`` lines and
``\\ No newline at end of file`` where a side does not end in a newline.

**Spreadsheets** (``spreadsheet_diff``): one line per changed cell, in sheet
order, then row and column order::

    Sheet1!B12: 1200 -> 1350                     a value changed
    Sheet1!D4: (empty) -> 7                      a cell was filled
    Sheet1!D5: 7 -> (empty)                      a cell was cleared
    Sheet1!C12: =B12*2 -> 2400  =>  =B12*3 -> 2700

A side with a formula is shown as ``=<formula> -> <cached value>`` (or just
``=<formula>`` when the file holds no cached value), and then the two sides are
separated by ``  =>  `` (two spaces each side) instead of `` -> ``, so the
arrow inside a side cannot be mistaken for the change.  A value the parser
computed keeps its mark (``-> 2700 (computed)``).  A formula cell whose formula
and value are the same on both sides is no change, whether each side's value
was cached by the file or computed by swfs (an openpyxl save drops the cached
values): such cells are only counted, in one note line at the end::

    (9 formula cells with the same formula and value on both sides, cached in
    one version and computed by swfs in the other: not changes, not listed)

(one line in the diff).  Cells are read with
``parsers.cells``, the module that writes them, and sheet names come from
the units' locators, so addresses are the parsed units' own
(``'It''s'!A1``, ``'A/B'!B2``); lines that describe a sheet rather than a
cell (merged ranges, notes, charts) are not compared.

Rows are also aligned by their content, ignoring the row number (formulas
compared relative to their own row), and where that explains the change in
fewer lines than comparing cells at the same address, inserting or deleting
rows is one summary line, not a change of every cell below::

    Sheet1: 100 rows inserted at row 5 (rows 5-104), 300 cells not listed
    Sheet1: 2 rows deleted at row 9 (old rows 9-10)
    Sheet1!B112 (was B12): 1200 -> 1350           a change in a shifted row

Groups of up to ``LIST_CELLS`` cells (a small inserted row, a small sheet)
are listed cell by cell under their summary line; larger ones are only
counted.  Removed cells of deleted rows carry their old address, marked
``(old)``.  Whole sheets::

    + sheet Summary (12 cells)
    - sheet Old (3 cells)

A renamed sheet is a removed plus an added sheet.  Inserted columns are not
detected: they show as changed cells.

**Other parsed formats** (``units_diff``): a unified diff per changed unit,
labelled ``--- a/report.pdf#page-0007.md`` / ``+++ b/report.pdf#page-0007.md``.
Units are aligned by content, so an inserted page is one added unit and the
pages after it are one line saying they are unchanged under new names.

**CSV and TSV** (``table_diff``): one line per changed cell, with the row
and the column's name, ``data.csv row 12 [amount]: 10 -> 12``; added and
removed rows and columns (see ``table_diff``).  Line endings and quoting do
not count.

**Binaries** (``binary_line``): ``Binary files a/x and b/x differ (1200 -> 1350
bytes, b3:1a2b3c4d5e6f7081 -> b3:9f8e7d6c5b4a3921)``.  Hashes are
written as ``swfs.store.hashform`` says, as everywhere else.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import logging
import math
import re
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from parsers import cells
from parsers.cells import Cell, sheet_ref
from parsers.cells import parse_cell_lines as parse_cell_lines  # re-exported
from parsers.delimited import Table, column_name, read_table
from swfs.store import hashform

log = logging.getLogger(__name__)

DEFAULT_MAX_LINES = 2000
# Up to this many cells of an inserted/deleted block or sheet are listed one
# by one; more are only counted.
LIST_CELLS = 20
# A spreadsheet diff is rendered twice to pick the shorter form; up to this
# many lines of the first rendering are kept rather than recomputed.
KEEP_LINES = 10_000
# Bound on the alignment work of one diff (items x items); see _opcodes.
MATCH_WORK = 400_000_000
FILE_MODE = "100644"
EMPTY = "(empty)"

Units = Sequence[tuple[str, str]]


# -- shared pieces


def diff_header(
    old_rel: str | None,
    new_rel: str | None,
    *,
    old_hash: str | None,
    new_hash: str | None,
    added: bool = False,
    deleted: bool = False,
) -> list[str]:
    """The git-style header lines of one file's diff (without newlines)."""
    old_name = old_rel if old_rel is not None else new_rel
    new_name = new_rel if new_rel is not None else old_rel
    if old_name is None or new_name is None:
        raise ValueError("a diff needs at least one path")
    lines = [f"diff --git a/{old_name} b/{new_name}"]
    if added:
        lines.append(f"new file mode {FILE_MODE}")
    elif deleted:
        lines.append(f"deleted file mode {FILE_MODE}")
    elif old_name != new_name:
        lines += [f"rename from {old_name}", f"rename to {new_name}"]
    lines.append(f"index {hashform.index_part(old_hash)}..{hashform.index_part(new_hash)}")
    return lines


def _finish(header: list[str], body: Iterable[str], max_lines: int) -> str:
    """Header plus at most ``max_lines`` body lines, then a line saying how
    many were left out.  The body is consumed lazily so a huge change costs
    counting, not memory."""
    out = list(header)
    omitted = 0
    shown = 0
    for line in body:
        if shown < max_lines:
            out.append(line)
            shown += 1
        else:
            omitted += 1
    if omitted:
        out.append(f"[swfs: diff cut at {max_lines} lines; {omitted} more lines not shown]")
    return "".join(line + "\n" for line in out)


def _split_lines(text: str) -> list[str]:
    """Lines as git sees them: split at '\\n' only, each keeping its '\\n'
    (the last one may lack it).  str.splitlines would also split at '\\r',
    form feeds and Unicode separators, which git does not."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _range(start: int, stop: int) -> str:
    # Unified-diff ranges as git prints them: 'start,len', ',len' dropped for
    # one line, and an empty range names the line before it.
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _emit(prefix: str, line: str) -> Iterator[str]:
    if line.endswith("\n"):
        yield prefix + line[:-1]
    else:
        yield prefix + line
        yield "\\ No newline at end of file"


Opcode = tuple[str, int, int, int, int]


def _opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Opcode]:
    """SequenceMatcher's opcodes for ``a`` -> ``b``, with bounded work.

    The common head and tail are matched first.  SequenceMatcher costs up to
    the product of the lengths when few items repeat often (a big CSV of
    similar rows), so beyond ``MATCH_WORK`` the differing middle becomes one
    block: a correct diff, just not a minimal one.  Popular items are junk
    for anchoring on long inputs, as in difflib's own unified_diff.
    """
    limit = min(len(a), len(b))
    head = 0
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    a_end, b_end = len(a) - tail, len(b) - tail
    ops: list[Opcode] = []
    if head:
        ops.append(("equal", 0, head, 0, head))
    if (a_end - head) * (b_end - head) > MATCH_WORK:
        log.debug("diff of %d x %d items: not aligning the middle", a_end - head, b_end - head)
        tag = "replace" if a_end > head and b_end > head else "delete" if a_end > head else "insert"
        ops.append((tag, head, a_end, head, b_end))
    elif a_end > head or b_end > head:
        matcher = SequenceMatcher(None, a[head:a_end], b[head:b_end])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            ops.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        ops.append(("equal", a_end, len(a), b_end, len(b)))
    return ops


def _grouped(ops: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """Opcodes in hunks with ``context`` equal items around each change
    (difflib's get_grouped_opcodes, over precomputed opcodes)."""
    if not ops or all(op[0] == "equal" for op in ops):
        return
    ops = list(ops)
    tag, i1, i2, j1, j2 = ops[0]
    if tag == "equal":
        ops[0] = (tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    tag, i1, i2, j1, j2 = ops[-1]
    if tag == "equal":
        ops[-1] = (tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _hunks(old: list[str], new: list[str], context: int) -> Iterator[str]:
    """The hunks (from the first '@@' on) of a unified diff of two line lists."""
    for group in _grouped(_opcodes(old, new), context):
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in old[i1:i2]:
                    yield from _emit(" ", line)
                continue
            for line in old[i1:i2]:
                yield from _emit("-", line)
            for line in new[j1:j2]:
                yield from _emit("+", line)


# -- text files


def text_diff(
    old_rel: str | None,
    new_rel: str | None,
    old_text: str | None,
    new_text: str | None,
    *,
    old_hash: str | None,
    new_hash: str | None,
    context: int = 3,
    max_lines: int = DEFAULT_MAX_LINES,
) -> str:
    """A git-style unified diff of one text file.  ``None`` text is a missing
    side: an added (old) or deleted (new) file."""
    if old_text is None and new_text is None:
        raise ValueError("text_diff needs at least one side")
    header = diff_header(
        old_rel,
        new_rel,
        old_hash=old_hash,
        new_hash=new_hash,
        added=old_text is None,
        deleted=new_text is None,
    )
    old_lines = _split_lines(old_text or "")
    new_lines = _split_lines(new_text or "")
    if old_text is not None and new_text is not None:
        if old_lines == new_lines:
            if old_hash == new_hash:
                return _finish(header, (), max_lines)
            return _finish(header, [SAME_TEXT_NOTE], max_lines)
        eol = line_endings_only(old_text, new_text)
        if eol is not None:
            return _finish(header, [eol], max_lines)
    old_name = old_rel if old_rel is not None else new_rel
    new_name = new_rel if new_rel is not None else old_rel
    header.append("--- /dev/null" if old_text is None else f"--- a/{old_name}")
    header.append("+++ /dev/null" if new_text is None else f"+++ b/{new_name}")
    return _finish(header, _hunks(old_lines, new_lines, context), max_lines)


SAME_TEXT_NOTE = "(no text changes; the bytes differ in encoding or byte-order mark)"


def _eol_style(text: str) -> str:
    crlf = text.count("\r\n")
    lf = text.count("\n") - crlf
    cr = text.count("\r") - crlf
    styles = [name for name, n in (("CRLF", crlf), ("LF", lf), ("CR", cr)) if n]
    if not styles:
        return "no line breaks"
    return styles[0] if len(styles) == 1 else "mixed " + "/".join(styles)


def line_endings_only(old_text: str, new_text: str) -> str | None:
    """One line saying that only line endings changed (a CRLF <-> LF rewrite),
    or None when anything else did too.  A trailing line ending added or
    removed is a change of its own, as git counts it."""

    def norm(t: str) -> str:
        return t.replace("\r\n", "\n").replace("\r", "\n")

    if old_text == new_text or norm(old_text) != norm(new_text):
        return None
    pairs = itertools.zip_longest(_eol_list(old_text), _eol_list(new_text))
    changed = sum(1 for a, b in pairs if a != b)
    return (
        f"(line endings only: {_eol_style(old_text)} -> {_eol_style(new_text)}, "
        f"{_plural(changed, 'line')}; no other change)"
    )


def _eol_list(text: str) -> list[str]:
    """The line ending of each line of ``text``, in order."""
    return re.findall(r"\r\n|\n|\r", text)


# -- binaries


def binary_line(
    rel: str,
    *,
    old_size: int | None,
    new_size: int | None,
    old_hash: str | None,
    new_hash: str | None,
    old_rel: str | None = None,
) -> str:
    """One line for a file without a text view; ``None`` marks a missing side."""
    a = "/dev/null" if old_size is None else f"a/{old_rel or rel}"
    b = "/dev/null" if new_size is None else f"b/{rel}"
    sizes = f"{_or_none(old_size)} -> {_or_none(new_size)} bytes"
    hashes = f"{hashform.label(old_hash)} -> {hashform.label(new_hash)}"
    return f"Binary files {a} and {b} differ ({sizes}, {hashes})\n"


def binary_diff(
    rel: str,
    *,
    old_size: int | None,
    new_size: int | None,
    old_hash: str | None,
    new_hash: str | None,
    old_rel: str | None = None,
) -> str:
    """``binary_line`` under the file's diff header, for ``ALL.diff``."""
    header = diff_header(
        old_rel or rel,
        rel,
        old_hash=old_hash,
        new_hash=new_hash,
        added=old_size is None,
        deleted=new_size is None,
    )
    line = binary_line(
        rel,
        old_size=old_size,
        new_size=new_size,
        old_hash=old_hash,
        new_hash=new_hash,
        old_rel=old_rel,
    )
    return "".join(h + "\n" for h in header) + line


def _or_none(size: int | None) -> str:
    return "none" if size is None else str(size)


# -- parsed units (PDF pages, slides, documents)


def units_diff(
    rel: str,
    old_units: Units | None,
    new_units: Units | None,
    *,
    old_hash: str | None,
    new_hash: str | None,
    max_lines: int = DEFAULT_MAX_LINES,
    context: int = 3,
    old_rel: str | None = None,
) -> str:
    """A unified diff of parsed units, one labelled group per changed unit.

    Each side is ``[(unit name, unit text), ...]`` in document order, or
    ``None`` for a missing side (an added or deleted file).
    """
    old_name = old_rel or rel
    header = diff_header(
        old_name,
        rel,
        old_hash=old_hash,
        new_hash=new_hash,
        added=old_units is None,
        deleted=new_units is None,
    )
    body = _units_body(old_name, rel, list(old_units or ()), list(new_units or ()), context)
    return _finish(
        header, _or_note(body, "(no text changes; the file differs elsewhere)"), max_lines
    )


def _or_note(body: Iterable[str], note: str) -> Iterator[str]:
    """``body``, or ``note`` alone when the body is empty."""
    empty = True
    for line in body:
        empty = False
        yield line
    if empty:
        yield note


def _units_body(
    old_name: str,
    new_name: str,
    old: list[tuple[str, str]],
    new: list[tuple[str, str]],
    context: int,
) -> Iterator[str]:
    # Align by text, not by name: after an inserted page every later page has
    # a new name, and diffing page-0008 against the old page-0008 would show
    # the whole rest of the document as changed.
    for tag, i1, i2, j1, j2 in _opcodes([t for _, t in old], [t for _, t in new]):
        if tag == "equal":
            moved = [
                (old[i][0], new[j][0]) for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            ]
            moved = [(a, b) for a, b in moved if a != b]
            if moved:
                yield _moved_line(moved)
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):
            yield from _unit_hunks(old_name, new_name, old[i1 + k], new[j1 + k], context)
        for k in range(i1 + paired, i2):
            yield from _unit_hunks(old_name, new_name, old[k], None, context)
        for k in range(j1 + paired, j2):
            yield from _unit_hunks(old_name, new_name, None, new[k], context)


def _moved_line(moved: list[tuple[str, str]]) -> str:
    if len(moved) == 1:
        return f"unchanged: {moved[0][1]} (was {moved[0][0]})"
    return (
        f"unchanged: {moved[0][1]} .. {moved[-1][1]} "
        f"(was {moved[0][0]} .. {moved[-1][0]}, {len(moved)} units)"
    )


def _unit_hunks(
    old_name: str,
    new_name: str,
    old: tuple[str, str] | None,
    new: tuple[str, str] | None,
    context: int,
) -> Iterator[str]:
    old_lines = _split_lines(old[1]) if old else []
    new_lines = _split_lines(new[1]) if new else []
    if old is not None and new is not None and old_lines == new_lines:
        return
    yield f"--- a/{old_name}#{old[0]}" if old else "--- /dev/null"
    yield f"+++ b/{new_name}#{new[0]}" if new else "+++ /dev/null"
    yield from _hunks(old_lines, new_lines, context)


# -- spreadsheets


# A1 references inside a formula: not part of a name (LOG10), not a sheet
# name (Q1!A1), not a function call.
_REF = re.compile(r"(?<![A-Za-z0-9_.$])(\$?)([A-Z]{1,3})(\$?)([0-9]+)(?![0-9A-Za-z_(!])")


# column number -> the cell's text after ' = ', parsed into a Cell only where
# needed: most rows of a big sheet are compared as strings and never rendered.
Row = dict[int, str]

_cell = cells.parse_cell


def _parse_rows(text: str) -> dict[int, Row]:
    rows: dict[int, Row] = {}
    for m in cells.CELL_LINE.finditer(text):
        rows.setdefault(int(m[2]), {})[_col_number(m[1])] = m[3].rstrip("\r")
    return rows


def _col_number(col: str) -> int:
    n = 0
    for ch in col:
        n = n * 26 + ord(ch) - 64
    return n


def _col_letters(n: int) -> str:
    letters = ""
    while n:
        n, rem = divmod(n - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


def _relative(formula: str | None, row: int) -> str | None:
    """``formula`` with relative row references written relative to ``row``,
    so a formula moved down with its row compares equal ('=B10*2' in row 10
    and '=B110*2' in row 110 both become '=B[0]*2')."""
    if formula is None or not any(ch.isdigit() for ch in formula):
        return formula
    if '"' not in formula:
        return _REF.sub(lambda m: _rel_ref(m, row), formula)
    parts = re.split(r'("(?:[^"]|"")*")', formula)  # leave string literals alone
    for i in range(0, len(parts), 2):
        parts[i] = _REF.sub(lambda m: _rel_ref(m, row), parts[i])
    return "".join(parts)


def _rel_ref(m: re.Match[str], row: int) -> str:
    if m[3]:  # $-anchored row: absolute
        return m[0]
    return f"{m[1]}{m[2]}[{int(m[4]) - row}]"


_MARK = " " + cells.COMPUTED


def _value(c: Cell) -> str | None:
    """What a cell is worth: a formula's value whether the file cached it or
    swfs computed it (``48213`` and ``48213 (computed)`` are the same value)."""
    if c.formula is not None and c.value is not None:
        return c.value.removesuffix(_MARK)
    return c.value


def _same(a: Cell | None, a_row: int, b: Cell | None, b_row: int) -> bool:
    if a is None or b is None:
        return a is b
    return _value(a) == _value(b) and _relative(a.formula, a_row) == _relative(b.formula, b_row)


def _marked(row: Row) -> set[int]:
    """The columns of ``row`` whose value swfs computed (no cached value)."""
    return {col for col, raw in row.items() if raw.startswith("=") and raw.endswith(_MARK)}


Signature = tuple[tuple[int, str | None, str | None], ...]


def _signature(row: int, cells: Row) -> Signature:
    sig = []
    for col, raw in sorted(cells.items()):
        if raw.startswith("="):
            c = _cell(raw)
            sig.append((col, _value(c), _relative(c.formula, row)))
        else:
            sig.append((col, raw, None))
    return tuple(sig)


def _change(addr: str, old: Cell | None, new: Cell | None) -> str:
    a = old.render() if old else EMPTY
    b = new.render() if new else EMPTY
    formula = (old is not None and old.formula is not None) or (
        new is not None and new.formula is not None
    )
    return f"{addr}: {a}{'  =>  ' if formula else ' -> '}{b}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@dataclass
class _Layout:
    """How old rows map onto new rows: a piecewise constant shift, with rows
    deleted from the old sheet and rows inserted into the new one."""

    breaks: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])  # (old row, shift)
    deleted: list[tuple[int, int]] = field(default_factory=list)  # old rows, first..last
    inserted: list[tuple[int, int]] = field(default_factory=list)  # new rows, first..last

    def position(self, old_row: int) -> int | None:
        """The new row an old row moved to; None if it was deleted."""
        i = bisect.bisect_right(self.deleted, (old_row, math.inf)) - 1
        if i >= 0 and self.deleted[i][1] >= old_row:
            return None
        return old_row + self.shift_at(old_row)

    def shift_at(self, old_row: int) -> int:
        """new row - old row for rows from ``old_row`` on (up to the next break)."""
        i = bisect.bisect_right(self.breaks, (old_row, math.inf)) - 1
        return self.breaks[i][1]


def _layout(
    old_rows: list[int], new_rows: list[int], anchors: Iterable[tuple[int, int]]
) -> _Layout:
    """Row insertions and deletions that explain the shifts between aligned
    rows: where the shift grows, rows were inserted; where it shrinks, deleted.
    Within a gap the inserted (deleted) range starts at its first non-empty
    row, so it covers the new (old) content there."""
    layout = _Layout()
    shift = 0
    po, pn = 0, 0
    for o, n in anchors:
        if n - o > shift:
            d = n - o - shift
            i = bisect.bisect_right(new_rows, pn)
            start = new_rows[i] if i < len(new_rows) and new_rows[i] < n else pn + 1
            start = min(start, n - d)
            layout.inserted.append((start, start + d - 1))
            layout.breaks.append((start - shift, n - o))
        elif n - o < shift:
            d = shift - (n - o)
            i = bisect.bisect_right(old_rows, po)
            start = old_rows[i] if i < len(old_rows) and old_rows[i] < o else po + 1
            start = min(start, o - d)
            layout.deleted.append((start, start + d - 1))
            layout.breaks.append((start + d, n - o))
        shift = n - o
        po, pn = o, n
    return layout


class _SheetDiff:
    """Cell changes of one sheet present on both sides.

    Two explanations are rendered: cells compared at the same address, and
    cells compared after aligning rows by content (which turns an inserted
    block into one line).  Both are complete; the shorter one is shown, so a
    coincidental match between unrelated rows never makes the output worse.
    """

    def __init__(
        self,
        ref: str,
        old: dict[int, Row],
        new: dict[int, Row],
        remarked: set[tuple[str, int, int]] | None = None,
    ) -> None:
        self.ref = ref
        self.old = old
        self.new = new
        # (sheet, column, new row) of formula cells whose formula and value
        # are the same on both sides, cached on one and computed by swfs on
        # the other: no change, only counted (a set: both renderings add).
        self.remarked: set[tuple[str, int, int]] = set() if remarked is None else remarked
        # Row signatures computed while aligning, reused to skip comparing
        # cells of shifted rows that are the same.
        self.old_sig: dict[int, Signature] = {}
        self.new_sig: dict[int, Signature] = {}

    def lines(self) -> Iterator[str]:
        old_rows = sorted(self.old)
        new_rows = sorted(self.new)
        aligned = _layout(old_rows, new_rows, self._anchors(old_rows, new_rows))
        if not aligned.inserted and not aligned.deleted:
            yield from self._render(_Layout())
            return
        # Keep the first lines of the aligned rendering: usually that is all
        # of it, and it need not be computed twice.
        rendering = self._render(aligned)
        kept = list(itertools.islice(rendering, KEEP_LINES))
        budget = len(kept) + sum(1 for _ in rendering)
        plain = sum(1 for _ in itertools.islice(self._render(_Layout()), budget))
        if plain < budget:
            yield from self._render(_Layout())
        elif budget == len(kept):
            yield from kept
        else:
            yield from self._render(aligned)

    def _anchors(self, old_rows: list[int], new_rows: list[int]) -> Iterator[tuple[int, int]]:
        """Pairs (old row, new row) of rows with the same content.

        Rows that are identical at the start and the end are paired first:
        typical edits touch few rows of a big sheet, and computing signatures
        (formula normalisation) for every row is what costs.
        """
        limit = min(len(old_rows), len(new_rows))
        head = 0
        while (
            head < limit
            and old_rows[head] == new_rows[head]
            and self.old[old_rows[head]] == self.new[new_rows[head]]
        ):
            head += 1
        tail = 0
        while (
            tail < limit - head
            and old_rows[-1 - tail] - old_rows[-1] == new_rows[-1 - tail] - new_rows[-1]
            and self.old[old_rows[-1 - tail]] == self.new[new_rows[-1 - tail]]
        ):
            tail += 1
        o_mid = old_rows[head : len(old_rows) - tail]
        n_mid = new_rows[head : len(new_rows) - tail]
        for r in o_mid:
            self.old_sig[r] = _signature(r, self.old[r])
        for r in n_mid:
            self.new_sig[r] = _signature(r, self.new[r])
        ops = _opcodes([self.old_sig[r] for r in o_mid], [self.new_sig[r] for r in n_mid])
        yield from zip(old_rows[:head], new_rows[:head], strict=True)
        for tag, i1, i2, j1, j2 in ops:
            if tag == "equal":
                yield from zip(o_mid[i1:i2], n_mid[j1:j2], strict=True)
        yield from zip(
            old_rows[len(old_rows) - tail :], new_rows[len(new_rows) - tail :], strict=True
        )

    def _render(self, layout: _Layout) -> Iterator[str]:
        # One entry per new row position (and per deleted block), in row order.
        at: dict[int, int] = {}  # new row -> old row shown there
        for o in self.old:
            p = layout.position(o)
            if p is not None:
                at[p] = o
        inserted = {r for first, last in layout.inserted for r in range(first, last + 1)}
        # (position, order at that position, kind, row, last row of a block)
        events: list[tuple[int, int, str, int, int]] = []
        for first, last in layout.deleted:
            events.append((first + layout.shift_at(first), 0, "deleted", first, last))
        for first, last in layout.inserted:
            events.append((first, 1, "inserted", first, last))
        for p in at.keys() | self.new.keys():
            if p in inserted:
                continue
            kind = "cleared" if p not in self.new else "filled" if p not in at else "changed"
            events.append((p, 2, kind, p, p))
        events.sort()

        run_kind = ""
        run: list[int] = []
        for _, _, kind, row, last in events:
            if run and (kind != run_kind or row != run[-1] + 1):
                yield from self._run(run_kind, run, at)
                run = []
            if kind in ("cleared", "filled"):
                run_kind = kind
                run.append(row)
            elif kind == "changed":
                yield from self._row_changes(at[row], row)
            elif kind == "deleted":
                yield from self._block(row, last, deleted=True)
            else:
                yield from self._block(row, last, deleted=False)
        if run:
            yield from self._run(run_kind, run, at)

    def _addr(self, col: int, row: int) -> str:
        return f"{self.ref}!{_col_letters(col)}{row}"

    def _row_changes(self, ro: int, rn: int) -> Iterator[str]:
        old = self.old[ro]
        new = self.new[rn]
        if ro == rn and old == new:
            return
        sig = self.old_sig.get(ro)
        if sig is not None and sig == self.new_sig.get(rn):
            # The same cells; those computed on one side only are remarked.
            self.remarked.update((self.ref, col, rn) for col in _marked(old) ^ _marked(new))
            return
        for col in sorted(old.keys() | new.keys()):
            raw_a, raw_b = old.get(col), new.get(col)
            if raw_a == raw_b and ro == rn:
                continue
            a = None if raw_a is None else _cell(raw_a)
            b = None if raw_b is None else _cell(raw_b)
            if _same(a, ro, b, rn):
                if a is not None and b is not None and a.value != b.value:
                    self.remarked.add((self.ref, col, rn))
                continue
            addr = self._addr(col, rn)
            if ro != rn:
                addr += f" (was {_col_letters(col)}{ro})"
            yield _change(addr, a, b)

    def _cells(self, rows: dict[int, Row], which: Iterable[int]) -> list[tuple[int, int, Cell]]:
        return [(r, col, _cell(raw)) for r in which for col, raw in sorted(rows.get(r, {}).items())]

    def _run(self, kind: str, positions: list[int], at: dict[int, int]) -> Iterator[str]:
        """Rows that only one side has content in, at unchanged positions."""
        first, last = positions[0], positions[-1]
        span = f"rows {first}-{last}" if last > first else f"row {first}"
        if kind == "filled":
            cells = self._cells(self.new, positions)
            if len(cells) > LIST_CELLS:
                yield f"{self.ref}: {span}: {_plural(len(cells), 'cell')} added, not listed"
                return
            for r, col, cell in cells:
                yield _change(self._addr(col, r), None, cell)
            return
        moved_to = {at[p]: p for p in positions}
        cells = self._cells(self.old, moved_to)
        if len(cells) > LIST_CELLS:
            yield f"{self.ref}: {span}: {_plural(len(cells), 'cell')} removed, not listed"
            return
        for r, col, cell in cells:
            p = moved_to[r]
            addr = self._addr(col, p) + (f" (was {_col_letters(col)}{r})" if p != r else "")
            yield _change(addr, cell, None)

    def _block(self, first: int, last: int, *, deleted: bool) -> Iterator[str]:
        """A structural insertion or deletion: one summary line, then its cells
        if there are few."""
        n = last - first + 1
        cells = self._cells(self.old if deleted else self.new, range(first, last + 1))
        listed = len(cells) <= LIST_CELLS
        more = "" if listed or not cells else f", {_plural(len(cells), 'cell')} not listed"
        if deleted:
            span = f"old rows {first}-{last}" if n > 1 else f"old row {first}"
            yield f"{self.ref}: {_plural(n, 'row')} deleted at row {first} ({span}){more}"
        else:
            span = f"rows {first}-{last}" if n > 1 else f"row {first}"
            yield f"{self.ref}: {_plural(n, 'row')} inserted at row {first} ({span}){more}"
        if listed:
            for r, col, cell in cells:
                if deleted:
                    yield _change(self._addr(col, r) + " (old)", cell, None)
                else:
                    yield _change(self._addr(col, r), None, cell)


def _whole_sheet(sign: str, name: str, text: str) -> Iterator[str]:
    rows = _parse_rows(text)
    count = sum(len(row) for row in rows.values())
    yield f"{sign} sheet {name} ({_plural(count, 'cell')})"
    if count > LIST_CELLS:
        return
    ref = sheet_ref(name)
    for r in sorted(rows):
        for col, raw in sorted(rows[r].items()):
            addr = f"{ref}!{_col_letters(col)}{r}"
            cell = _cell(raw)
            yield _change(addr, None, cell) if sign == "+" else _change(addr, cell, None)


def _sheets_body(old: Units, new: Units) -> Iterator[str]:
    remarked: set[tuple[str, int, int]] = set()
    yield from _sheet_changes(old, new, remarked)
    if remarked:
        n = len(remarked)
        yield (
            f"({_plural(n, 'formula cell')} with the same formula and value on both sides, "
            "cached in one version and computed by swfs in the other: not changes, not listed)"
        )


def _sheet_changes(old: Units, new: Units, remarked: set[tuple[str, int, int]]) -> Iterator[str]:
    old_by_name = dict(old)
    new_by_name = dict(new)
    for name, text in old:
        if name not in new_by_name:
            yield from _whole_sheet("-", name, text)
    for name, text in new:
        if name not in old_by_name:
            yield from _whole_sheet("+", name, text)
            continue
        old_text = old_by_name[name]
        if old_text == text:
            continue
        sheet = _SheetDiff(sheet_ref(name), _parse_rows(old_text), _parse_rows(text), remarked)
        yield from sheet.lines()


def spreadsheet_diff(
    rel: str,
    old_sheets: Units | None,
    new_sheets: Units | None,
    *,
    old_hash: str | None,
    new_hash: str | None,
    max_lines: int = DEFAULT_MAX_LINES,
    old_rel: str | None = None,
) -> str:
    """A cell-level diff of a workbook.  Each side is ``[(sheet name, unit
    text), ...]`` in workbook order, or ``None`` for a missing side."""
    header = diff_header(
        old_rel or rel,
        rel,
        old_hash=old_hash,
        new_hash=new_hash,
        added=old_sheets is None,
        deleted=new_sheets is None,
    )
    body = _sheets_body(old_sheets or (), new_sheets or ())
    note = "(no cell changes; the file differs in formatting or other content)"
    return _finish(header, _or_note(body, note), max_lines)


# -- delimited tables (CSV, TSV)

LIST_ROWS = 20
# A side with more text than this is not read into cells (a cell costs about
# 60 bytes as a Python string): its units are diffed as text instead.
TABLE_MAX_CHARS = 32 * 1024 * 1024


def table_from_units(units: Units, extension: str) -> Table | None:
    """The records of a CSV/TSV view: parsed from ``content.txt`` (a small
    file, shown as it is) or read back from its row units (``rows-*.md``).
    None when the text is not a table the csv module accepts."""
    if len(units) == 1 and units[0][0] == "content.txt":
        try:
            return read_table(units[0][1], extension)
        except csv.Error:
            return None
    columns: list[str] | None = None
    rows: list[list[str]] = []
    for name, text in units:
        if not name.startswith("rows-"):
            return None
        lines = text.split("\n")
        if len(lines) < 2 or not lines[0].startswith("| "):
            return None
        if columns is None:
            columns = _md_cells(lines[0])[1:]
        for line in lines[2:]:
            if line.startswith("| "):
                rows.append(_md_cells(line)[1:])
    if columns is None:
        return None
    width = len(columns)
    rows = [r + [""] * (width - len(r)) for r in rows]
    letters = [column_name(i) for i in range(width)]
    return Table(columns, rows, has_header=columns != letters)


def _md_cells(line: str) -> list[str]:
    """The cells of one row line, as escaped in the unit: cells never hold an
    unescaped '|', so ' | ' only separates them."""
    return line[2:-2].split(" | ")


def table_diff(
    rel: str,
    old: Table | None,
    new: Table | None,
    *,
    old_hash: str | None,
    new_hash: str | None,
    max_lines: int = DEFAULT_MAX_LINES,
    old_rel: str | None = None,
) -> str:
    """A cell-level diff of a CSV/TSV file.  ``None`` is a missing side.

    Columns are matched by header name when both sides have unique names,
    else by position.  Rows are aligned by content (so an inserted row is one
    added row, not a change of every row below it); rows in a changed block
    are paired in order and compared cell by cell::

        data.csv row 12 [amount]: 10 -> 12
        data.csv row 13 (was row 12) [amount]: 10 -> 12
        data.csv row 41 added: id=41; name=Zed; amount=5
        data.csv old row 7 removed: id=7; name=Ann; amount=3
        data.csv rows 100-5099 added (5000 rows, not listed)
        data.csv column added: discount
        data.csv header [C]: amount -> total

    Line endings, quoting and encoding do not count: a CRLF rewrite of the
    same records has no body lines.
    """
    header = diff_header(
        old_rel or rel,
        rel,
        old_hash=old_hash,
        new_hash=new_hash,
        added=old is None,
        deleted=new is None,
    )
    empty = Table([], [], has_header=False)
    body = _table_body(rel, old or empty, new or empty)
    note = "(no cell changes; the file differs in line endings, quoting or encoding)"
    return _finish(header, _or_note(body, note), max_lines)


def _column_pairs(old: Table, new: Table) -> tuple[list[tuple[int, int]], list[str]]:
    """(old index, new index) of the columns both sides have, and the lines
    for the columns only one side has (or whose header changed)."""
    lines: list[str] = []
    by_name = (
        old.has_header
        and new.has_header
        and len(set(old.columns)) == len(old.columns)
        and len(set(new.columns)) == len(new.columns)
    )
    if by_name:
        new_index = {name: j for j, name in enumerate(new.columns)}
        old_names = set(old.columns)
        pairs = [(i, new_index[n]) for i, n in enumerate(old.columns) if n in new_index]
        lines += [f"column removed: {n}" for n in old.columns if n not in new_index]
        lines += [f"column added: {n}" for n in new.columns if n not in old_names]
        return pairs, lines
    shared = min(len(old.columns), len(new.columns))
    for i in range(shared):
        if old.columns[i] != new.columns[i] and (old.has_header or new.has_header):
            lines.append(f"header [{column_name(i)}]: {old.columns[i]} -> {new.columns[i]}")
    lines += [f"column removed: {n}" for n in old.columns[shared:]]
    lines += [f"column added: {n}" for n in new.columns[shared:]]
    return [(i, i) for i in range(shared)], lines


def _table_body(rel: str, old: Table, new: Table) -> Iterator[str]:
    pairs, column_lines = _column_pairs(old, new)
    for line in column_lines:
        yield f"{rel} {line}"
    old_keys = [tuple(row[i] for i, _ in pairs) for row in old.rows]
    new_keys = [tuple(row[j] for _, j in pairs) for row in new.rows]
    for tag, i1, i2, j1, j2 in _opcodes(old_keys, new_keys):
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):
            yield from _row_cells(rel, pairs, new.columns, old, i1 + k, new, j1 + k)
        yield from _rows_block(rel, old, range(i1 + paired, i2), removed=True)
        yield from _rows_block(rel, new, range(j1 + paired, j2), removed=False)


def _row_cells(
    rel: str,
    pairs: list[tuple[int, int]],
    names: list[str],
    old: Table,
    i: int,
    new: Table,
    j: int,
) -> Iterator[str]:
    where = f"row {j + 1}" if i == j else f"row {j + 1} (was row {i + 1})"
    for oi, nj in pairs:
        a, b = old.rows[i][oi], new.rows[j][nj]
        if a != b:
            yield f"{rel} {where} [{names[nj]}]: {a or EMPTY} -> {b or EMPTY}"


def _rows_block(rel: str, table: Table, indices: range, *, removed: bool) -> Iterator[str]:
    if not indices:
        return
    what = "removed" if removed else "added"
    old = "old " if removed else ""
    if len(indices) > LIST_ROWS:
        first, last = indices[0] + 1, indices[-1] + 1
        yield f"{rel} {old}rows {first}-{last} {what} ({len(indices)} rows, not listed)"
        return
    for k in indices:
        cells = "; ".join(f"{n}={v}" for n, v in zip(table.columns, table.rows[k], strict=False))
        yield f"{rel} {old}row {k + 1} {what}: {cells}"
