"""PDF: one unit per page, ``page-0001.md``, text from PyMuPDF, tables as rows.

``page.get_text()`` is MuPDF's fastest text path (several hundred pages per
second per core) and serves pages without tables.  Tables drawn with ruling
lines are rendered as Markdown rows (``| North | 100 | 110 |``) at their
place in the page, the rest of the page's text around them in reading order,
each word once (see ``_grids``).  Every page pays a scan of its content
streams for path operators (about a tenth of the text extraction); a page
that draws paths, one listing of its drawings; a page with a grid of rules
is made from a word extraction instead of the plain one, 2.5 times the cost
of a plain page in all (``python -m bench.pdftables``).  PyMuPDF's own
``find_tables`` is not used: it costs 0.1-0.5 s on a dense page (and about a
second with its ML layout analyser, ``pymupdf_layout``).

Files MuPDF cannot read (a page tree it refuses, no pages found) are read by
pdfminer.six, a second, independent reader; its pages carry a first line
saying so.  So are pages where MuPDF finds no text though their content
stream shows text (``BT`` and a ``Tj``/``TJ``/``'``/``"`` operator; text
placed outside a tiny media box, which MuPDF clips, is one such case): their
text is pdfminer's when pdfminer finds some, each such page keeping its
number and locator.  A file cut short (no end-of-file marker, xref rebuilt) is served
with what can be read, every unit starting with a line that says it is
partial.  A page without text says why (``[swfs: no text on this page (1
image)]``), and a file without any text says so on every page.

MuPDF prints its errors and warnings to stderr by default; they are switched
off here and the one worth showing (why a file does not open) is put in the
ParseFailed reason instead.
"""

from __future__ import annotations

import bisect
import functools
import io
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from parsers._base import (
    EncryptedDocument,
    FileInfo,
    ParseFailed,
    ParseOptions,
    Parser,
    Unit,
    UnitRange,
)
from parsers._common import TextBudget, describe, no_text_note, one_line, quiet

if TYPE_CHECKING:
    import pymupdf

log = logging.getLogger(__name__)

PDF_MAGIC = b"%PDF-"
EOF_MARKER = b"%%EOF"
# Readers accept a header anywhere in the first KiB (some writers prepend junk).
_MAGIC_WINDOW = 1024
# Readers look for %%EOF in the last KiB; without it (and with an xref MuPDF had
# to rebuild) the file was cut short, typically a copy still in progress.
_TAIL_WINDOW = 1024

# Tables (see _grids): a grid needs at least this many horizontal and vertical
# rules (a 2x2 grid has 3 of each; a page frame has 2).  Pages with more drawing
# items than _MAX_DRAWINGS (maps, charts) are not searched for tables.
FIND_TABLES = True
_MIN_RULES = 3
_MAX_DRAWINGS = 3000
_RULE_SLACK = 1.0  # points: a line this far from level (or plumb) is still a rule

# The second reader (see _with_pdfminer and pdfminer_texts): the largest file
# it is tried on, and how long it may take before MuPDF's reason is reported
# instead.
PDFMINER_MAX_BYTES = 64 * 1024 * 1024
PDFMINER_SECONDS = 60.0


def _has_eof_marker(path: str) -> bool:
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - _TAIL_WINDOW))
        return EOF_MARKER in f.read()


@functools.cache
def _mupdf() -> ModuleType:
    """pymupdf, imported on first use (half a second) and told to keep quiet."""
    # The table finder prints a hint to install the layout analyser when absent.
    os.environ.setdefault("PYMUPDF_SUGGEST_LAYOUT_ANALYZER", "0")
    import pymupdf

    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.mupdf_display_warnings(False)
    return pymupdf


def _reason(exc: BaseException) -> str:
    """MuPDF's own complaint (``code=8: invalid key in dict``) beats the wrapper's text."""
    cause = exc.__cause__ or exc
    text = describe(cause)
    if text.startswith("code="):
        text = text.partition(": ")[2] or text
    warnings = _mupdf().TOOLS.mupdf_warnings(reset=True)
    lines = [w for w in warnings.splitlines() if w.strip() and not w.startswith("...")]
    first = lines[0] if lines else ""
    if first and first not in text:
        text = f"{text} ({first})"
    return one_line(text)


class _MupdfRefused(Exception):
    """MuPDF cannot give pages for this file; the reason is the message."""


class _SlowReader(Exception):
    """pdfminer.six ran past PDFMINER_SECONDS."""


@dataclass
class _Page:
    text: str
    images: int
    # No text found, though the page's content stream shows some (_TEXT_SHOWN).
    shows_text: bool = False


# pdfminer's text of pages ``wanted`` (1-based) of a file MuPDF counts ``count``
# pages in: ``(path, wanted, count) -> {page: text}`` (pdfminer_texts).
SecondReader = Callable[[str, set[int], int], dict[int, str]]


class PdfParser(Parser):
    """``second_reader``: reads the pages where MuPDF found no text though
    their content shows some (``pdfminer_texts``, pdfminer.six)."""

    id = "pdf"
    version = 3
    priority = 50.0

    extensions: ClassVar[frozenset[str]] = frozenset({".pdf"})

    def __init__(self, second_reader: SecondReader | None = None) -> None:
        self.second_reader: SecondReader = second_reader or pdfminer_texts

    def accepts(self, info: FileInfo) -> bool:
        if info.extension in self.extensions or info.head.startswith(PDF_MAGIC):
            return True
        # A header after some junk only counts without an extension: a text file
        # that merely mentions "%PDF-" must stay text.
        return not info.extension and PDF_MAGIC in info.head[:_MAGIC_WINDOW]

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.size == 0:
            raise ParseFailed("broken PDF: empty file")
        try:
            return self._with_mupdf(path, options)
        except _MupdfRefused as refused:
            partial = "" if _has_eof_marker(path) else "truncated PDF (no end-of-file marker)"
            return _with_pdfminer(path, options, why=str(refused), partial=partial)

    def _with_mupdf(self, path: str, options: ParseOptions) -> list[Unit]:
        mupdf = _mupdf()
        mupdf.TOOLS.reset_mupdf_warnings()
        try:
            doc = mupdf.open(path, filetype="pdf")
        except Exception as exc:  # MuPDF raises several types for unreadable input
            raise _MupdfRefused(_reason(exc)) from exc
        try:
            if doc.needs_pass:
                raise EncryptedDocument("encrypted PDF: password required")
            partial = ""
            if doc.is_repaired and not _has_eof_marker(path):
                partial = "truncated PDF (no end-of-file marker)"
            if doc.page_count == 0:
                if partial:
                    raise _MupdfRefused(f"{partial}: no page could be read")
                raise _MupdfRefused("no pages" + (" (damaged)" if doc.is_repaired else ""))
            return self._pages(doc, options, partial=partial, path=path)
        except (ParseFailed, _MupdfRefused, MemoryError, RecursionError):
            raise
        except Exception as exc:
            raise _MupdfRefused(_reason(exc)) from exc
        finally:
            doc.close()

    def _pages(
        self, doc: pymupdf.Document, options: ParseOptions, *, partial: str, path: str
    ) -> list[Unit]:
        count = doc.page_count
        if count > options.max_pages:
            raise ParseFailed(f"too many pages (>{options.max_pages})")
        budget = TextBudget(options.max_text_bytes)
        pages = [_read_page(doc, number, budget) for number in range(1, count + 1)]
        log.debug("pdf: %d pages", count)
        _second_reading(path, pages, budget, self.second_reader)
        return _units(pages, partial=partial)

    def parse_range(
        self,
        path: str,
        info: FileInfo,
        options: ParseOptions,
        *,
        start: int,
        stop: int,
        threshold: int,
    ) -> UnitRange | None:
        """Pages ``start + 1`` to ``stop`` of a PDF of more than ``threshold``
        pages that MuPDF reads as sound (opened without repair, no password):
        each such page's unit is what ``parse`` gives it when some page has
        text.  Anything else (the second reader, a partial file, a file of no
        text) is left to ``parse``, which alone knows the whole file."""
        if info.size == 0:
            return None
        mupdf = _mupdf()
        mupdf.TOOLS.reset_mupdf_warnings()
        try:
            doc = mupdf.open(path, filetype="pdf")
        except Exception:  # parse() says why, or reads it with pdfminer
            return None
        try:
            count = doc.page_count
            if doc.needs_pass or doc.is_repaired or not threshold < count <= options.max_pages:
                return None
            start, stop = max(0, start), min(stop, count)
            budget = TextBudget(options.max_text_bytes)
            pages = [_read_page(doc, number, budget) for number in range(start + 1, stop + 1)]
            if doc.is_repaired:  # repaired while its pages were read: parse() decides
                return None
            if any(p.shows_text for p in pages):  # the second reader's: parse() decides
                return None
        finally:
            doc.close()
        return UnitRange(
            names=tuple((_page_name(n), f"page={n}") for n in range(1, count + 1)),
            start=start,
            units=tuple(
                _page_unit(number, page, "") for number, page in enumerate(pages, start + 1)
            ),
            blank=tuple(not p.text.strip() for p in pages),
            chars=budget.used,
        )


def _read_page(doc: pymupdf.Document, number: int, budget: TextBudget) -> _Page:
    """Page ``number`` (1-based): its text and, when it has none, its image count."""
    # A page that cannot be loaded means a broken page tree (the page
    # numbers after it cannot be trusted): that fails the document.  A
    # page whose content cannot be read only loses its own text.
    page = doc.load_page(number - 1)
    try:
        text = _page_text(page)
    except Exception as exc:
        text = f"[swfs: page {number} could not be read: {_reason(exc)}]\n"
    budget.add(text)
    if text.strip():
        return _Page(text, 0)
    return _Page(text, _image_count(page), shows_text=_shows_text(page))


# Text objects and text-showing operators in a content stream.  A string
# operand can hold these bytes too; that only costs a try of the second reader.
_TEXT_OBJECT = re.compile(rb"(?:^|\s)BT(?=\s|$)")
_TEXT_SHOW = re.compile(rb"(?:Tj|TJ|'|\")(?=\s|$)")


def _shows_text(page: pymupdf.Page) -> bool:
    """Whether the page's own content streams show text (a text object with
    a text-showing operator in it)."""
    doc = page.parent
    try:
        for xref in page.get_contents():
            data = doc.xref_stream(xref) or b""
            if _TEXT_OBJECT.search(data) and _TEXT_SHOW.search(data):
                return True
    except Exception:  # a broken stream: MuPDF's empty page stands
        return False
    return False


def _second_reading(
    path: str, pages: list[_Page], budget: TextBudget, reader: SecondReader
) -> None:
    """Pages where MuPDF found no text though their content shows some get
    pdfminer's text, when it finds any; the others are left as they are.
    pdfminer must count the same pages as MuPDF, else its page numbers
    cannot be trusted and nothing changes."""
    wanted = {n for n, page in enumerate(pages, start=1) if page.shows_text}
    if not wanted or os.path.getsize(path) > PDFMINER_MAX_BYTES:
        return
    try:
        found = reader(path, wanted, len(pages))
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:  # pdfminer's failure keeps MuPDF's pages
        log.debug("pdf: second reader on pages without text: %s", describe(exc))
        return
    for number, text in found.items():
        if text.strip():
            note = "[swfs: text read by pdfminer.six: MuPDF found none on this page]\n"
            pages[number - 1] = _Page(note + budget.add(text), 0)


def _page_name(number: int) -> str:
    return f"page-{number:04d}.md"


def _page_unit(number: int, page: _Page, head: str) -> Unit:
    """A page's unit in a file where some page has text."""
    text = page.text
    if not text.strip():
        what = f"{_count(page.images, 'image')}" if page.images else "blank page"
        text = f"[swfs: no text on this page ({what})]\n"
    return Unit(_page_name(number), head + text, f"page={number}")


def _units(pages: list[_Page], *, partial: str = "", reader: str = "") -> list[Unit]:
    """Page units with the notes a reader needs: which reader, partial, no text."""
    head = ""
    if reader:
        head += f"[swfs: {reader}]\n"
    if partial:
        blank = sum(1 for p in pages if not p.text.strip())
        missing = f"; {blank} of {len(pages)} pages have no text" if blank else ""
        head += f"[swfs: partial: {partial}; showing what could be read{missing}]\n"
    if not any(p.text.strip() for p in pages):
        images = sum(p.images for p in pages)
        note = no_text_note(f"{_count(len(pages), 'page')}, {_count(images, 'image')}")
        return [Unit(_page_name(n), head + note, f"page={n}") for n in range(1, len(pages) + 1)]
    return [_page_unit(number, page, head) for number, page in enumerate(pages, start=1)]


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _image_count(page: pymupdf.Page) -> int:
    try:
        return len(page.get_images(full=False))
    except Exception:  # a broken resource dictionary: no count, not a failure
        return 0


# -- tables --------------------------------------------------------------------------------

# A ruled table is found from the page's vector drawings: horizontal and
# vertical rules (stroked lines, thin filled rectangles, rectangle sides) that
# cross each other form a grid; its row and column boundaries are the rules'
# positions, and each word goes to the cell its centre falls in.  This is the
# idea of PyMuPDF's line-based ``find_tables`` (after pdfplumber), done over
# words instead of characters: ``find_tables`` builds one Python object per
# character and costs 0.1-0.5 s on a dense page, this costs about one more
# text extraction.  Merged cells keep their text in the column it sits in.

_SNAP = 3.0  # points: rules this close are one; a rectangle this thin is a rule
_MAX_PAIRS = 250_000  # rule pairs checked for crossings: beyond it, not a table page

Rule = tuple[float, float, float]  # position, start, end (y, x0, x1 or x, y0, y1)


# Path operators in a content stream: a rectangle, a line segment, or an
# XObject (a form may hold the drawings).  Text strings can match too; that
# only costs a listing of the drawings.
_PATH_OPS = re.compile(rb"\s(re|l|Do)(?=\s|$)")
_MIN_PATH_OPS = 2  # two rectangles are 4 + 4 sides; fewer ops draw no grid


def _may_hold_table(page: pymupdf.Page) -> bool:
    """Whether the page's own content streams draw enough to hold a grid, read
    from their raw operators: six times cheaper than listing the drawings,
    which interprets the whole page (text included)."""
    doc = page.parent
    seen = 0
    for xref in page.get_contents():
        data = doc.xref_stream(xref) or b""
        for match in _PATH_OPS.finditer(data):
            if match[1] == b"Do":
                return True
            seen += 1
            if seen >= _MIN_PATH_OPS:
                return True
    return False


def _page_text(page: pymupdf.Page) -> str:
    """The page's text; with its ruled tables as rows when it has any (then
    made from the page's words alone, without the plain extraction)."""
    if FIND_TABLES and _may_hold_table(page):
        try:
            grids = _grids(page)
            text = _text_with_tables(page, grids) if grids else ""
            if text:
                return text
        except Exception as exc:  # tables are an extra; their failure keeps the plain text
            log.debug("pdf: table detection failed: %s", exc)
    plain: str = page.get_text()
    return plain


def _rules(page: pymupdf.Page) -> tuple[list[Rule], list[Rule]] | None:
    """Horizontal and vertical rules drawn on the page; None when there are too
    many drawings to be a page of tables (maps, charts)."""
    drawings = page.get_cdrawings()
    if len(drawings) > _MAX_DRAWINGS:
        return None
    horizontal: list[Rule] = []
    vertical: list[Rule] = []
    for path in drawings:
        for item in path.get("items", ()):
            if item[0] == "l":
                (ax, ay), (bx, by) = item[1], item[2]
                if abs(ay - by) <= _RULE_SLACK:
                    horizontal.append(((ay + by) / 2, min(ax, bx), max(ax, bx)))
                elif abs(ax - bx) <= _RULE_SLACK:
                    vertical.append(((ax + bx) / 2, min(ay, by), max(ay, by)))
            elif item[0] == "re":
                x0, y0, x1, y1 = item[1]
                x0, x1 = min(x0, x1), max(x0, x1)
                y0, y1 = min(y0, y1), max(y0, y1)
                if y1 - y0 <= _SNAP:
                    horizontal.append(((y0 + y1) / 2, x0, x1))
                elif x1 - x0 <= _SNAP:
                    vertical.append(((x0 + x1) / 2, y0, y1))
                else:
                    horizontal += [(y0, x0, x1), (y1, x0, x1)]
                    vertical += [(x0, y0, y1), (x1, y0, y1)]
    return horizontal, vertical


def _merge(rules: list[Rule]) -> list[Rule]:
    """Collinear rules that touch or overlap, joined (cells drawn one by one)."""
    out: list[Rule] = []
    cluster: list[Rule] = []
    for rule in sorted(rules):
        if cluster and rule[0] - cluster[0][0] > _SNAP:
            out += _join(cluster)
            cluster = []
        cluster.append(rule)
    return out + _join(cluster)


def _join(cluster: list[Rule]) -> list[Rule]:
    """Rules at (about) one position: overlapping spans merged."""
    if not cluster:
        return []
    pos = cluster[0][0]
    out: list[Rule] = []
    for _, a, b in sorted(cluster, key=lambda r: r[1]):
        if out and a <= out[-1][2] + _SNAP:
            out[-1] = (pos, out[-1][1], max(out[-1][2], b))
        else:
            out.append((pos, a, b))
    return out


def _positions(values: list[float]) -> list[float]:
    """Sorted values with those within _SNAP of the previous one dropped."""
    out: list[float] = []
    for v in sorted(values):
        if not out or v - out[-1] > _SNAP:
            out.append(v)
    return out


@dataclass
class _Grid:
    """Row and column boundaries of one grid of rules.  A column boundary only
    splits the rows its rule crosses: where a rule stops (merged cells, a
    paragraph running across a form), the text stays in one cell."""

    xs: list[float]  # column boundaries, left to right
    ys: list[float]  # row boundaries, top to bottom
    vertical: list[Rule]  # the vertical rules (x, y0, y1)
    _splits: dict[int, list[int]] = field(default_factory=dict)

    def cell(self, x: float, y: float) -> tuple[int, int] | None:
        if not (self.xs[0] <= x <= self.xs[-1] and self.ys[0] <= y <= self.ys[-1]):
            return None
        row = min(bisect.bisect_right(self.ys, y) - 1, len(self.ys) - 2)
        splits = self._row_splits(row)
        col = splits[bisect.bisect_right(splits, bisect.bisect_right(self.xs, x) - 1) - 1]
        return row, min(col, len(self.xs) - 2)

    def _row_splits(self, row: int) -> list[int]:
        """Indices into ``xs`` of the boundaries whose rules cross ``row``."""
        splits = self._splits.get(row)
        if splits is None:
            middle = (self.ys[row] + self.ys[row + 1]) / 2
            found = {0, len(self.xs) - 1}
            for x, y0, y1 in self.vertical:
                if y0 - _SNAP <= middle <= y1 + _SNAP:
                    k = min(range(len(self.xs)), key=lambda i: abs(self.xs[i] - x))
                    found.add(k)
            splits = self._splits[row] = sorted(found)
        return splits


def _grids(page: pymupdf.Page) -> list[_Grid]:
    """Grids of crossing rules with at least two rows and two columns."""
    found = _rules(page)
    if found is None:
        return []
    horizontal, vertical = _merge(found[0]), _merge(found[1])
    if len(horizontal) < _MIN_RULES or len(vertical) < _MIN_RULES:
        return []
    if len(horizontal) * len(vertical) > _MAX_PAIRS:
        return []
    # Connected components of crossing rules (union-find over both lists).
    parent = list(range(len(horizontal) + len(vertical)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (y, x0, x1) in enumerate(horizontal):
        for j, (x, y0, y1) in enumerate(vertical):
            if x0 - _SNAP <= x <= x1 + _SNAP and y0 - _SNAP <= y <= y1 + _SNAP:
                parent[root(i)] = root(len(horizontal) + j)
    groups: dict[int, tuple[list[Rule], list[float]]] = {}
    for i, (y, _, _) in enumerate(horizontal):
        groups.setdefault(root(i), ([], []))[1].append(y)
    for j, rule in enumerate(vertical):
        groups.setdefault(root(len(horizontal) + j), ([], []))[0].append(rule)
    grids = []
    for rules, ys in groups.values():
        xs, ys = _positions([x for x, _, _ in rules]), _positions(ys)
        if len(xs) >= _MIN_RULES and len(ys) >= _MIN_RULES:
            grids.append(_Grid(xs, ys, rules))
    return grids


def _text_with_tables(page: pymupdf.Page, grids: list[_Grid]) -> str:
    """The page's text with each grid's words as Markdown rows, placed where
    the grid's first word comes in MuPDF's reading order; the other lines as
    ``get_text`` gives them (words joined by one space).  Empty if no grid
    holds at least two rows and two columns with text."""
    words = page.get_text("words", flags=_mupdf().TEXTFLAGS_WORDS)
    # Items in reading order: ("line", key) or ("table", grid index).
    order: list[tuple[str, object]] = []
    lines: dict[object, list[str]] = {}
    cells: list[dict[tuple[int, int], list[str]]] = [{} for _ in grids]
    placed: set[int] = set()
    for x0, y0, x1, y1, word, block, line, _ in words:
        cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
        for g, grid in enumerate(grids):
            where = grid.cell(cx, cy)
            if where is not None:
                cells[g].setdefault(where, []).append(word)
                if g not in placed:
                    placed.add(g)
                    order.append(("table", g))
                break
        else:
            key = (block, line)
            if key not in lines:
                lines[key] = []
                order.append(("line", key))
            lines[key].append(word)
    tables = {g: _table_rows(cells[g]) for g in placed}
    if not any(len(rows) >= 2 and len(rows[0]) >= 2 for rows in tables.values()):
        return ""
    out: list[str] = []
    for kind, ref in order:
        if kind == "line":
            out.append(" ".join(lines[ref]) + "\n")
            continue
        assert isinstance(ref, int)
        rows = tables[ref]
        if len(rows) >= 2 and len(rows[0]) >= 2:
            out.append(_markdown(rows))
        else:  # a framed paragraph, not a table: its words as lines
            out.extend(" ".join(c for c in row if c) + "\n" for row in rows)
    return "".join(out)


def _table_rows(cells: dict[tuple[int, int], list[str]]) -> list[list[str]]:
    """Cell texts by row, without rows and columns that are empty throughout
    (double rules, padding columns).  Two neighbouring columns that no row has
    text in both of are one column split by an inset rule (a shaded header
    cell drawn inside the grid): they are joined."""
    rows = sorted({r for r, _ in cells})
    cols = sorted({c for _, c in cells})
    filled = {c: {r for r, c2 in cells if c2 == c} for c in cols}
    groups: list[list[int]] = []
    for c in cols:
        if groups and len(groups[-1]) == 1 and not filled[groups[-1][0]] & filled[c]:
            groups[-1].append(c)
        else:
            groups.append([c])
    return [
        [" ".join(w for c in group for w in cells.get((r, c), ())) for group in groups]
        for r in rows
    ]


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").strip()


def _markdown(rows: list[list[str]]) -> str:
    """A Markdown table, its first row as the header row, then a blank line."""
    width = len(rows[0])
    lines = ["| " + " | ".join(_cell(c) for c in rows[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[1:]]
    return "\n".join(lines) + "\n\n"


# -- the second reader ---------------------------------------------------------------------


def _with_pdfminer(path: str, options: ParseOptions, *, why: str, partial: str) -> list[Unit]:
    """Pages read by pdfminer.six after MuPDF gave none; ParseFailed with MuPDF's
    reason when pdfminer finds no page or no text either (a cyclic page tree
    is better reported as MuPDF saw it than as an empty page).  pdfminer is
    pure Python, 23 times slower than MuPDF on a 46-page spec: it is not tried on
    files over PDFMINER_MAX_BYTES and gives up after PDFMINER_SECONDS, so
    the reason stays MuPDF's rather than the worker's timeout."""
    if os.path.getsize(path) > PDFMINER_MAX_BYTES:
        raise ParseFailed(f"broken PDF: {why}")
    try:
        pages = _pdfminer_pages(path, options)
    except (ParseFailed, MemoryError, RecursionError):
        raise
    except _SlowReader as exc:
        raise ParseFailed(f"broken PDF: {why}") from exc
    except Exception as exc:
        log.debug("pdf: pdfminer failed too: %s", exc)
        raise ParseFailed(f"broken PDF: {why}") from exc
    if not pages or not any(p.text.strip() for p in pages):
        raise ParseFailed(f"broken PDF: {why}")
    reader = f"read by pdfminer.six: MuPDF could not read this file ({why})"
    return _units(pages, reader=reader, partial=partial)


def _pdfminer_pages(path: str, options: ParseOptions) -> list[_Page]:
    from pdfminer.converter import TextConverter
    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument, PDFPasswordIncorrect
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    budget = TextBudget(options.max_text_bytes)
    pages: list[_Page] = []
    # pdfminer logs every oddity it recovers from at WARNING: noise in a worker.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    with quiet(), open(path, "rb") as f:
        try:
            document = PDFDocument(PDFParser(f))
        except PDFPasswordIncorrect as exc:
            raise EncryptedDocument("encrypted PDF: password required") from exc
        resources = PDFResourceManager()
        out = io.StringIO()
        device = TextConverter(resources, out, laparams=LAParams())
        interpreter = PDFPageInterpreter(resources, device)
        started = time.monotonic()
        for page in PDFPage.create_pages(document):
            if time.monotonic() - started > PDFMINER_SECONDS:
                raise _SlowReader
            if len(pages) >= options.max_pages:
                raise ParseFailed(f"too many pages (>{options.max_pages})")
            out.seek(0)
            out.truncate()
            try:
                interpreter.process_page(page)
                text = out.getvalue().replace("\f", "")
            except Exception as exc:
                text = f"[swfs: page {len(pages) + 1} could not be read: {describe(exc)}]\n"
            text = text.strip("\n")
            text = text + "\n" if text.strip() else ""
            budget.add(text)
            images = sum(1 for v in _xobjects(page) if v == "Image")
            pages.append(_Page(text, images))
        device.close()
    return pages


def pdfminer_texts(path: str, wanted: set[int], count: int) -> dict[int, str]:
    """pdfminer's text of pages ``wanted`` (1-based) of a file MuPDF counts
    ``count`` pages in; {} when pdfminer counts otherwise or runs past
    PDFMINER_SECONDS."""
    from pdfminer.converter import TextConverter
    from pdfminer.layout import LAParams
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage
    from pdfminer.pdfparser import PDFParser

    logging.getLogger("pdfminer").setLevel(logging.ERROR)
    found: dict[int, str] = {}
    seen = 0
    with quiet(), open(path, "rb") as f:
        document = PDFDocument(PDFParser(f))
        resources = PDFResourceManager()
        out = io.StringIO()
        device = TextConverter(resources, out, laparams=LAParams())
        interpreter = PDFPageInterpreter(resources, device)
        started = time.monotonic()
        for seen, page in enumerate(PDFPage.create_pages(document), start=1):
            if seen > count or time.monotonic() - started > PDFMINER_SECONDS:
                return {}
            if seen not in wanted:
                continue
            out.seek(0)
            out.truncate()
            try:
                interpreter.process_page(page)
            except Exception as exc:
                log.debug("pdf: pdfminer, page %d: %s", seen, describe(exc))
                continue
            text = out.getvalue().replace("\f", "").strip("\n")
            if text.strip():
                found[seen] = text + "\n"
        device.close()
    return found if seen == count else {}


def _xobjects(page: Any) -> list[str]:
    """The subtypes of a pdfminer page's XObjects (for the image count)."""
    from pdfminer.pdftypes import resolve1

    try:
        xobjects = resolve1(resolve1(page.resources).get("XObject", {}))
        return [str(getattr(resolve1(v).get("Subtype"), "name", "")) for v in xobjects.values()]
    except Exception:
        return []
