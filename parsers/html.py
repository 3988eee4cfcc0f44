"""HTML pages: ``document.md`` through markitdown's HTML converter (scripts and styles dropped)."""

from __future__ import annotations

import logging
from typing import ClassVar

from parsers import _markitdown
from parsers._base import FileInfo, ParseOptions, Parser, Unit

log = logging.getLogger(__name__)


class HtmlParser(Parser):
    id = "html"
    version = 1
    priority = 20.0

    extensions: ClassVar[frozenset[str]] = frozenset({".html", ".htm", ".xhtml"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        from markitdown.converters import HtmlConverter

        markdown = _markitdown.convert(HtmlConverter(), path, extension=".html", what="HTML")
        return _markitdown.document_unit(markdown, options)
