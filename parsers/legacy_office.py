"""Legacy and encrypted Office files (OLE compound documents).

Binary ``.xls``/``.doc``/``.ppt`` are not parsed: without LibreOffice there
is no dependable extractor.  They are only opened to tell an encrypted file
(reported as such, so users know why there is no text) from a plain one,
which this parser declines with UnsupportedFormat.  An OLE file named like
OOXML (``.xlsx``...) is what Office writes when a password protects it.
"""

from __future__ import annotations

import logging
import struct
from typing import ClassVar

from parsers._base import (
    EncryptedDocument,
    FileInfo,
    ParseOptions,
    Parser,
    Unit,
    UnsupportedFormat,
)
from parsers._common import quiet
from parsers.zipguard import OLE_MAGIC, OOXML_EXTENSIONS

log = logging.getLogger(__name__)

_ENCRYPTED = "encrypted or password-protected Office document"
_BIFF_FILEPASS = 0x002F
_BIFF_BOF = 0x0809
_BIFF_SCAN_RECORDS = 64


def _word_encrypted(ole: object) -> bool:
    # FIB base: wIdent (2), nFib (2), unused (2), lid (2), pnNext (2), then the
    # flags word whose bit 8 is fEncrypted.
    with ole.openstream("WordDocument") as stream:  # type: ignore[attr-defined]
        fib = stream.read(12)
    if len(fib) < 12:
        return False
    (flags,) = struct.unpack_from("<H", fib, 10)
    return bool(flags & 0x0100)


def _excel_encrypted(ole: object) -> bool:
    name = "Workbook" if ole.exists("Workbook") else "Book"  # type: ignore[attr-defined]
    if not ole.exists(name):  # type: ignore[attr-defined]
        return False
    with ole.openstream(name) as stream:  # type: ignore[attr-defined]
        data = stream.read(64 * 1024)
    offset = 0
    for _ in range(_BIFF_SCAN_RECORDS):
        if offset + 4 > len(data):
            break
        kind, length = struct.unpack_from("<HH", data, offset)
        if kind == _BIFF_FILEPASS:
            return True
        if offset and kind == _BIFF_BOF:
            break  # the next substream: FILEPASS belongs right after the first BOF
        offset += 4 + length
    return False


def looks_encrypted(path: str, extension: str) -> bool:
    """True for OLE files that carry an encrypted OOXML package or a legacy encryption flag."""
    import olefile

    with quiet(), olefile.OleFileIO(path) as ole:
        if ole.exists("EncryptionInfo") or ole.exists("EncryptedPackage"):
            return True
        if ole.exists("WordDocument"):
            return _word_encrypted(ole)
        if ole.exists("Workbook") or ole.exists("Book"):
            return _excel_encrypted(ole)
        # PowerPoint keeps an encrypted summary stream when a password is set.
        return bool(ole.exists("EncryptedSummary"))


class LegacyOfficeParser(Parser):
    id = "ole-office"
    version = 1
    priority = 45.0

    keyed_by_extension = True  # the same OLE bytes are 'encrypted' only under some names
    extensions: ClassVar[frozenset[str]] = frozenset(
        {".xls", ".xlt", ".doc", ".dot", ".ppt", ".pps", ".pot"}
    )

    def accepts(self, info: FileInfo) -> bool:
        return info.head.startswith(OLE_MAGIC) and (
            info.extension in self.extensions or info.extension in OOXML_EXTENSIONS
        )

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.extension in OOXML_EXTENSIONS:
            raise EncryptedDocument(_ENCRYPTED)
        try:
            encrypted = looks_encrypted(path, info.extension)
        except Exception as exc:  # olefile on a damaged file: no verdict, no text either
            log.debug("ole probe failed for %s", info.name, exc_info=True)
            raise UnsupportedFormat(f"legacy Office format {info.extension}") from exc
        if encrypted:
            raise EncryptedDocument(_ENCRYPTED)
        raise UnsupportedFormat(f"legacy Office format {info.extension} is not parsed")
