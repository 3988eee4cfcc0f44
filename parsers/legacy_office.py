"""Legacy Office, RTF and OpenDocument files, read through LibreOffice.

Binary ``.doc`` and ``.ppt`` (and their templates and shows), ``.rtf``,
``.odt`` and ``.odp`` have no dependable pure-Python reader.  LibreOffice
headless converts them to OOXML (see ``parsers.soffice``), which the docx
and pptx parsers read in-process through their public parser classes, so
the units are the same as for the modern formats: ``document.md``
(locator ``document``) for text documents, ``slide-NNN.md`` (``slide=N``)
for presentations, one per slide with its notes.

Before any conversion an OLE file is opened to tell an encrypted one
(reported as such, so users know why there is no text) from a plain one; an
OLE file named like OOXML (``.xlsx``...) is what Office writes when a
password protects it.  An OpenDocument package whose manifest carries
encryption data is encrypted too.  LibreOffice is told which import filter to
use, so a damaged file fails instead of being imported as plain text; where
that filter refuses a .doc or .ppt (Word 2.0, PowerPoint 95), a warm
LibreOffice may pick its own, but only among its Word or PowerPoint filters.
The package LibreOffice makes is held to an expansion limit of the whole
package, not of each member (``_own_conversion``).
Without LibreOffice these formats are unsupported, with that reason.

``.xls`` is only checked for encryption here; plain ones are declined so the
spreadsheet parsers that follow can read them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from parsers._base import (
    EncryptedDocument,
    FileInfo,
    ParseFailed,
    ParseOptions,
    Parser,
    ToolMissing,
    Unit,
    UnsupportedFormat,
)
from parsers._common import describe, quiet
from parsers.docx import DocxParser
from parsers.pptx import PptxParser
from parsers.soffice import SofficeMissing, converted, program
from parsers.zipguard import OLE_MAGIC, OOXML_EXTENSIONS, ZIP_MAGIC, check_container, ole_verdict

log = logging.getLogger(__name__)

_ENCRYPTED = "encrypted or password-protected Office document"
_BIFF_FILEPASS = 0x002F
_BIFF_BOF = 0x0809
_BIFF_SCAN_RECORDS = 64
# The FIB's nFib: Word 97 and later write 0x00C1 (a newer one, if any, is
# elsewhere); Word 95 wrote 104, Word 6.0 101 to 103 (older Word files are
# not OLE compound files at all).
_NFIB_WORD97 = 0x00C1
_NFIB_WORD95 = 104
_ODF_MANIFEST = "META-INF/manifest.xml"
_ODF_ENCRYPTED = b"encryption-data"
_RTF_MAGIC = b"{\\rtf"


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


@dataclass(frozen=True)
class _Route:
    """How one extension goes through LibreOffice: import filter, export, reader."""

    infilter: str
    kind: str  # the format's name in messages
    slides: bool  # presentation (pptx, slide units) or text document (docx)
    # Import filters LibreOffice may pick itself where ``infilter`` refuses
    # the file (parsers.soffice.converted): never a plain-text one.
    detect: frozenset[str] = frozenset()

    @property
    def target(self) -> str:
        return "pptx:Impress MS PowerPoint 2007 XML" if self.slides else "docx:MS Word 2007 XML"

    @property
    def inner(self) -> Parser:
        return _PPTX if self.slides else _DOCX

    @property
    def out_extension(self) -> str:
        return ".pptx" if self.slides else ".docx"


_DOCX = DocxParser()
_PPTX = PptxParser()

# LibreOffice's binary Word and PowerPoint import filters: what it may pick
# for a .doc or .ppt the forced filter refuses (Word 2.0, PowerPoint 95).
WORD_FILTERS = frozenset(
    {
        "MS Word 97",
        "MS Word 97 Vorlage",
        "MS Word 95",
        "MS Word 95 Vorlage",
        "MS WinWord 6.0",
        "MS WinWord 5",
    }
)
_POWERPOINT_FILTERS = frozenset(
    {"MS PowerPoint 97", "MS PowerPoint 97 AutoPlay", "MS PowerPoint 97 Vorlage", "PowerPoint 3"}
)
_WORD97 = _Route("MS Word 97", "Word 97-2003 document", slides=False, detect=WORD_FILTERS)
_WORD95 = _Route("MS Word 95", "Word 95 document", slides=False, detect=WORD_FILTERS)
_WORD6 = _Route("MS WinWord 6.0", "Word 6.0 document", slides=False, detect=WORD_FILTERS)
# Word for Windows 1.x and 2.0 files are no OLE files: their own magic.
WORD2 = _Route("MS WinWord 5", "Word 2.0 document", slides=False, detect=WORD_FILTERS)
WORD2_MAGIC = (b"\xdb\xa5", b"\x9b\xa5")
_RTF = _Route("Rich Text Format", "RTF document", slides=False)
ROUTES: dict[str, _Route] = {
    ".doc": _WORD97,
    ".dot": _Route(
        "MS Word 97 Vorlage", "Word 97-2003 template", slides=False, detect=WORD_FILTERS
    ),
    ".ppt": _Route(
        "MS PowerPoint 97",
        "PowerPoint 97-2003 presentation",
        slides=True,
        detect=_POWERPOINT_FILTERS,
    ),
    ".pps": _Route(
        "MS PowerPoint 97 AutoPlay",
        "PowerPoint 97-2003 show",
        slides=True,
        detect=_POWERPOINT_FILTERS,
    ),
    ".pot": _Route(
        "MS PowerPoint 97 Vorlage",
        "PowerPoint 97-2003 template",
        slides=True,
        detect=_POWERPOINT_FILTERS,
    ),
    ".rtf": _RTF,
    ".odt": _Route("writer8", "OpenDocument text", slides=False),
    ".ott": _Route("writer8_template", "OpenDocument text template", slides=False),
    ".odp": _Route("impress8", "OpenDocument presentation", slides=True),
    ".otp": _Route("impress8_template", "OpenDocument presentation template", slides=True),
}
_SPREADSHEETS = frozenset({".xls", ".xlt"})
_OLE_DOCUMENTS = frozenset({".doc", ".dot", ".ppt", ".pps", ".pot"})
_ODF = frozenset({".odt", ".ott", ".odp", ".otp"})


def _word_version_route(path: str) -> _Route:
    """Word before 97 needs its own import filter; Word 97 and later share one."""
    import olefile

    with quiet(), olefile.OleFileIO(path) as ole, ole.openstream("WordDocument") as stream:
        fib = stream.read(4)
    if len(fib) < 4:
        return _WORD97
    (nfib,) = struct.unpack_from("<H", fib, 2)
    if nfib >= _NFIB_WORD97:
        return _WORD97
    return _WORD95 if nfib >= _NFIB_WORD95 else _WORD6


def _odf_encrypted(path: str) -> bool:
    with zipfile.ZipFile(path) as archive:
        try:
            manifest = archive.read(_ODF_MANIFEST)
        except KeyError:
            return False
    return _ODF_ENCRYPTED in manifest


def _missing(info: FileInfo, route: _Route) -> ToolMissing:
    return ToolMissing(
        f"{route.kind} ({info.extension}) needs LibreOffice (soffice), which is not installed"
    )


def _convert_and_parse(
    path: str, info: FileInfo, options: ParseOptions, route: _Route
) -> list[Unit]:
    try:
        with converted(
            path,
            extension=info.extension,
            infilter=route.infilter,
            target=route.target,
            kind=route.kind,
            detect=route.detect,
        ) as out:
            with open(out, "rb") as f:
                head = f.read(4096)
            inner_info = FileInfo(
                name=info.name,
                extension=route.out_extension,
                size=os.path.getsize(out),
                head=head,
            )
            inner_options = _own_conversion(out, info, options, route)
            try:
                return route.inner.parse(out, inner_info, inner_options)
            except ParseFailed as exc:
                raise ParseFailed(f"{route.kind} converted by LibreOffice: {exc}") from exc
    except SofficeMissing as exc:
        raise _missing(info, route) from exc


def _own_conversion(out: str, info: FileInfo, options: ParseOptions, route: _Route) -> ParseOptions:
    """The options to read LibreOffice's own output with.

    A member's compression ratio says nothing about a file we made: a WMF
    image in a docx compresses beyond any limit a stranger's zip is held to.
    What does say something is how far the whole package expands beyond the
    file it was made from (or beyond itself, if larger): past the ratio
    limit it fails as a bomb; below it the per-member ratio is not checked.
    The total size limit always holds."""
    try:
        with zipfile.ZipFile(out) as archive:
            declared = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return options  # the inner reader gives its verdict on a broken package
    base = max(info.size, os.path.getsize(out), 1)
    if declared / base > options.max_zip_ratio:
        raise ParseFailed(
            f"zip bomb: LibreOffice's conversion of this {route.kind} expands "
            f"{declared / base:.0f}x (limit {options.max_zip_ratio}x)"
        )
    return dataclasses.replace(options, max_zip_ratio=_NO_RATIO)


_NO_RATIO = 1 << 62


def _conversion_key(parser: Parser, info: FileInfo) -> str:
    """The cache key names the reader of the converted file too (its
    improvements re-parse these files) and whether LibreOffice was there (so
    installing it turns 'unsupported' files into parsed ones)."""
    base = f"{parser.key()}{info.extension or '.'}"
    route = ROUTES.get(info.extension)
    if route is None:
        return base
    if program() is None:
        return f"{base}+no-soffice"
    # '+detect': LibreOffice may pick its own filter where the forced one
    # refuses the file (files failed before are parsed again).
    return f"{base}+{route.inner.key()}" + ("+detect" if route.detect else "")


def _next_reader_key(
    parser: Parser, info: FileInfo, chain: Callable[[FileInfo], Sequence[Parser]] | None
) -> str:
    """The key of the parser that reads what ``parser`` declines (a plain
    ``.xls`` goes on to the spreadsheet readers): its new versions must not
    be hidden behind this parser's unchanged key.  ``chain``: the registry's
    candidates for a file (given by the registry, which imports this module)."""
    if chain is None:
        return "none"
    readers = list(chain(info))
    ids = [p.id for p in readers]
    after = readers[ids.index(parser.id) + 1 :] if parser.id in ids else readers
    return after[0].cache_key(info) if after else "none"


class LegacyOfficeParser(Parser):
    """OLE compound files: encryption verdict, then ``.doc``/``.ppt`` through LibreOffice."""

    id = "ole-office"
    version = 2
    priority = 45.0

    keyed_by_extension = True  # the same OLE bytes are 'encrypted' only under some names
    extensions: ClassVar[frozenset[str]] = _SPREADSHEETS | _OLE_DOCUMENTS

    def __init__(self, next_readers: Callable[[FileInfo], Sequence[Parser]] | None = None) -> None:
        """``next_readers``: the parsers that may read a file, in order (the
        registry's ``candidates``): a spreadsheet's key names the one that
        reads it after this parser declines."""
        self.next_readers = next_readers

    def accepts(self, info: FileInfo) -> bool:
        return info.head.startswith(OLE_MAGIC) and (
            info.extension in self.extensions or info.extension in OOXML_EXTENSIONS
        )

    def cache_key(self, info: FileInfo) -> str:
        if info.extension in _SPREADSHEETS:
            key = _next_reader_key(self, info, self.next_readers)
            return f"{self.key()}{info.extension}+{key}"
        return _conversion_key(self, info)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.extension in OOXML_EXTENSIONS:
            ole_verdict(path, info.extension)
        route = ROUTES.get(info.extension)
        try:
            encrypted = looks_encrypted(path, info.extension)
        except Exception as exc:  # olefile on a damaged file: no verdict
            log.debug("ole probe failed for %s", info.name, exc_info=True)
            if route is None:
                raise UnsupportedFormat(f"legacy Office format {info.extension}") from exc
            # LibreOffice is more forgiving than olefile; if it cannot read
            # the file either, the file fails with LibreOffice's verdict.
            encrypted = False
        if encrypted:
            raise EncryptedDocument(_ENCRYPTED)
        if route is None:
            raise UnsupportedFormat(f"legacy Office format {info.extension} is not parsed here")
        if route is _WORD97:
            try:
                route = _word_version_route(path)
            except Exception:  # no readable WordDocument stream: let LibreOffice judge
                log.debug("no Word FIB in %s", info.name, exc_info=True)
        return _convert_and_parse(path, info, options, route)


class ConvertedDocumentParser(Parser):
    """RTF and OpenDocument text and presentations, through LibreOffice.

    Also an RTF file named ``.doc``, as Word and many exporters write them,
    and a Word for Windows 1.x or 2.0 file (no OLE file: a magic of its own).
    """

    id = "soffice"
    version = 1
    priority = 45.0

    keyed_by_extension = True
    extensions: ClassVar[frozenset[str]] = frozenset({".rtf", ".doc", ".dot"}) | _ODF

    def accepts(self, info: FileInfo) -> bool:
        if info.extension in _ODF:
            return info.head.startswith(ZIP_MAGIC)
        if info.extension in self.extensions:
            if info.extension in (".doc", ".dot") and info.head.startswith(WORD2_MAGIC):
                return True
            return info.head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(_RTF_MAGIC)
        return False

    def cache_key(self, info: FileInfo) -> str:
        return _conversion_key(self, info)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.extension in (".doc", ".dot"):
            route = WORD2 if info.head.startswith(WORD2_MAGIC) else _RTF
        else:
            route = ROUTES[info.extension]
        if info.extension in _ODF:
            # The zip guard first: LibreOffice must never meet a bomb.
            # ODF writers may declare a public DOCTYPE in a part, as EPUB's
            # do: allowed without an internal subset or a local DTD.
            check_container(path, info, options, public_doctypes=True)
            try:
                encrypted = _odf_encrypted(path)
            except (zipfile.BadZipFile, OSError) as exc:
                raise ParseFailed(f"broken {route.kind}: {describe(exc)}") from exc
            if encrypted:
                raise EncryptedDocument(f"encrypted or password-protected {route.kind}")
        return _convert_and_parse(path, info, options, route)
