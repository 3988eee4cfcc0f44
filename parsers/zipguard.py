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
* XML entity bombs and external entities: an XML part that declares a
  DOCTYPE (and so could declare entities) is refused.  OOXML parts never need
  one.  (X)HTML parts, and every XML part of a container opened with
  ``public_doctypes=True`` (EPUB: its NCX and OPF carry
  ``<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://...">``), may
  carry a plain DOCTYPE naming a public DTD, but never an internal subset, an
  entity declaration or a system identifier that is a local file or relative
  path (an external DTD that a resolving parser would load).  No parser here
  fetches DTDs.  Only each part's prolog is decompressed: expat stops at the
  root element.
"""

from __future__ import annotations

import logging
import zipfile
from typing import NoReturn
from xml.parsers import expat

from parsers._base import EncryptedDocument, FileInfo, ParseFailed, ParseOptions
from parsers._common import describe, quiet

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

# Formats whose encrypted form is an OLE file holding an encrypted package
# (extension -> the format's name).  Their clear form is a zip, so an OLE
# file without that package is no valid file of theirs.
OLE_WHEN_ENCRYPTED = {
    ".xlsb": "Excel binary workbook (.xlsb)",
    **{ext: f"Office Open XML {ext[1:]}" for ext in OOXML_EXTENSIONS},
}

# The package relationships of OOXML: tolerated when broken (see below).
_PACKAGE_RELS = "_rels/.rels"

# An OpenDocument package lists its encrypted parts in its manifest.
_ODF_MANIFEST = "META-INF/manifest.xml"
_ODF_ENCRYPTION = b"encryption-data"
_MAX_MANIFEST = 4 * 1024 * 1024
_ODF_KINDS = {
    ".odt": "OpenDocument text",
    ".ott": "OpenDocument text template",
    ".ods": "OpenDocument spreadsheet",
    ".ots": "OpenDocument spreadsheet template",
    ".odp": "OpenDocument presentation",
    ".otp": "OpenDocument presentation template",
}

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


def check_container(
    path: str, info: FileInfo, options: ParseOptions, *, public_doctypes: bool = False
) -> None:
    """Raise ParseFailed (or EncryptedDocument) unless ``path`` is a zip safe to open.

    ``public_doctypes`` lets XML parts carry a DOCTYPE without an internal subset
    (EPUB 2 packages declare one in every NCX and often in the OPF)."""
    head = info.head
    if head.startswith(OLE_MAGIC):
        if info.extension in OLE_WHEN_ENCRYPTED:
            ole_verdict(path, info.extension)
        raise ParseFailed("not a zip container (OLE compound file)")
    if not head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        raise ParseFailed("not a zip container")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            _check_sizes(members, options)
            if _odf_encrypted(archive):
                # Its parts are ciphertext: no XML to check, no text to read.
                kind = _ODF_KINDS.get(info.extension, "OpenDocument file")
                raise EncryptedDocument(f"encrypted or password-protected {kind}")
            for member in members:
                lower = member.filename.lower()
                if lower.endswith(_XML_SUFFIXES):
                    _check_xml_prolog(archive, member, html=False, doctype=public_doctypes)
                elif lower.endswith(_HTML_SUFFIXES):
                    _check_xml_prolog(archive, member, html=True, doctype=True)
    except ParseFailed:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise ParseFailed(f"broken zip container: {describe(exc)}") from exc
    except NotImplementedError as exc:  # unsupported compression method
        raise ParseFailed(f"unsupported zip container: {describe(exc)}") from exc


def ole_verdict(path: str, extension: str) -> NoReturn:
    """Why an OLE file under a zip format's name (``OLE_WHEN_ENCRYPTED``)
    cannot be read: encrypted only when the file says so, as Office's
    encrypted package is two streams of an OLE file; otherwise no valid file
    of that format."""
    if ole_holds_encrypted_package(path):
        raise EncryptedDocument("encrypted or password-protected Office document")
    raise ParseFailed(f"not a valid {OLE_WHEN_ENCRYPTED[extension]} file")


def ole_holds_encrypted_package(path: str) -> bool:
    """Whether an OLE file holds an encrypted Office package (the
    ``EncryptionInfo`` and ``EncryptedPackage`` streams of MS-OFFCRYPTO);
    False for a damaged OLE file too."""
    import olefile

    try:
        with quiet(), olefile.OleFileIO(path) as ole:
            return bool(ole.exists("EncryptionInfo") and ole.exists("EncryptedPackage"))
    except Exception:  # olefile's many errors on a damaged file: it says nothing
        return False


def _odf_encrypted(archive: zipfile.ZipFile) -> bool:
    """Whether the manifest of an OpenDocument package declares encrypted
    parts (``manifest:encryption-data``).  Only searched, never parsed."""
    try:
        member = archive.getinfo(_ODF_MANIFEST)
    except KeyError:
        return False
    if member.file_size > _MAX_MANIFEST:
        return False  # the XML check below judges it
    with archive.open(member) as stream:
        return _ODF_ENCRYPTION in stream.read(_MAX_MANIFEST)


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


def _remote_or_absent(sysid: str | None) -> bool:
    """A DOCTYPE system identifier no local file can hide behind: none, or an
    http(s) URL (the public DTDs of XHTML, NCX, OPF)."""
    return sysid is None or sysid.lower().startswith(("http://", "https://"))


def _check_xml_prolog(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, *, html: bool, doctype: bool
) -> None:
    parser = expat.ParserCreate()

    def on_doctype(
        _name: str, sysid: str | None, _pubid: str | None, has_internal_subset: bool
    ) -> None:
        if has_internal_subset:
            raise _Doctype("declares a DOCTYPE with an internal subset (entity expansion refused)")
        if not doctype:
            raise _Doctype("declares a DOCTYPE (entity expansion refused)")
        if not _remote_or_absent(sysid):
            raise _Doctype(f"declares a DOCTYPE naming a local DTD {sysid!r} (refused)")

    def on_entity(*_args: object) -> None:
        raise _Doctype("declares an entity (entity expansion refused)")

    def on_start(*_args: object) -> None:
        raise _RootReached

    parser.StartDoctypeDeclHandler = on_doctype
    parser.EntityDeclHandler = on_entity
    parser.StartElementHandler = on_start
    seen = 0
    blank = True  # nothing but white space so far
    try:
        with archive.open(member) as stream:
            while chunk := stream.read(_CHUNK):
                blank = blank and not chunk.strip()
                parser.Parse(chunk, False)
                seen += len(chunk)
                if seen > _MAX_PROLOG:
                    raise ParseFailed(f"XML part {member.filename!r} has an oversized prolog")
            parser.Parse(b"", True)
    except _RootReached:
        return
    except _Doctype as exc:
        raise ParseFailed(f"XML part {member.filename!r} {exc}") from None
    except expat.ExpatError as exc:
        if html:
            return  # HTML parsers are lenient; only declarations matter here
        if member.filename == _PACKAGE_RELS:
            # A broken _rels/.rels (no DOCTYPE or entity came before the
            # error, or it was refused above): the readers find the main
            # part by its content type, as openpyxl does.
            return
        if blank:
            # An empty part (OpenOffice and LibreOffice leave an empty
            # Configurations2/accelerator/current.xml in most ODF files):
            # it declares nothing, so it can expand nothing.
            return
        raise ParseFailed(f"malformed XML part {member.filename!r}: {describe(exc)}") from exc
