"""Word documents: ``document.md`` with headings, paragraphs, lists and tables as markdown.

markitdown's DocxConverter (mammoth to HTML, then markdownify) maps heading
styles to ``#`` levels and tables to pipe tables; python-docx is not needed at
run time.  The zip guard runs first: mammoth reads every part it needs into
memory.
"""

from __future__ import annotations

import logging
from typing import ClassVar

from parsers import _markitdown, zipguard
from parsers._base import FileInfo, ParseOptions, Parser, Unit

log = logging.getLogger(__name__)


class DocxParser(Parser):
    id = "docx"
    version = 1
    priority = 40.0

    extensions: ClassVar[frozenset[str]] = frozenset({".docx", ".docm", ".dotx", ".dotm"})

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        zipguard.check_container(path, info, options)
        from markitdown.converters import DocxConverter

        markdown = _markitdown.convert(
            DocxConverter(), path, extension=".docx", what="Word document"
        )
        return _markitdown.document_unit(markdown, options)
