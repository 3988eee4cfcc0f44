"""Hostile and broken inputs: each fails with a clear one-line reason.

Zip and entity bombs must be refused by the zip guard before any library
decompresses them; the tests check both the reason and that the guard ran
without reading the bomb member.  How long a hostile file keeps a worker
busy is measured by ``make bench`` (bench/hostileparse.py), not here.
"""

from __future__ import annotations

import pathlib
import zipfile
from collections.abc import Callable

import pytest

from parsers import registry, zipguard
from parsers._base import EncryptedDocument, ParseFailed, ParseOptions, Unit
from tests import docgen


def parse(path: pathlib.Path, **limits: int) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    _, units = registry.parse(str(path), info, ParseOptions(**limits))
    return units


def failure(path: pathlib.Path, **limits: int) -> ParseFailed:
    with pytest.raises(ParseFailed) as caught:
        parse(path, **limits)
    message = str(caught.value)
    assert message
    assert "\n" not in message
    assert len(message) <= 200
    return caught.value


def attempt(path: pathlib.Path) -> list[Unit] | ParseFailed:
    """The units, or the ParseFailed: for inputs where either outcome is fine."""
    try:
        return parse(path)
    except ParseFailed as exc:
        return exc


@pytest.fixture
def no_decompression(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records zip members read past their first 64 KiB (the guard reads prologs only)."""
    opened: list[str] = []
    original = zipfile.ZipExtFile.read

    def read(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        data = original(self, n)
        if n < 0 or self.tell() > 64 * 1024:
            opened.append(self.name)
        return data

    monkeypatch.setattr(zipfile.ZipExtFile, "read", read)
    return opened


# -- PDF -----------------------------------------------------------------------------------


def test_encrypted_pdf(tmp_path: pathlib.Path) -> None:
    exc = failure(docgen.encrypted_pdf(tmp_path))
    assert isinstance(exc, EncryptedDocument)
    assert str(exc) == "encrypted PDF: password required"


def test_truncated_pdf_is_served_as_partial(tmp_path: pathlib.Path) -> None:
    """Half of a 10-page file: the pages MuPDF can read are served, every unit
    saying the file is partial (see tests/parsers/test_parsers_pdf.py for more)."""
    units = parse(docgen.truncated_pdf(tmp_path))
    assert len(units) == 10
    assert all("[swfs: partial: truncated PDF" in u.text for u in units)
    assert "Section 1" in units[0].text


def test_cyclic_page_tree(tmp_path: pathlib.Path) -> None:
    exc = failure(docgen.cyclic_pdf(tmp_path))
    assert "cycle" in str(exc)


def test_empty_and_garbage_pdf(tmp_path: pathlib.Path) -> None:
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    assert "empty" in str(failure(empty))
    garbage = tmp_path / "garbage.pdf"
    garbage.write_bytes(b"this is not a pdf at all\n" * 50)
    assert str(failure(garbage)).startswith("broken PDF")


def test_mupdf_stays_quiet(tmp_path: pathlib.Path, capfd: pytest.CaptureFixture[str]) -> None:
    """MuPDF reports to stderr from C by default; a worker's output must stay clean."""
    for path in (docgen.truncated_pdf(tmp_path), docgen.cyclic_pdf(tmp_path)):
        attempt(path)
    for seed in range(5):
        attempt(docgen.fuzzed_pdf(tmp_path, seed))
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("seed", range(20))
def test_fuzzed_pdf_fails_cleanly_or_parses(tmp_path: pathlib.Path, seed: int) -> None:
    path = docgen.fuzzed_pdf(tmp_path, seed)
    outcome = attempt(path)
    if isinstance(outcome, ParseFailed):
        assert str(outcome)
        assert "\n" not in str(outcome)
    else:
        assert [u.name for u in outcome] == [f"page-{n:04d}.md" for n in range(1, len(outcome) + 1)]


# -- zip containers ------------------------------------------------------------------------


def test_non_zip_xlsx(tmp_path: pathlib.Path) -> None:
    assert str(failure(docgen.non_zip_xlsx(tmp_path))) == "not a zip container"


def test_random_bytes_docx(tmp_path: pathlib.Path) -> None:
    assert str(failure(docgen.random_docx(tmp_path))) == "not a zip container"


@pytest.mark.parametrize("name", ["locked.xlsx", "locked.docx", "locked.pptx", "locked.xlsm"])
def test_ole_named_ooxml_is_encrypted_only_when_it_says_so(
    tmp_path: pathlib.Path, name: str
) -> None:
    """Office writes a password-protected OOXML file as an OLE file with the
    EncryptionInfo and EncryptedPackage streams: that one is encrypted.  An
    OLE file without them (a bare header here) is no valid file of the kind."""
    locked = docgen.ole_file(
        tmp_path, name, {"EncryptionInfo": b"\x04\x00\x04\x00", "EncryptedPackage": b"z"}
    )
    exc = failure(locked)
    assert isinstance(exc, EncryptedDocument)
    assert str(exc) == "encrypted or password-protected Office document"
    bare = tmp_path / "bare"
    bare.mkdir()
    exc = failure(docgen.ole_named(bare, name))
    assert not isinstance(exc, EncryptedDocument)
    assert str(exc) == f"not a valid Office Open XML {name.rsplit('.', 1)[1]} file"


@pytest.mark.parametrize(
    ("name", "streams"),
    [
        ("locked.doc", {"WordDocument": docgen.word_fib(encrypted=True)}),
        ("locked.xls", {"Workbook": docgen.biff_stream(encrypted=True)}),
        ("locked.ppt", {"PowerPoint Document": b"x", "EncryptedSummary": b"y"}),
        ("agile.doc", {"EncryptionInfo": b"\x04\x00\x04\x00", "EncryptedPackage": b"z"}),
    ],
)
def test_encrypted_legacy_office(
    tmp_path: pathlib.Path, name: str, streams: dict[str, bytes]
) -> None:
    exc = failure(docgen.ole_file(tmp_path, name, streams))
    assert isinstance(exc, EncryptedDocument)


def test_entity_bomb(tmp_path: pathlib.Path, no_decompression: list[str]) -> None:
    exc = failure(docgen.entity_bomb_xlsx(tmp_path))
    assert "xl/sharedStrings.xml" in str(exc)
    assert "DOCTYPE" in str(exc)
    assert no_decompression == []


def test_epub_with_internal_subset(tmp_path: pathlib.Path) -> None:
    doctype = '<!DOCTYPE html [<!ENTITY boom "boom">]>'
    exc = failure(docgen.epub_file(tmp_path, chapter_doctype=doctype))
    assert "OEBPS/ch1.xhtml" in str(exc)


@pytest.mark.parametrize("name", ["bomb.xlsx", "bomb.docx", "bomb.pptx", "bomb.epub"])
def test_ratio_bomb(tmp_path: pathlib.Path, name: str, no_decompression: list[str]) -> None:
    path = docgen.ratio_bomb(tmp_path, name)
    exc = failure(path)
    assert str(exc).startswith("zip bomb: member 'xl/media/padding.xml' expands")
    assert no_decompression == []


def test_declared_size_bomb(tmp_path: pathlib.Path, no_decompression: list[str]) -> None:
    exc = failure(docgen.declared_size_bomb(tmp_path))
    assert str(exc).startswith("zip bomb: declared uncompressed size exceeds")
    assert no_decompression == []


def test_understated_size_reads_no_more_than_declared(tmp_path: pathlib.Path) -> None:
    exc = failure(docgen.understated_size_xlsx(tmp_path))
    assert "Bad CRC-32" in str(exc)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("hollow.xlsx", "unreadable spreadsheet: KeyError"),
        ("hollow.docx", "not a Word document: no word/document.xml"),
        ("hollow.pptx", "not a presentation: no presentation part"),
    ],
)
def test_zip_without_the_parts(tmp_path: pathlib.Path, name: str, reason: str) -> None:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "a zip, but not an Office document")
    assert str(failure(path)).startswith(reason)


def test_zip_level_encryption(tmp_path: pathlib.Path) -> None:
    path = docgen.simple_xlsx(tmp_path, [["secret"]])
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        first = z.infolist()[0]
    data[first.header_offset + 6] |= 0x1  # local header flag bits
    central = data.find(b"PK\x01\x02")
    data[central + 8] |= 0x1  # central directory flag bits
    path.write_bytes(bytes(data))
    exc = failure(path)
    assert isinstance(exc, EncryptedDocument)
    assert str(exc).startswith("encrypted zip container")


def test_guard_limits_are_options(tmp_path: pathlib.Path) -> None:
    path = docgen.simple_xlsx(tmp_path, [["a"]])
    info = registry.file_info(str(path), path.name)
    zipguard.check_container(str(path), info, ParseOptions())
    with pytest.raises(ParseFailed, match="declared uncompressed size exceeds 100 bytes"):
        zipguard.check_container(str(path), info, ParseOptions(max_unzipped_bytes=100))


def test_truncated_zip(tmp_path: pathlib.Path) -> None:
    path = docgen.simple_xlsx(tmp_path, [["a", 1]])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "zip" in str(failure(path))


# -- deep nesting --------------------------------------------------------------------------

Maker = Callable[[pathlib.Path], pathlib.Path]


@pytest.mark.parametrize(
    "make", [docgen.deep_docx, docgen.deep_pptx, docgen.deep_xlsx], ids=["docx", "pptx", "xlsx"]
)
def test_deep_nesting(tmp_path: pathlib.Path, make: Maker) -> None:
    path = make(tmp_path)
    outcome = attempt(path)
    if isinstance(outcome, ParseFailed):
        assert "\n" not in str(outcome)
    else:
        assert outcome


def test_moderate_nesting_still_parses(tmp_path: pathlib.Path) -> None:
    units = parse(docgen.deep_docx(tmp_path, depth=5))
    assert "core" in units[0].text


def _zip(path: pathlib.Path, parts: dict[str, str]) -> pathlib.Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in parts.items():
            z.writestr(name, text)
    return path


@pytest.mark.parametrize("empty", ["", "\n", "  \r\n\t"])
def test_an_empty_xml_part_is_no_malformed_one(tmp_path: pathlib.Path, empty: str) -> None:
    """OpenOffice and LibreOffice leave an empty
    Configurations2/accelerator/current.xml in most ODF files: 12 real ODF
    files were refused for it.  It declares nothing; a part that does, or
    that is not XML at all, is still refused."""
    content = '<?xml version="1.0"?><office:document-content xmlns:office="urn:x"/>'
    path = _zip(
        tmp_path / "doc.odt",
        {"content.xml": content, "Configurations2/accelerator/current.xml": empty},
    )
    info = registry.file_info(str(path), path.name)
    zipguard.check_container(str(path), info, ParseOptions())
    bad = _zip(tmp_path / "bad.odt", {"content.xml": content, "styles.xml": "not xml <"})
    with pytest.raises(ParseFailed, match="malformed XML part 'styles.xml'"):
        zipguard.check_container(str(bad), registry.file_info(str(bad), bad.name), ParseOptions())
    bomb = _zip(
        tmp_path / "bomb.odt",
        {"content.xml": '<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>', "empty.xml": empty},
    )
    info = registry.file_info(str(bomb), bomb.name)
    with pytest.raises(ParseFailed, match="internal subset"):
        zipguard.check_container(str(bomb), info, ParseOptions(), public_doctypes=True)
