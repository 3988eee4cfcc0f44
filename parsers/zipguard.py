"""Checks a zip container before any parser opens it: OOXML, EPUB and friends.

Three attacks are stopped here, before a library decompresses anything:

* not a zip at all (a renamed file), or an OLE compound file named like OOXML,
  which is how Office stores password-protected documents;
* zip bombs: the declared uncompressed sizes are summed against
  ``max_unzipped_bytes`` and each large member's compression ratio is checked
  against ``max_zip_ratio``.  Declared sizes can be trusted as an upper bound
  because CPython's ``zipfile`` never returns more bytes than the header
  declares (and fails on the CRC otherwise), and the libraries we hand the
  container to (openpyxl, python-pptx, mammoth) all read through ``zipfile``;
* XML entity bombs: an XML part that declares a DOCTYPE (and so could declare
  entities) is refused.  OOXML parts never need one; (X)HTML parts of an EPUB
  may carry the plain XHTML DOCTYPE, but never an internal subset or an
  entity declaration.  Only each part's prolog is decompressed: expat stops
  at the root element.
"""

from __future__ import annotations

import logging
import zipfile
from xml.parsers import expat

from parsers._base import EncryptedDocument, FileInfo, ParseFailed, ParseOptions
from parsers._common import describe

log = logging.getLogger(__name__)

ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

# Office formats that are zips when clear and OLE files when encrypted.
OOXML_EXTENSIONS = frozenset(
    {
        ".xlsx",
        ".xlsm",
        ".xltx",
        ".xltm",
        ".docx",
        ".docm",
        ".dotx",
        ".dotm",
        ".pptx",
        ".pptm",
        ".potx",
        ".potm",
        ".ppsx",
        ".ppsm",
    }
)

# Members smaller than this cannot be a bomb by themselves; small, repetitive
# XML parts legitimately compress far beyond any sane ratio.
_RATIO_MIN_SIZE = 1024 * 1024
_MAX_MEMBERS = 100_000
_XML_SUFFIXES = (".xml", ".rels", ".opf", ".ncx", ".svg", ".vml")
_HTML_SUFFIXES = (".xhtml", ".htm", ".html")
_CHUNK = 16 * 1024
_ZIP_ENCRYPTED = 0x1  # general purpose flag bit 0: the member is encrypted
# A prolog (declaration, comments, PIs) longer than this is hostile by itself.
_MAX_PROLOG = 1024 * 1024


class _RootReached(Exception):
    pass


class _Doctype(Exception):
    pass


def check_container(path: str, info: FileInfo, options: ParseOptions) -> None:
    """Raise ParseFailed (or EncryptedDocument) unless ``path`` is a zip safe to open."""
    head = info.head
    if head.startswith(OLE_MAGIC):
        if info.extension in OOXML_EXTENSIONS:
            raise EncryptedDocument("encrypted or password-protected Office document")
        raise ParseFailed("not a zip container (OLE compound file)")
    if not head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        raise ParseFailed("not a zip container")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            _check_sizes(members, options)
            for member in members:
                lower = member.filename.lower()
                if lower.endswith(_XML_SUFFIXES):
                    _check_xml_prolog(archive, member, html=False)
                elif lower.endswith(_HTML_SUFFIXES):
                    _check_xml_prolog(archive, member, html=True)
    except ParseFailed:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise ParseFailed(f"broken zip container: {describe(exc)}") from exc
    except NotImplementedError as exc:  # unsupported compression method
        raise ParseFailed(f"unsupported zip container: {describe(exc)}") from exc


def _check_sizes(members: list[zipfile.ZipInfo], options: ParseOptions) -> None:
    if len(members) > _MAX_MEMBERS:
        raise ParseFailed(f"zip container has too many members (>{_MAX_MEMBERS})")
    total = 0
    for member in members:
        if member.flag_bits & _ZIP_ENCRYPTED:
            raise EncryptedDocument(f"encrypted zip container (member {member.filename!r})")
        total += member.file_size
        if total > options.max_unzipped_bytes:
            raise ParseFailed(
                f"zip bomb: declared uncompressed size exceeds {options.max_unzipped_bytes} bytes"
            )
        if member.file_size >= _RATIO_MIN_SIZE:
            ratio = member.file_size / max(member.compress_size, 1)
            if ratio > options.max_zip_ratio:
                raise ParseFailed(
                    f"zip bomb: member {member.filename!r} expands {ratio:.0f}x "
                    f"(limit {options.max_zip_ratio}x)"
                )


def _check_xml_prolog(archive: zipfile.ZipFile, member: zipfile.ZipInfo, *, html: bool) -> None:
    parser = expat.ParserCreate()

    def on_doctype(
        _name: str, _sysid: str | None, _pubid: str | None, has_internal_subset: bool
    ) -> None:
        if has_internal_subset or not html:
            raise _Doctype

    def on_entity(*_args: object) -> None:
        raise _Doctype

    def on_start(*_args: object) -> None:
        raise _RootReached

    parser.StartDoctypeDeclHandler = on_doctype
    parser.EntityDeclHandler = on_entity
    parser.StartElementHandler = on_start
    seen = 0
    try:
        with archive.open(member) as stream:
            while chunk := stream.read(_CHUNK):
                parser.Parse(chunk, False)
                seen += len(chunk)
                if seen > _MAX_PROLOG:
                    raise ParseFailed(f"XML part {member.filename!r} has an oversized prolog")
            parser.Parse(b"", True)
    except _RootReached:
        return
    except _Doctype:
        raise ParseFailed(
            f"XML part {member.filename!r} declares a DOCTYPE (entity expansion refused)"
        ) from None
    except expat.ExpatError as exc:
        if html:
            return  # HTML parsers are lenient; only declarations matter here
        raise ParseFailed(f"malformed XML part {member.filename!r}: {describe(exc)}") from exc
