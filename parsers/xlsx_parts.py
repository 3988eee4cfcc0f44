"""The parts of an OOXML workbook that openpyxl's read-only mode leaves out.

Read straight from the zip with ElementTree, after ``zipguard`` has refused
DOCTYPEs (so no entity can expand) and bounded the sizes: the sheet list
with each sheet's state and kind, defined names, comments (notes) with their
cell, and charts (chart sheets and charts drawn on worksheets) with their
title, series and categories from the values cached in the chart part.

Names are matched by local name, so transitional and strict OOXML both read.
Strict workbooks are also rewritten to transitional namespaces for openpyxl,
which knows only those (``transitional_copy``).
"""

from __future__ import annotations

import logging
import posixpath
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from xml.etree import ElementTree

from parsers import cells
from parsers._base import ParseFailed
from parsers._ooxml import WORKBOOK_MAIN, main_part

log = logging.getLogger(__name__)

# Parts read whole into memory; larger comment or chart parts are skipped.
MAX_PART_BYTES = 64 * 1024 * 1024
# Points of one chart series shown; more are counted.
MAX_POINTS = 200

_STRICT = re.compile(
    rb"http://purl\.oclc\.org/ooxml/(officeDocument|spreadsheetml|drawingml)/(\w+)"
)
_STRICT_MARK = b"http://purl.oclc.org/ooxml/spreadsheetml/main"


@dataclass(frozen=True)
class SheetEntry:
    name: str
    state: str  # visible, hidden, veryHidden
    kind: str  # worksheet, chartsheet, dialogsheet, macrosheet
    part: str | None  # zip member name, None when the relationship is broken


@dataclass(frozen=True)
class DefinedName:
    name: str
    text: str
    sheet: int | None  # index of the sheet the name is local to
    hidden: bool


@dataclass
class Package:
    sheets: list[SheetEntry] = field(default_factory=list)
    names: list[DefinedName] = field(default_factory=list)
    strict: bool = False


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _attr(el: ElementTree.Element, name: str) -> str | None:
    """An attribute by local name, namespaced or not (r:id)."""
    for key, value in el.attrib.items():
        if _local(key) == name:
            return value
    return None


def _resolve(base: str, target: str) -> str:
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), target))


def _rels_path(part: str) -> str:
    return posixpath.join(posixpath.dirname(part), "_rels", posixpath.basename(part) + ".rels")


def _read(zf: zipfile.ZipFile, name: str) -> ElementTree.Element | None:
    try:
        info = zf.getinfo(name)
    except KeyError:
        return None
    if info.file_size > MAX_PART_BYTES:
        log.debug("%s: %d bytes, skipped", name, info.file_size)
        return None
    return ElementTree.fromstring(zf.read(info))


def _rels(zf: zipfile.ZipFile, part: str) -> list[tuple[str, str, str]]:
    """(id, type suffix, target part) of a part's relationships."""
    root = _read(zf, _rels_path(part))
    out = []
    for rel in root if root is not None else ():
        target = rel.get("Target")
        if target is None or rel.get("TargetMode") == "External":
            continue
        kind = (rel.get("Type") or "").rsplit("/", 1)[-1]
        out.append((rel.get("Id") or "", kind, _resolve(part, target)))
    return out


def read_package(zf: zipfile.ZipFile) -> Package:
    pkg = Package()
    # The workbook found by its content type where _rels/.rels is broken.
    book = main_part(zf, WORKBOOK_MAIN) or "xl/workbook.xml"
    raw = zf.read(book) if book in zf.namelist() else b""
    pkg.strict = _STRICT_MARK in raw[:4096]
    root = ElementTree.fromstring(raw) if raw else None
    if root is None:
        return pkg
    count = sum(1 for el in root.iter() if _local(el.tag) == "sheet")
    if count > cells.MAX_SHEETS:  # before resolving a relationship per sheet
        raise ParseFailed(f"too many sheets ({count} > {cells.MAX_SHEETS})")
    targets = {rid: (kind, target) for rid, kind, target in _rels(zf, book)}
    for el in root.iter():
        tag = _local(el.tag)
        if tag == "sheet":
            kind, part = targets.get(_attr(el, "id") or "", ("worksheet", None))
            state = el.get("state") or "visible"
            pkg.sheets.append(SheetEntry(el.get("name") or "", state, kind, part))
        elif tag == "definedName":
            local = el.get("localSheetId")
            pkg.names.append(
                DefinedName(
                    name=el.get("name") or "",
                    text=el.text or "",
                    sheet=int(local) if local and local.isdigit() else None,
                    hidden=el.get("hidden") in ("1", "true"),
                )
            )
    return pkg


def transitional_copy(src: zipfile.ZipFile, dest: str) -> None:
    """Write ``src`` to ``dest`` with strict OOXML namespaces replaced by
    their transitional twins (the element names are the same)."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith((".xml", ".rels")):
                data = _STRICT.sub(rb"http://schemas.openxmlformats.org/\1/2006/\2", data)
            out.writestr(info.filename, data)


# -- comments


def comments(zf: zipfile.ZipFile, sheet_part: str) -> list[tuple[str, str | None, str]]:
    """(cell, author, text) of a sheet's comments (notes), in document order."""
    out: list[tuple[str, str | None, str]] = []
    for _, kind, target in _rels(zf, sheet_part):
        if kind != "comments":
            continue
        root = _read(zf, target)
        if root is None:
            continue
        authors = [a.text or "" for a in root.iter() if _local(a.tag) == "author"]
        for c in root.iter():
            if _local(c.tag) != "comment":
                continue
            text = _rich_text(_child(c, "text"))
            author_id = c.get("authorId")
            author = None
            if author_id and author_id.isdigit() and int(author_id) < len(authors):
                author = authors[int(author_id)]
            out.append((c.get("ref") or "?", author, text.strip()))
    return out


def _rich_text(el: ElementTree.Element | None) -> str:
    """The text of a string item: plain <t> and the runs' <t>, not phonetic runs."""
    parts: list[str] = []
    for child in el if el is not None else ():
        tag = _local(child.tag)
        if tag == "t":
            parts.append(child.text or "")
        elif tag == "r":
            parts.extend(t.text or "" for t in child if _local(t.tag) == "t")
    return "".join(parts)


# -- charts


Resolver = Callable[[str], list[str] | None]


def chart_lines(zf: zipfile.ZipFile, sheet_part: str, resolve: Resolver) -> list[str]:
    """Lines describing every chart drawn on a sheet (or chart sheet).  A
    series without cached points (openpyxl writes none) gets its values from
    ``resolve``, which reads the range from the parsed cells."""
    lines: list[str] = []
    for _, kind, drawing in _rels(zf, sheet_part):
        if kind != "drawing":
            continue
        for _, ckind, chart in _rels(zf, drawing):
            if ckind == "chart":
                root = _read(zf, chart)
                if root is not None:
                    lines.extend(_chart(root, resolve))
    return lines


def _texts(el: ElementTree.Element | None, tag: str) -> list[str]:
    if el is None:
        return []
    return [t.text or "" for t in el.iter() if _local(t.tag) == tag]


def _child(el: ElementTree.Element | None, name: str) -> ElementTree.Element | None:
    if el is None:
        return None
    for c in el:
        if _local(c.tag) == name:
            return c
    return None


def _first(el: ElementTree.Element, *names: str) -> ElementTree.Element | None:
    for name in names:
        found = _child(el, name)
        if found is not None:  # an element without children is falsy
            return found
    return None


def _points(ref: ElementTree.Element | None, resolve: Resolver) -> tuple[str | None, list[str]]:
    """(range formula, point values in index order) of a c:cat / c:val."""
    if ref is None:
        return None, []
    formula = next((f.text for f in ref.iter() if _local(f.tag) == "f"), None)
    pts: list[tuple[int, str]] = []
    for pt in ref.iter():
        if _local(pt.tag) == "pt":
            idx = pt.get("idx")
            value = next((v.text or "" for v in pt if _local(v.tag) == "v"), "")
            pts.append((int(idx) if idx and idx.isdigit() else len(pts), value))
    pts.sort()
    if not pts and formula:
        return formula, resolve(formula) or []
    return formula, [_point(v) for _, v in pts]


def _point(text: str) -> str:
    try:
        return cells.format_number(float(text))
    except ValueError:
        return cells.one_line_text(text)


def _joined(values: list[str]) -> str:
    shown = " | ".join(values[:MAX_POINTS])
    if len(values) > MAX_POINTS:
        shown += f" | ... ({len(values) - MAX_POINTS} more)"
    return shown


def _chart(root: ElementTree.Element, resolve: Resolver) -> list[str]:
    chart = _child(root, "chart")
    title_el = _child(chart, "title")
    title = "".join(_texts(title_el, "t")) or " ".join(_texts(title_el, "v"))
    plot = _child(chart, "plotArea")
    kinds = [c for c in (plot if plot is not None else ()) if _local(c.tag).endswith("Chart")]
    kind_names = ", ".join(_local(k.tag)[: -len("Chart")].lower() for k in kinds) or "chart"
    lines = [f"chart: {cells.one_line_text(title) or '(no title)'} ({kind_names})"]
    shown_categories: str | None = None
    for group in kinds:
        for ser in group:
            if _local(ser.tag) != "ser":
                continue
            tx = _child(ser, "tx")
            name = " ".join(_texts(tx, "v"))
            if not name:
                tx_f = next(
                    (f.text for f in (tx.iter() if tx is not None else ()) if _local(f.tag) == "f"),
                    None,
                )
                name = " ".join(resolve(tx_f) or []) if tx_f else ""
            name = name or "(no name)"
            cat_f, cats = _points(_first(ser, "cat", "xVal"), resolve)
            val_f, vals = _points(_first(ser, "val", "yVal"), resolve)
            if cats and _joined(cats) != shown_categories:
                shown_categories = _joined(cats)
                where = f" ({cat_f})" if cat_f else ""
                lines.append(f"  categories{where}: {shown_categories}")
            where = f" ({val_f})" if val_f else ""
            lines.append(f"  series {cells.one_line_text(name)}{where}: {_joined(vals)}")
    return lines
