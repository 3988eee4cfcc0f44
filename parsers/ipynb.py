"""Jupyter notebooks: ``document.md`` with markdown cells as-is and code cells fenced."""

from __future__ import annotations

import logging

from parsers import _markitdown
from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit

log = logging.getLogger(__name__)


class IpynbParser(Parser):
    id = "ipynb"
    version = 1
    priority = 30.0

    def accepts(self, info: FileInfo) -> bool:
        return info.extension == ".ipynb"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        from markitdown.converters import IpynbConverter

        if info.size > options.max_text_bytes:
            raise ParseFailed(f"too much text (>{options.max_text_bytes} bytes)")
        markdown = _markitdown.convert(IpynbConverter(), path, extension=".ipynb", what="notebook")
        return _markitdown.document_unit(markdown, options)
