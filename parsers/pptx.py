"""Presentations (PPTX/PPTM): one ``slide-001.md`` unit per slide.

A slide's unit holds its title as a heading, the text of its other shapes in
reading order (top to bottom, then left to right; groups are entered at any
depth, with the tables and charts inside them), tables as markdown tables,
charts as ``### Chart: title`` and a table of their cached values (see
``parsers._chart``), SmartArt node texts as list items, a picture's alt text
as ``[image: ...]``, and the speaker notes under ``## Notes``.

A direct reader over the PresentationML parts, not python-pptx: python-pptx
loads every part of the package into memory when it opens a deck, embedded
videos and images included, so a 500 MB deck of 30 slides costs 500 MB; this
reader decompresses only the slide, layout and notes XML (and is several
times faster).  Placeholders without their own position take it from their
layout, as PowerPoint does.
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Iterator
from typing import ClassVar
from xml.etree.ElementTree import Element

from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._chart import CX, C, chart_markdown
from parsers._common import TextBudget
from parsers._ooxml import (
    PRESENTATION_MAIN,
    REL_NS,
    main_part,
    markdown_table,
    read_package,
    read_xml,
    relationships,
)

log = logging.getLogger(__name__)

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
DGM = "{http://schemas.openxmlformats.org/drawingml/2006/diagram}"

_TITLE_TYPES = frozenset({"title", "ctrTitle"})
# Group shapes nest; PowerPoint itself stops far earlier than this.
_MAX_GROUP_DEPTH = 32
_FAR = 1 << 62  # shapes without any position sort last, in document order

Position = tuple[int, int]

# Said rather than left out: a reader should know a chart is there.
_MISSING_CHART = "### Chart (its data part is missing from the file)"


def _text_body(body: Element | None) -> str:
    """Paragraphs of a ``txBody``, one per line; ``a:br`` breaks a line too."""
    if body is None:
        return ""
    lines = []
    for paragraph in body.iter(A + "p"):
        parts = []
        for child in paragraph:
            if child.tag in (A + "r", A + "fld"):
                parts.append(child.findtext(A + "t") or "")
            elif child.tag == A + "br":
                parts.append("\n")
        lines.append("".join(parts))
    return "\n".join(lines).strip()


def _table(tbl: Element) -> str:
    return markdown_table(
        [_text_body(tc.find(A + "txBody")) for tc in tr.iter(A + "tc")] for tr in tbl.iter(A + "tr")
    )


def _offset(xfrm: Element | None) -> Position | None:
    off = xfrm.find(A + "off") if xfrm is not None else None
    if off is None:
        return None
    try:
        return int(off.get("y", "0")), int(off.get("x", "0"))
    except ValueError:
        return None


def _placeholder(shape: Element) -> Element | None:
    for props in (P + "nvSpPr", P + "nvGraphicFramePr", P + "nvPicPr", P + "nvGrpSpPr"):
        nv = shape.find(props)
        if nv is not None:
            return nv.find(f"{P}nvPr/{P}ph")
    return None


def _own_position(shape: Element) -> Position | None:
    if shape.tag == P + "graphicFrame":
        return _offset(shape.find(P + "xfrm"))
    if shape.tag == P + "grpSp":
        return _offset(shape.find(f"{P}grpSpPr/{A}xfrm"))
    return _offset(shape.find(f"{P}spPr/{A}xfrm"))


class _Layout:
    """Placeholder positions of a slide layout, by ``idx`` and by ``type``."""

    def __init__(self, root: Element | None) -> None:
        self.by_idx: dict[str, Position] = {}
        self.by_type: dict[str, Position] = {}
        if root is None:
            return
        for shape in root.iter(P + "sp"):
            ph = _placeholder(shape)
            position = _own_position(shape)
            if ph is None or position is None:
                continue
            if ph.get("idx"):
                self.by_idx.setdefault(ph.get("idx", ""), position)
            self.by_type.setdefault(ph.get("type", "body"), position)

    def position(self, ph: Element) -> Position | None:
        if ph.get("idx") in self.by_idx:
            return self.by_idx[ph.get("idx", "")]
        return self.by_type.get(ph.get("type", "body"))


class _Slide:
    def __init__(
        self, layout: _Layout, archive: zipfile.ZipFile, rels: dict[str, tuple[str, str]]
    ) -> None:
        self.layout = layout
        self.archive = archive
        self.rels = rels
        self.title = ""

    def position(self, shape: Element) -> Position:
        own = _own_position(shape)
        if own is not None:
            return own
        ph = _placeholder(shape)
        inherited = self.layout.position(ph) if ph is not None else None
        return inherited if inherited is not None else (_FAR, _FAR)

    def texts(self, tree: Element, depth: int = 0) -> Iterator[str]:
        if depth > _MAX_GROUP_DEPTH:
            raise ParseFailed("presentation too deeply nested (group shapes)")
        shapes = list(self._shapes(tree))
        order = sorted(range(len(shapes)), key=lambda i: (self.position(shapes[i]), i))
        for i in order:
            shape = shapes[i]
            if shape.tag == P + "grpSp":
                yield from self.texts(shape, depth + 1)
            elif shape.tag == P + "sp":
                text = _text_body(shape.find(P + "txBody"))
                ph = _placeholder(shape)
                if ph is not None and ph.get("type") in _TITLE_TYPES and not self.title:
                    self.title = " ".join(text.split())
                elif text:
                    yield text
            elif shape.tag == P + "pic":
                props = shape.find(f"{P}nvPicPr/{P}cNvPr")
                alt = " ".join((props.get("descr") or "").split()) if props is not None else ""
                if alt:
                    yield f"[image: {alt}]"
            elif shape.tag == P + "graphicFrame":
                data = shape.find(f"{A}graphic/{A}graphicData")
                if data is not None and (text := self.graphic(data)):
                    yield text

    def graphic(self, data: Element) -> str:
        """A table, a chart or a SmartArt diagram in a graphic frame."""
        tbl = data.find(A + "tbl")
        if tbl is not None:
            return _table(tbl)
        for ref in (data.find(C + "chart"), data.find(CX + "chart")):
            if ref is not None:
                root = self._related(ref.get(REL_NS + "id", ""))
                return chart_markdown(root) if root is not None else _MISSING_CHART
        diagram = data.find(DGM + "relIds")
        if diagram is not None:
            root = self._related(diagram.get(REL_NS + "dm", ""))
            return _diagram(root) if root is not None else ""
        return ""

    def _related(self, rel_id: str) -> Element | None:
        rel = self.rels.get(rel_id)
        return read_xml(self.archive, rel[1]) if rel is not None else None

    @staticmethod
    def _shapes(tree: Element) -> Iterator[Element]:
        for child in tree:
            if child.tag == MC + "AlternateContent":
                choice = child.find(MC + "Choice")
                if choice is not None:
                    yield from choice
            else:
                yield child


def _diagram(root: Element) -> str:
    """A SmartArt diagram's node texts, one list item each, in data-model order."""
    items = []
    for point in root.iter(DGM + "pt"):
        if point.get("type", "node") != "node":
            continue
        body = point.find(DGM + "t")
        text = " ".join(_text_body(body).split()) if body is not None else ""
        if text:
            items.append("- " + text)
    return "\n".join(items)


def _notes(archive: zipfile.ZipFile, member: str | None) -> str:
    root = read_xml(archive, member) if member else None
    if root is None:
        return ""
    texts = []
    for shape in root.iter(P + "sp"):
        ph = _placeholder(shape)
        if ph is not None and ph.get("type") == "body":
            texts.append(_text_body(shape.find(P + "txBody")))
    return "\n\n".join(t for t in texts if t)


def slide_text(archive: zipfile.ZipFile, member: str, layouts: dict[str, _Layout]) -> str:
    root = read_xml(archive, member)
    if root is None:
        raise ParseFailed(f"presentation lists a missing slide {member!r}")
    rels = relationships(archive, member)
    layout_member = next((m for k, m in rels.values() if k.endswith("/slideLayout")), "")
    if layout_member not in layouts:
        layouts[layout_member] = _Layout(
            read_xml(archive, layout_member) if layout_member else None
        )
    slide = _Slide(layouts[layout_member], archive, rels)
    tree = root.find(f"{P}cSld/{P}spTree")
    body = list(slide.texts(tree)) if tree is not None else []
    parts = ([f"# {slide.title}"] if slide.title else []) + body
    notes = _notes(archive, next((m for k, m in rels.values() if k.endswith("/notesSlide")), None))
    if notes:
        parts.append("## Notes\n\n" + notes)
    return "\n\n".join(parts) + "\n" if parts else ""


def slide_members(archive: zipfile.ZipFile) -> list[str]:
    """The slides' package members in presentation order."""
    main = main_part(archive, PRESENTATION_MAIN)
    presentation = read_xml(archive, main) if main else None
    if main is None or presentation is None:
        raise ParseFailed("not a presentation: no presentation part")
    rels = relationships(archive, main)
    members = []
    for slide_id in presentation.iter(P + "sldId"):
        rel = rels.get(slide_id.get(REL_NS + "id", ""))
        if rel is not None:
            members.append(rel[1])
    return members


class PptxParser(Parser):
    id = "pptx"
    version = 4
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".pptx", ".pptm", ".ppsx", ".ppsm"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return read_package(path, info, options, "presentation", lambda a: self._parse(a, options))

    def _parse(self, archive: zipfile.ZipFile, options: ParseOptions) -> list[Unit]:
        members = slide_members(archive)
        if len(members) > options.max_pages:
            raise ParseFailed(f"too many slides (>{options.max_pages})")
        budget = TextBudget(options.max_text_bytes)
        layouts: dict[str, _Layout] = {}
        units = []
        for number, member in enumerate(members, start=1):
            text = budget.add(slide_text(archive, member, layouts))
            units.append(Unit(f"slide-{number:03d}.md", text, f"slide={number}"))
        return units
