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
    index <old hash8>..<new hash8>  (00000000 for a missing side)

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
arrow inside a side cannot be mistaken for the change.  Sheet names that need
it are quoted as in the parsed units (``'It''s'!A1``).

Rows are aligned by their content, ignoring the row number (and formulas
compared relative to their own row), so inserting or deleting rows is one
summary line, not a change of every cell below::

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

**Binaries** (``binary_line``): ``Binary files a/x and b/x differ (1200 -> 1350
bytes, b3:1a2b3c4d -> b3:9f8e7d6c)``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

log = logging.getLogger(__name__)

DEFAULT_MAX_LINES = 2000
# Up to this many cells of an inserted/deleted block or sheet are listed one
# by one; more are only counted.
LIST_CELLS = 20
FILE_MODE = "100644"
EMPTY = "(empty)"
NO_HASH = "00000000"

Units = Sequence[tuple[str, str]]


# -- shared pieces


def short_hash(h: str | None) -> str:
    return h[:8] if h else NO_HASH


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
    lines.append(f"index {short_hash(old_hash)}..{short_hash(new_hash)}")
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


def _hunks(old: list[str], new: list[str], context: int) -> Iterator[str]:
    """The hunks (from the first '@@' on) of a unified diff of two line lists."""
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
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
    if old_lines == new_lines and old_text is not None and new_text is not None:
        return _finish(header, (), max_lines)
    old_name = old_rel if old_rel is not None else new_rel
    new_name = new_rel if new_rel is not None else old_rel
    header.append("--- /dev/null" if old_text is None else f"--- a/{old_name}")
    header.append("+++ /dev/null" if new_text is None else f"+++ b/{new_name}")
    return _finish(header, _hunks(old_lines, new_lines, context), max_lines)


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
    hashes = f"{_b3(old_hash)} -> {_b3(new_hash)}"
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


def _b3(h: str | None) -> str:
    return f"b3:{h[:8]}" if h else "none"


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
    matcher = SequenceMatcher(None, [t for _, t in old], [t for _, t in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
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


@dataclass(frozen=True)
class Cell:
    """One non-empty cell as the xlsx parser writes it: a plain value, or a
    formula (with its leading '=') and the cached value if the file has one."""

    value: str | None
    formula: str | None = None

    def render(self) -> str:
        if self.formula is None:
            return self.value if self.value is not None else ""
        if self.value is None:
            return self.formula
        return f"{self.formula} -> {self.value}"


_SHEET_PLAIN = re.compile(r"[A-Za-z0-9_.]+")
_CELL_LINE = re.compile(
    r"^(?:'(?:[^'\n]|'')*'|[A-Za-z0-9_.]+)!([A-Z]{1,3})([0-9]+) = (.*)$", re.MULTILINE
)
# A1 references inside a formula: not part of a name (LOG10), not a sheet
# name (Q1!A1), not a function call.
_REF = re.compile(r"(?<![A-Za-z0-9_.$])(\$?)([A-Z]{1,3})(\$?)([0-9]+)(?![0-9A-Za-z_(!])")


# column number -> the cell's text after ' = ', parsed into a Cell only where
# needed: most rows of a big sheet are compared as strings and never rendered.
Row = dict[int, str]


def sheet_ref(name: str) -> str:
    """A sheet name as a cell address prefix, quoted the way the parser does."""
    if _SHEET_PLAIN.fullmatch(name):
        return name
    return "'" + name.replace("'", "''") + "'"


def _split_formula(rest: str) -> tuple[str, str | None]:
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
def _cell(rest: str) -> Cell:
    if rest.startswith("="):
        formula, cached = _split_formula(rest)
        return Cell(value=cached, formula=formula)
    return Cell(value=rest)


def parse_cell_lines(text: str) -> dict[str, Cell]:
    """The cells of one sheet unit, by A1 address ('B12').  Lines that are not
    cell lines (headers, blank lines) are skipped."""
    return {m[1] + m[2]: _cell(m[3].rstrip("\r")) for m in _CELL_LINE.finditer(text)}


def _parse_rows(text: str) -> dict[int, Row]:
    rows: dict[int, Row] = {}
    for m in _CELL_LINE.finditer(text):
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


def _same(a: Cell | None, a_row: int, b: Cell | None, b_row: int) -> bool:
    if a is None or b is None:
        return a is b
    return a.value == b.value and _relative(a.formula, a_row) == _relative(b.formula, b_row)


def _signature(row: int, cells: Row) -> tuple[tuple[int, str | None, str | None], ...]:
    sig = []
    for col, raw in sorted(cells.items()):
        if raw.startswith("="):
            c = _cell(raw)
            sig.append((col, c.value, _relative(c.formula, row)))
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


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted row numbers as runs of consecutive rows: [(first, last), ...]."""
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


class _SheetDiff:
    """Cell changes of one sheet present on both sides."""

    def __init__(self, ref: str, old: dict[int, Row], new: dict[int, Row]) -> None:
        self.ref = ref
        self.old = old
        self.new = new

    def lines(self) -> Iterator[str]:
        old_rows = sorted(self.old)
        new_rows = sorted(self.new)
        ops = self._align(old_rows, new_rows)
        # The row shift (new row - old row) of the aligned rows before and
        # after each block tells inserted rows (it grows) from edited ones.
        shift = 0
        for n, (tag, i1, i2, j1, j2) in enumerate(ops):
            if tag == "equal":
                shift = new_rows[j2 - 1] - old_rows[i2 - 1]
                continue
            after = shift
            for later in ops[n + 1 :]:
                if later[0] == "equal":
                    after = new_rows[later[3]] - old_rows[later[1]]
                    break
            yield from self._block(old_rows[i1:i2], new_rows[j1:j2], shift, after)

    def _align(
        self, old_rows: list[int], new_rows: list[int]
    ) -> list[tuple[str, int, int, int, int]]:
        """Opcodes (as SequenceMatcher's) aligning the non-empty rows.

        Rows that are identical at the start and the end are matched first:
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
        matcher = SequenceMatcher(
            None,
            [_signature(r, self.old[r]) for r in o_mid],
            [_signature(r, self.new[r]) for r in n_mid],
            autojunk=False,
        )
        ops: list[tuple[str, int, int, int, int]] = []
        if head:
            ops.append(("equal", 0, head, 0, head))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            ops.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
        if tail:
            ops.append(
                ("equal", len(old_rows) - tail, len(old_rows), len(new_rows) - tail, len(new_rows))
            )
        return ops

    def _block(
        self, old_rows: list[int], new_rows: list[int], before: int, after: int
    ) -> Iterator[str]:
        free = set(new_rows)
        pairs: list[tuple[int, int]] = []
        lone_old: list[int] = []
        for r in old_rows:
            for s in dict.fromkeys((before, after)):
                if r + s in free:
                    free.discard(r + s)
                    pairs.append((r, r + s))
                    break
            else:
                lone_old.append(r)
        lone_new = [r for r in new_rows if r in free]

        for first, last in _runs(lone_old):
            yield from self._removed_run(first, last, shifting=after < before, shifted=before != 0)
        items: list[tuple[int, int, list[str]]] = []
        for ro, rn in pairs:
            items.append((rn, 0, list(self._row_changes(ro, rn))))
        for first, last in _runs(lone_new):
            items.append((first, 1, list(self._added_run(first, last, shifting=after > before))))
        for _, _, lines in sorted(items, key=lambda item: (item[0], item[1])):
            yield from lines

    def _addr(self, col: int, row: int) -> str:
        return f"{self.ref}!{_col_letters(col)}{row}"

    def _row_changes(self, ro: int, rn: int) -> Iterator[str]:
        old = self.old[ro]
        new = self.new[rn]
        for col in sorted(old.keys() | new.keys()):
            raw_a, raw_b = old.get(col), new.get(col)
            if raw_a == raw_b and ro == rn:
                continue
            a = None if raw_a is None else _cell(raw_a)
            b = None if raw_b is None else _cell(raw_b)
            if _same(a, ro, b, rn):
                continue
            addr = self._addr(col, rn)
            if ro != rn:
                addr += f" (was {_col_letters(col)}{ro})"
            yield _change(addr, a, b)

    def _run_cells(
        self, rows: dict[int, Row], first: int, last: int
    ) -> list[tuple[int, int, Cell]]:
        return [
            (r, col, _cell(raw))
            for r in range(first, last + 1)
            for col, raw in sorted(rows.get(r, {}).items())
        ]

    def _added_run(self, first: int, last: int, *, shifting: bool) -> Iterator[str]:
        cells = self._run_cells(self.new, first, last)
        n = last - first + 1
        listed = len(cells) <= LIST_CELLS
        span = f"rows {first}-{last}" if n > 1 else f"row {first}"
        if shifting:
            more = "" if listed else f", {_plural(len(cells), 'cell')} not listed"
            yield f"{self.ref}: {_plural(n, 'row')} inserted at row {first} ({span}){more}"
        elif not listed:
            yield f"{self.ref}: {span}: {_plural(len(cells), 'cell')} added, not listed"
        if listed:
            for r, col, cell in cells:
                yield _change(self._addr(col, r), None, cell)

    def _removed_run(
        self, first: int, last: int, *, shifting: bool, shifted: bool
    ) -> Iterator[str]:
        cells = self._run_cells(self.old, first, last)
        n = last - first + 1
        listed = len(cells) <= LIST_CELLS
        span = f"old rows {first}-{last}" if n > 1 else f"old row {first}"
        if shifting:
            more = "" if listed else f", {_plural(len(cells), 'cell')} not listed"
            yield f"{self.ref}: {_plural(n, 'row')} deleted at row {first} ({span}){more}"
        elif not listed:
            yield f"{self.ref}: {span}: {_plural(len(cells), 'cell')} removed, not listed"
        if listed:
            mark = " (old)" if shifting or shifted else ""
            for r, col, cell in cells:
                yield _change(self._addr(col, r) + mark, cell, None)


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
        sheet = _SheetDiff(sheet_ref(name), _parse_rows(old_text), _parse_rows(text))
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
