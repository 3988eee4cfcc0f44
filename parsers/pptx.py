"""Presentations (PPTX/PPTM): one ``slide-001.md`` unit per slide.

A slide's unit holds its title as a heading, the text of its shapes in
reading order (top to bottom, then left to right; groups are entered),
tables as markdown tables, and the speaker notes under ``## Notes``.
python-pptx parses with lxml, entity resolution off; the zip guard runs first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from parsers import zipguard
from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, quiet

if TYPE_CHECKING:
    from pptx.slide import Slide

log = logging.getLogger(__name__)

# Group shapes nest; PowerPoint itself stops far earlier than this.
_MAX_GROUP_DEPTH = 32


def _cell_text(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(table: Any) -> str:
    rows = [[_cell_text(cell.text) for cell in row.cells] for row in table.rows]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _ordered(shapes: Iterable[Any]) -> list[Any]:
    return sorted(shapes, key=lambda s: ((s.top or 0), (s.left or 0)))


def _shape_texts(shapes: Iterable[Any], title_id: int | None, depth: int) -> Iterator[str]:
    # isinstance, not shape_type: python-pptx raises on shapes it cannot classify.
    from pptx.shapes.group import GroupShape

    if depth > _MAX_GROUP_DEPTH:
        raise ParseFailed("presentation too deeply nested (group shapes)")
    for shape in _ordered(shapes):
        if title_id is not None and shape.shape_id == title_id:
            continue
        if isinstance(shape, GroupShape):
            yield from _shape_texts(shape.shapes, title_id, depth + 1)
        elif getattr(shape, "has_table", False) and shape.has_table:
            yield _table(shape.table)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            text = shape.text_frame.text.strip()
            if text:
                yield text


def slide_text(slide: Slide) -> str:
    parts: list[str] = []
    title = slide.shapes.title
    title_id = None
    if title is not None:
        title_id = title.shape_id
        title_text = " ".join(title.text_frame.text.split()) if title.has_text_frame else ""
        if title_text:
            parts.append(f"# {title_text}")
    parts.extend(t for t in _shape_texts(slide.shapes, title_id, 0) if t)
    if slide.has_notes_slide:
        frame = slide.notes_slide.notes_text_frame
        notes = frame.text.strip() if frame is not None else ""
        if notes:
            parts.append("## Notes\n\n" + notes)
    return "\n\n".join(parts) + "\n" if parts else ""


class PptxParser(Parser):
    id = "pptx"
    version = 2
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".pptx", ".pptm"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        zipguard.check_container(path, info, options)
        try:
            with quiet(), open(path, "rb") as stream:
                return self._parse(stream, options)
        except ParseFailed:
            raise
        except RecursionError as exc:
            raise ParseFailed("presentation too deeply nested") from exc
        except Exception as exc:  # python-pptx and lxml raise many types
            raise ParseFailed(f"unreadable presentation: {describe(exc)}") from exc

    def _parse(self, stream: Any, options: ParseOptions) -> list[Unit]:
        from pptx import Presentation

        deck = Presentation(stream)
        slides = deck.slides
        if len(slides) > options.max_pages:
            raise ParseFailed(f"too many slides (>{options.max_pages})")
        budget = TextBudget(options.max_text_bytes)
        units = []
        for number, slide in enumerate(slides, start=1):
            text = budget.add(slide_text(slide))
            units.append(Unit(f"slide-{number:03d}.md", text, f"slide={number}"))
        return units
