"""Word documents (DOCX/DOCM): the body by heading section, plus headers and footers.

A direct reader over the WordprocessingML parts with the standard library's
ElementTree (its C parser).  The zip guard has already refused any part with a
DOCTYPE, so no entity can be declared, let alone expanded.  markitdown's
converter (mammoth, then markdownify) was the first choice; it costs a quarter
of a second per small file because mammoth builds a minidom of every part,
styles included.  This reader is about fifty times faster and gives what grep
needs.

Units.  A document without headings is one ``document.md`` (locator
``document``).  A document with headings is split at every heading into
``section-001.md``, ``section-002.md`` ... in document order, each with the
heading path as its locator: ``h=Clause 7/7.2`` (the titles of the headings
above and of its own, outermost first).  A ``Title`` paragraph is shown as
``# `` but opens no section and is in no path, as in Word's navigation pane,
so the document's name does not prefix every locator.  Text before the first
heading is ``section-000.md`` (locator
``preamble``).  In a path, ``%`` and ``/`` inside a title are written ``%25``
and ``%2F``, whitespace is collapsed and a title is cut at 80 characters.
Headers and footers, which repeat on every page, are one more unit,
``headers-footers.md`` (locator ``headers-footers``), one ``## Header`` /
``## Footer (first page)`` block per distinct text.

Inside a unit:

* paragraphs in document order, one block each; runs joined, tabs and breaks
  kept, alternate content taken once;
* headings as ``#`` levels from the paragraph style (``Title``, ``Heading 1``..,
  localised names, styles based on them, outline levels);
* list items as ``- `` with two spaces of indent per level;
* tables as pipe tables, one row per line, the first row as header, a merged
  cell padded so columns stay aligned; a table nested in a cell is flattened
  into that cell's text (so nesting depth costs no recursion);
* tracked changes visible: ``{+inserted+}`` and ``[-deleted-]`` (moves too);
  heading paths read as if the changes were accepted;
* equations (Office Math) as linear text: ``x^2``, ``(a+b)/c``, ``√x``;
* checkboxes, content-control and legacy form ones, as ``[x]`` / ``[ ]``; a
  form drop-down as its chosen entry;
* text boxes (DrawingML and VML) as blocks after the paragraph that anchors
  them (in a table cell: inside the cell); a picture's alt text as
  ``[image: ...]``;
* footnotes ``[^1]``, endnotes ``[^e1]`` and comments ``[^c1]`` marked where
  they are referenced and listed, one a line, at the end of that unit:
  ``[^1]: text``, ``[^c1]: comment by Dana on "the anchored words": text``,
  ``[^c2]: reply by Ravi to [^c1] (resolved): text``.
  Notes and comments nothing references are listed at the end of the last
  body unit, so no text in the file goes missing.

Emphasis (bold, italic) is dropped: it only gets in the way of grep.
"""

from __future__ import annotations

import itertools
import logging
import posixpath
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar
from xml.etree.ElementTree import Element

from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget
from parsers._omml import M, linear
from parsers._ooxml import (
    REL_NS,
    WORD_MAIN,
    main_part,
    markdown_table,
    read_package,
    read_xml,
    relationships,
)

log = logging.getLogger(__name__)

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
W14 = "{http://schemas.microsoft.com/office/word/2010/wordml}"
W15 = "{http://schemas.microsoft.com/office/word/2012/wordml}"
MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"

# Block-level wrappers whose children are paragraphs and tables again.
_BLOCK_WRAPPERS = frozenset(
    {W + "sdt", W + "sdtContent", W + "customXml", W + "ins", W + "moveTo", W + "smartTag"}
)
# Subtrees whose text is not part of the document as shown.
_SKIPPED = frozenset(
    {
        MC + "Fallback",
        W + "instrText",
        W + "delInstrText",
        W + "pPr",
        W + "rPr",
        W + "tcPr",
        W + "sdtPr",
        W + "sdtEndPr",
    }
)
_DELETED = frozenset({W + "del", W + "moveFrom"})
_INSERTED = frozenset({W + "ins", W + "moveTo"})
_NOTE_REFS = {
    W + "footnoteReference": "footnote",
    W + "endnoteReference": "endnote",
    W + "commentReference": "comment",
}
_CHARS = {
    W + "tab": "\t",
    W + "ptab": "\t",
    W + "br": "\n",
    W + "cr": "\n",
    W + "noBreakHyphen": "-",
}
# What the inline reader does with an element, by tag; anything else is entered.
(
    _TEXT,
    _SKIP,
    _CHAR,
    _DEL,
    _INS,
    _MATH,
    _SDT,
    _FIELD,
    _BOX,
    _PARAGRAPH,
    _NOTE,
    _COMMENT_START,
    _COMMENT_END,
    _ALT,
) = range(14)
_INLINE: dict[str, int] = {
    W + "t": _TEXT,
    W + "delText": _TEXT,
    **dict.fromkeys(_SKIPPED, _SKIP),
    **dict.fromkeys(_CHARS, _CHAR),
    **dict.fromkeys(_DELETED, _DEL),
    **dict.fromkeys(_INSERTED, _INS),
    M + "oMath": _MATH,
    M + "oMathPara": _MATH,
    W + "sdt": _SDT,
    W + "fldChar": _FIELD,
    W + "txbxContent": _BOX,
    W + "p": _PARAGRAPH,
    **dict.fromkeys(_NOTE_REFS, _NOTE),
    W + "commentRangeStart": _COMMENT_START,
    W + "commentRangeEnd": _COMMENT_END,
    WP + "docPr": _ALT,
}
_HEADING = re.compile(r"heading\s*([1-9])")
_TRUE = frozenset({"1", "true", "on"})
_TITLE_LIMIT = 80
_ANCHOR_LIMIT = 200
# Anchors are collected only while short and for a bounded number of open
# comments: a file that opens thousands of ranges and never closes them must
# not make every run of text cost thousands of appends.
_MAX_OPEN_COMMENTS = 64
_ANCHOR_PARTS = 256
_MAX_BOX_DEPTH = 16  # text boxes inside text boxes


class _Styles:
    """Paragraph style id -> heading level (0 for Title, 1..9), from names,
    outline levels and the styles they are based on."""

    def __init__(self, root: Element | None) -> None:
        self.known: dict[str, tuple[int | None, str]] = {}
        self.levels: dict[str, int | None] = {}
        if root is None:
            return
        for style in root.iter(W + "style"):
            style_id = style.get(W + "styleId")
            if not style_id:
                continue
            name = style.find(W + "name")
            level = _level_of_name(name.get(W + "val", "") if name is not None else "")
            if level is None:
                level = _outline_level(style.find(W + "pPr"))
            based = style.find(W + "basedOn")
            self.known[style_id] = (level, based.get(W + "val", "") if based is not None else "")

    def level(self, style_id: str) -> int | None:
        if style_id in self.levels:
            return self.levels[style_id]
        level, seen, current = None, set(), style_id
        while current in self.known and current not in seen:
            seen.add(current)
            level, current = self.known[current]
            if level is not None:
                break
        if style_id not in self.known:
            level = _level_of_name(style_id)  # no styles part: ids are usually the names
        self.levels[style_id] = level
        return level


def _level_of_name(name: str) -> int | None:
    lower = name.lower()
    if lower == "title":
        return 0
    match = _HEADING.fullmatch(lower)
    return int(match[1]) if match else None


def _outline_level(props: Element | None) -> int | None:
    outline = props.find(W + "outlineLvl") if props is not None else None
    if outline is None:
        return None
    try:
        value = int(outline.get(W + "val", "9"))
    except ValueError:
        return None
    return value + 1 if 0 <= value <= 8 else None  # 9 is "body text"


def _on(element: Element | None, attr: str = W + "val") -> bool:
    """A WordprocessingML on/off property: present and not switched off."""
    return element is not None and element.get(attr, "1").lower() in _TRUE


def _checkbox(sdt: Element) -> str | None:
    """``[x]`` / ``[ ]`` for a content-control checkbox, else None."""
    box = sdt.find(f"{W}sdtPr/{W14}checkbox")
    if box is None:
        return None
    return "[x]" if _on(box.find(W14 + "checked"), W14 + "val") else "[ ]"


def _form_field(begin: Element) -> str:
    """The state a legacy form field shows: ``[x]``, ``[ ]`` or a drop-down's entry."""
    data = begin.find(W + "ffData")
    if data is None:
        return ""
    box = data.find(W + "checkBox")
    if box is not None:
        checked = box.find(W + "checked")
        state = _on(checked) if checked is not None else _on(box.find(W + "default"), W + "val")
        return "[x]" if state else "[ ]"
    choices = data.find(W + "ddList")
    if choices is not None:
        entries = [e.get(W + "val", "") for e in choices.findall(W + "listEntry")]
        chosen = choices.find(W + "result")
        if chosen is None:
            chosen = choices.find(W + "default")
        try:
            index = int(chosen.get(W + "val", "0")) if chosen is not None else 0
        except ValueError:
            index = 0
        return entries[index] if 0 <= index < len(entries) else ""
    return ""


def _title(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _TITLE_LIMIT:
        flat = flat[: _TITLE_LIMIT - 1].rstrip() + "…"
    return flat.replace("%", "%25").replace("/", "%2F")


@dataclass
class _Section:
    path: tuple[str, ...] | None  # None: before the first heading
    blocks: list[str] = field(default_factory=list)
    refs: list[tuple[str, str]] = field(default_factory=list)  # (kind, id) in order


@dataclass
class _Notes:
    """Footnotes, endnotes and comments by id, and the labels given to them."""

    parts: dict[str, dict[str, Element]]
    # comment id -> (the id of the comment it replies to, or None; resolved?)
    threads: dict[str, tuple[str | None, bool]] = field(default_factory=dict)
    labels: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def label(self, kind: str, note_id: str) -> str:
        key = (kind, note_id)
        if key not in self.labels:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            prefix = {"footnote": "", "endnote": "e", "comment": "c"}[kind]
            self.labels[key] = f"{prefix}{self.counts[kind]}"
        return self.labels[key]


class _Reader:
    def __init__(self, styles: _Styles, budget: TextBudget, notes: _Notes) -> None:
        self.styles = styles
        self.budget = budget
        self.notes = notes
        self.section = _Section(None)
        self.sections = [self.section]
        self.heading_path: list[tuple[int, str]] = []
        self.open_comments: dict[str, list[str]] = {}
        self.anchors: dict[str, str] = {}

    # -- inline text

    def inline(
        self, element: Element, *, clean: bool = False, boxes: list[Element] | None = None
    ) -> str:
        """The text under ``element`` in document order (iterative: depth is untrusted).

        ``clean``: as if tracked changes were accepted, without note marks or
        text boxes (for heading paths).  Text boxes met on the way go to
        ``boxes`` when given, else into the text itself (a table cell).
        """
        parts: list[str] = []
        anchors = self.open_comments.values()

        def fed(text: str) -> None:
            parts.append(text)
            for anchor in anchors:
                if len(anchor) < _ANCHOR_PARTS:
                    anchor.append(text)

        # Most paragraphs lie in no comment's range: plain appends then.
        out = fed if self.open_comments and not clean else parts.append
        stack: list[Iterator[Element | str]] = [iter([element])]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                continue
            if isinstance(child, str):
                out(child)
                continue
            kind = _INLINE.get(child.tag)
            if kind is None:  # runs, hyperlinks, fields, smart tags ...: enter
                stack.append(iter(child))
            elif kind == _TEXT:
                out(child.text or "")
            elif kind == _SKIP:
                continue
            elif kind == _CHAR:
                out(_CHARS[child.tag])
            elif kind == _DEL:
                if not clean:
                    out("[-")
                    stack.append(itertools.chain(child, ["-]"]))
            elif kind == _INS:
                if clean:
                    stack.append(iter(child))
                else:
                    out("{+")
                    stack.append(itertools.chain(child, ["+}"]))
            elif kind == _MATH:
                out(linear(child))
            elif kind == _SDT:
                box = _checkbox(child)
                if box is None:
                    stack.append(iter(child))
                else:
                    out(box)
            elif kind == _FIELD:
                if child.get(W + "fldCharType") == "begin":
                    out(_form_field(child))
            elif kind == _BOX:
                if boxes is not None:
                    boxes.append(child)
                elif not clean:
                    out("\n")
                    stack.append(iter(child))
            elif kind == _PARAGRAPH:
                if parts and child is not element:
                    out("\n")  # a paragraph inside a flattened cell or text box
                stack.append(iter(child))
            elif clean:
                continue  # note marks, comment ranges and alt text are no heading text
            elif kind == _ALT:
                if alt := " ".join((child.get("descr") or "").split()):
                    out(f"[image: {alt}]")
            elif kind == _NOTE:
                out(f"[^{self.ref(_NOTE_REFS[child.tag], child.get(W + 'id', ''))}]")
            elif kind == _COMMENT_START:
                if len(self.open_comments) < _MAX_OPEN_COMMENTS:
                    self.open_comments[child.get(W + "id", "")] = []
                    out = fed
            elif kind == _COMMENT_END:
                anchor = self.open_comments.pop(child.get(W + "id", ""), None)
                if anchor is not None:
                    self.anchors[child.get(W + "id", "")] = "".join(anchor)
        text = "".join(parts)
        return text if clean else text.replace("+}{+", "").replace("-][-", "")

    def ref(self, kind: str, note_id: str) -> str:
        if (kind, note_id) not in self.notes.labels:
            self.section.refs.append((kind, note_id))
        return self.notes.label(kind, note_id)

    # -- blocks

    def body(self, body: Element) -> list[_Section]:
        """The body's sections, split at headings."""
        self.sections = [self.section]
        self._blocks(body, depth=0, headings=True)
        return self.sections

    def _open_section(self, level: int, title: str) -> None:
        while self.heading_path and self.heading_path[-1][0] >= level:
            self.heading_path.pop()
        self.heading_path.append((level, title))
        self.section = _Section(tuple(t for _, t in self.heading_path))
        self.sections.append(self.section)

    def _add(self, text: str) -> None:
        if text:
            self.section.blocks.append(self.budget.add(text))

    def _blocks(self, container: Element, *, depth: int, headings: bool) -> None:
        """Render the blocks of ``container`` into the current section, opening
        a new section at each heading (when ``headings``)."""
        if depth > _MAX_BOX_DEPTH:
            self._add(self.inline(container).strip())  # deeper boxes: their text, flattened
            return
        for child in container:
            tag = child.tag
            if tag == W + "p":
                level = self._level(child) if headings else None
                if level:  # a Title (level 0) is shown as "# " but opens no section
                    title = _title(self.inline(child, clean=True))
                    if title:
                        self._open_section(level, title)
                    else:
                        level = None
                boxes: list[Element] = []
                self._add(self.paragraph(child, level, boxes))
                for anchor in self.open_comments.values():
                    if len(anchor) < _ANCHOR_PARTS:
                        anchor.append(" ")
                for box in boxes:
                    self._blocks(box, depth=depth + 1, headings=False)
            elif tag == W + "tbl":
                self._add(self.table(child))
            elif tag == W + "sdt" and (mark := _checkbox(child)) is not None:
                self._add(mark)
            elif tag in _BLOCK_WRAPPERS:
                self._blocks(child, depth=depth, headings=headings)

    def _level(self, p: Element) -> int | None:
        props = p.find(W + "pPr")
        if props is None:
            return None
        style = props.find(W + "pStyle")
        level = self.styles.level(style.get(W + "val", "")) if style is not None else None
        return level if level is not None else _outline_level(props)

    def paragraph(self, p: Element, level: int | None, boxes: list[Element]) -> str:
        text = self.inline(p, boxes=boxes).strip()
        if not text:
            return ""
        if level is not None:
            return "#" * max(level, 1) + " " + " ".join(text.split())
        props = p.find(W + "pPr")
        numbering = props.find(W + "numPr") if props is not None else None
        if numbering is not None:
            ilvl = numbering.find(W + "ilvl")
            try:
                indent = int(ilvl.get(W + "val", "0")) if ilvl is not None else 0
            except ValueError:
                indent = 0
            return "  " * min(max(indent, 0), 8) + "- " + text
        return text

    def table(self, tbl: Element) -> str:
        rows = []
        for row in self._rows(tbl):
            cells: list[str] = []
            for cell in self._cells(row):
                cells.append(self.inline(cell))
                span = cell.find(f"{W}tcPr/{W}gridSpan")
                try:
                    extra = int(span.get(W + "val", "1")) - 1 if span is not None else 0
                except ValueError:
                    extra = 0
                cells.extend([""] * min(max(extra, 0), 64))
            rows.append(cells)
        return markdown_table(rows)

    @staticmethod
    def _rows(tbl: Element) -> Iterator[Element]:
        for child in tbl:
            if child.tag == W + "tr":
                yield child
            elif child.tag in _BLOCK_WRAPPERS:
                yield from _Reader._rows(child)

    @staticmethod
    def _cells(row: Element) -> Iterator[Element]:
        for child in row:
            if child.tag == W + "tc":
                yield child
            elif child.tag in _BLOCK_WRAPPERS:
                yield from _Reader._cells(child)

    # -- parts other than the body

    def loose_text(self, container: Element) -> str:
        """All blocks of a header, footer, note or comment, headings as plain text."""
        saved = self.section
        self.section = _Section(None, refs=saved.refs)
        self._blocks(container, depth=0, headings=False)
        blocks, self.section = self.section.blocks, saved
        return "\n\n".join(blocks)

    def notes_block(self, section: _Section) -> str:
        """The notes and comments referenced in ``section``, one a line."""
        lines = []
        index = 0
        while index < len(section.refs):  # a note may reference a comment
            kind, note_id = section.refs[index]
            index += 1
            element = self.notes.parts.get(kind, {}).get(note_id)
            if element is None:
                continue
            self.section = section
            text = " ".join(self.loose_text(element).split())
            label = self.notes.label(kind, note_id)
            if kind == "comment":
                author = " ".join((element.get(W + "author") or "").split())
                anchor = " ".join(self.anchors.get(note_id, "").split())
                if len(anchor) > _ANCHOR_LIMIT:
                    anchor = anchor[: _ANCHOR_LIMIT - 1].rstrip() + "…"
                parent, resolved = self.notes.threads.get(note_id, (None, False))
                by = f" by {author}" if author else ""
                if parent is not None:
                    what = f"reply{by} to [^{self.notes.label('comment', parent)}]"
                else:
                    what = f"comment{by}" + (f' on "{anchor}"' if anchor else "")
                done = " (resolved)" if resolved else ""
                lines.append(f"[^{label}]: {what}{done}: {text}")
            else:
                lines.append(f"[^{label}]: {text}")
        return self.budget.add("\n".join(lines))


_SEPARATOR_NOTES = frozenset({"separator", "continuationSeparator", "continuationNotice"})


def _note_parts(archive: zipfile.ZipFile, rels: Iterable[tuple[str, str]]) -> _Notes:
    parts: dict[str, dict[str, Element]] = {"footnote": {}, "endnote": {}, "comment": {}}
    for kind, member in rels:
        for name in ("footnote", "endnote", "comment"):
            if kind.endswith(f"/{name}s"):
                root = read_xml(archive, member)
                if root is None:
                    continue
                for note in root.iter(W + name):
                    if note.get(W + "type") in _SEPARATOR_NOTES:
                        continue
                    parts[name].setdefault(note.get(W + "id", ""), note)
    return _Notes(parts, _threads(archive, rels, parts["comment"]))


def _threads(
    archive: zipfile.ZipFile, rels: Iterable[tuple[str, str]], comments: dict[str, Element]
) -> dict[str, tuple[str | None, bool]]:
    """Replies and resolved state (Word 2013 and later keep them in
    ``commentsExtended.xml``, keyed by the paraId of a comment's last paragraph)."""
    extended = next((m for k, m in rels if k.endswith("/commentsExtended")), None)
    root = read_xml(archive, extended) if extended and comments else None
    if root is None:
        return {}
    by_para = {}
    for comment_id, comment in comments.items():
        paragraphs = comment.findall(W + "p")
        if paragraphs and (para := paragraphs[-1].get(W14 + "paraId")):
            by_para[para] = comment_id
    threads: dict[str, tuple[str | None, bool]] = {}
    for entry in root.iter(W15 + "commentEx"):
        found = by_para.get(entry.get(W15 + "paraId", ""))
        if found is not None:
            parent = by_para.get(entry.get(W15 + "paraIdParent", ""))
            threads[found] = (parent, entry.get(W15 + "done") in _TRUE)
    return threads


_PAGE_PARTS = {
    "headerReference": "Header",
    "footerReference": "Footer",
}
_PAGE_KINDS = {"first": " (first page)", "even": " (even pages)"}


def _headers_footers(
    reader: _Reader, archive: zipfile.ZipFile, body: Element, rels: dict[str, tuple[str, str]]
) -> str:
    seen_members: set[str] = set()
    seen_texts: set[tuple[str, str]] = set()
    blocks = []
    for section in body.iter(W + "sectPr"):
        for ref in section:
            kind = _PAGE_PARTS.get(ref.tag.removeprefix(W))
            rel = rels.get(ref.get(REL_NS + "id", ""))
            if kind is None or rel is None or rel[1] in seen_members:
                continue
            seen_members.add(rel[1])
            root = read_xml(archive, rel[1])
            text = reader.loose_text(root).strip() if root is not None else ""
            if not text or (kind, text) in seen_texts:
                continue
            seen_texts.add((kind, text))
            blocks.append(f"## {kind}{_PAGE_KINDS.get(ref.get(W + 'type', ''), '')}\n\n{text}")
    return reader.budget.add("\n\n".join(blocks))


def read_document(archive: zipfile.ZipFile, options: ParseOptions) -> list[Unit]:
    main = main_part(archive, WORD_MAIN) or "word/document.xml"
    document = read_xml(archive, main)
    if document is None:
        raise ParseFailed(f"not a Word document: no {main}")
    body = document.find(W + "body")
    if body is None:
        raise ParseFailed("not a Word document: no body")
    rels = relationships(archive, main)
    # The styles part can be large (hundreds of KiB of latent styles) and is
    # only needed to name styles whose id is not already "Heading2" or "Title".
    used = {el.get(W + "val", "") for el in body.iter(W + "pStyle")}
    styles_root = None
    if any(_level_of_name(style_id) is None for style_id in used):
        styles_part = next(
            (m for k, m in rels.values() if k.endswith("/styles")),
            posixpath.join(posixpath.dirname(main), "styles.xml"),
        )
        styles_root = read_xml(archive, styles_part)
    reader = _Reader(
        _Styles(styles_root),
        TextBudget(options.max_text_bytes),
        _note_parts(archive, rels.values()),
    )
    sections = [s for s in reader.body(body) if s.blocks or s.refs or s.path is not None]
    if not sections:
        sections = [_Section(None)]
    # Whatever nothing references still is text in the file: list it last.
    last = sections[-1]
    for kind, notes in reader.notes.parts.items():
        for note_id in notes:
            if (kind, note_id) not in reader.notes.labels:
                reader.notes.label(kind, note_id)
                last.refs.append((kind, note_id))
    units = []
    single = len(sections) == 1 and sections[0].path is None
    for number, section in enumerate(sections):
        blocks = section.blocks + [b for b in [reader.notes_block(section)] if b]
        text = "\n\n".join(blocks) + "\n" if blocks else ""
        if single:
            units.append(Unit("document.md", text, "document"))
        elif section.path is None:
            units.append(Unit("section-000.md", text, "preamble"))
        else:
            index = number if sections[0].path is None else number + 1
            units.append(Unit(f"section-{index:03d}.md", text, "h=" + "/".join(section.path)))
    furniture = _headers_footers(reader, archive, body, rels)
    if furniture:
        units.append(Unit("headers-footers.md", furniture + "\n", "headers-footers"))
    return units


class DocxParser(Parser):
    id = "docx"
    version = 3
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".docx", ".docm", ".dotx", ".dotm"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return read_package(
            path, info, options, "Word document", lambda a: read_document(a, options)
        )
