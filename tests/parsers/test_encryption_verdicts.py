"""Encryption is named only when the file says so (issue 41).

An OpenDocument package whose manifest lists encryption data holds
ciphertext parts: before, the zip guard called such a file 'malformed XML'
(calamine's own password.ods was refused so).  An OLE file named .xlsb is
encrypted when it holds Office's encrypted package (EncryptionInfo and
EncryptedPackage); before, it was 'unsupported'.  An OLE file named .xlsb
without them is no workbook at all.

No program we have writes an encrypted ODF package (LibreOffice 7.4 sets a
password only through its dialog or UNO) nor an encrypted .xlsb: the
encrypted ODF is a LibreOffice-written .odt whose parts are replaced by
random bytes and whose manifest gets the encryption data LibreOffice
writes; the OLE files are built by hand (tests.docgen.ole_file).
"""

from __future__ import annotations

import os
import pathlib
import re
import zipfile

import pytest

from parsers import registry
from parsers._base import EncryptedDocument, ParseFailed, ParseOptions, Unit
from tests import docgen, sheetgen


def parse(path: pathlib.Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return registry.parse(str(path), info, ParseOptions())[1]


def failure(path: pathlib.Path) -> ParseFailed:
    with pytest.raises(ParseFailed) as caught:
        parse(path)
    assert "\n" not in str(caught.value)
    return caught.value


# What LibreOffice writes for each encrypted part (ODF 1.2, AES-256 / PBKDF2).
_ENCRYPTION_DATA = (
    '<manifest:encryption-data manifest:checksum-type="urn:oasis:names:tc:opendocument:'
    'xmlns:manifest:1.0#sha256-1k" manifest:checksum="x0jE5WqnN3cSq8hA1c0qz1iwkVJ8N1wz2W1'
    'wQ9SxVgE=">'
    '<manifest:algorithm manifest:algorithm-name="http://www.w3.org/2001/04/xmlenc#aes256-cbc"'
    ' manifest:initialisation-vector="4sNIl3U8w8R0C0W0zJmF1A=="/>'
    "<manifest:start-key-generation manifest:start-key-generation-name="
    '"http://www.w3.org/2000/09/xmldsig#sha256" manifest:key-size="32"/>'
    '<manifest:key-derivation manifest:key-derivation-name="PBKDF2" manifest:key-size="32"'
    ' manifest:iteration-count="100000" manifest:salt="m7tU2Qm9S9Zt0E2C8W6Ocg=="/>'
    "</manifest:encryption-data>"
)


def encrypt_odf(clear: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """``clear`` as LibreOffice saves it with a password: the XML parts
    ciphertext, each listed in the manifest with its encryption data."""
    encrypted = ("content.xml", "styles.xml", "meta.xml", "settings.xml")
    with zipfile.ZipFile(clear) as src, zipfile.ZipFile(out, "w") as dst:
        manifest = src.read("META-INF/manifest.xml").decode()
        for name in encrypted:
            # <manifest:file-entry ... full-path="content.xml" .../> gets its
            # encryption data as a child element.
            entry = re.compile(
                rf'(<manifest:file-entry[^>]*manifest:full-path="{name}"[^>]*?)\s*/>'
            )
            manifest = entry.sub(
                lambda m: f"{m.group(1)}>{_ENCRYPTION_DATA}</manifest:file-entry>", manifest
            )
        for item in src.infolist():
            if item.filename == "META-INF/manifest.xml":
                dst.writestr(item, manifest)
            elif item.filename in encrypted:
                dst.writestr(item, os.urandom(max(item.file_size, 64)))
            else:
                dst.writestr(item, src.read(item))
    return out


@pytest.fixture(scope="module")
def clear_odt(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    folder = tmp_path_factory.mktemp("odt")
    text = folder / "memo.txt"
    text.write_text("The quarterly memo.\n")
    return sheetgen.soffice_convert(text, "odt", folder / "lo")


@pytest.fixture(scope="module")
def clear_ods(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    folder = tmp_path_factory.mktemp("ods")
    book = sheetgen.excel_like_xlsx(folder / "book.xlsx")
    return sheetgen.soffice_convert(book, "ods", folder / "lo")


def test_the_clear_odt_parses(clear_odt: pathlib.Path) -> None:
    assert "quarterly memo" in "".join(u.text for u in parse(clear_odt))


@pytest.mark.parametrize("which", ["odt", "ods"])
def test_encrypted_opendocument_is_named_encrypted(
    clear_odt: pathlib.Path, clear_ods: pathlib.Path, tmp_path: pathlib.Path, which: str
) -> None:
    """Before: "malformed XML part 'content.xml'" (odt), "... 'meta.xml'" (ods)."""
    clear = clear_odt if which == "odt" else clear_ods
    path = encrypt_odf(clear, tmp_path / f"locked.{which}")
    manifest = zipfile.ZipFile(path).read("META-INF/manifest.xml").decode()
    assert manifest.count("<manifest:encryption-data") >= 2
    exc = failure(path)
    assert isinstance(exc, EncryptedDocument), exc
    kind = "text" if which == "odt" else "spreadsheet"
    assert str(exc) == f"encrypted or password-protected OpenDocument {kind}"


def test_odf_with_a_garbled_part_and_no_encryption_is_malformed(
    clear_odt: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    path = tmp_path / "garbled.odt"
    with zipfile.ZipFile(clear_odt) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = b"\x00garbage<" if item.filename == "content.xml" else src.read(item)
            dst.writestr(item, data)
    exc = failure(path)
    assert not isinstance(exc, EncryptedDocument)
    assert "malformed XML part 'content.xml'" in str(exc)


def test_encrypted_xlsb_is_named_encrypted(tmp_path: pathlib.Path) -> None:
    """Before: 'unsupported: no parser for this type'."""
    path = docgen.ole_file(
        tmp_path,
        "locked.xlsb",
        {"EncryptionInfo": b"\x04\x00\x04\x00\x40\x00\x00\x00", "EncryptedPackage": b"z" * 64},
    )
    exc = failure(path)
    assert isinstance(exc, EncryptedDocument)
    assert str(exc) == "encrypted or password-protected Office document"


def test_ole_named_xlsb_without_an_encrypted_package_is_no_workbook(tmp_path: pathlib.Path) -> None:
    path = docgen.ole_file(tmp_path, "odd.xlsb", {"Workbook": docgen.biff_stream(encrypted=False)})
    exc = failure(path)
    assert not isinstance(exc, EncryptedDocument)
    assert str(exc) == "not a valid Excel binary workbook (.xlsb) file"
