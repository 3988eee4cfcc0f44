"""Outlook ``.msg`` mails: ``document.md`` with headers and body, via markitdown (olefile)."""

from __future__ import annotations

import logging

from parsers import _markitdown
from parsers._base import FileInfo, ParseOptions, Parser, Unit
from parsers.zipguard import OLE_MAGIC

log = logging.getLogger(__name__)


class OutlookMsgParser(Parser):
    id = "msg"
    version = 1
    priority = 30.0

    def accepts(self, info: FileInfo) -> bool:
        return info.extension == ".msg" and info.head.startswith(OLE_MAGIC)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        from markitdown.converters import OutlookMsgConverter

        markdown = _markitdown.convert(
            OutlookMsgConverter(), path, extension=".msg", what="Outlook message"
        )
        return _markitdown.document_unit(markdown, options)
