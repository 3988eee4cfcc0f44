"""EPUB books: ``document.md`` through markitdown's EPUB converter, after the zip guard."""

from __future__ import annotations

import logging

from parsers import _markitdown, zipguard
from parsers._base import FileInfo, ParseOptions, Parser, Unit

log = logging.getLogger(__name__)


class EpubParser(Parser):
    id = "epub"
    version = 2
    priority = 30.0

    def accepts(self, info: FileInfo) -> bool:
        return info.extension == ".epub"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        zipguard.check_container(path, info, options, public_doctypes=True)
        from markitdown.converters import EpubConverter

        markdown = _markitdown.convert(EpubConverter(), path, extension=".epub", what="EPUB")
        return _markitdown.document_unit(markdown, options)
