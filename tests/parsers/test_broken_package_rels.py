"""A broken ``_rels/.rels`` in an OOXML package (issue 41).

The package relationships name the main part; when they are missing,
empty, cut short, not XML at all, or name a part that is not there, the
main part is found by its content type in ``[Content_Types].xml``, as
openpyxl does (it read such an .xlsx that swfs refused).  The packages are
written by XlsxWriter, python-docx and python-pptx; only their
``_rels/.rels`` is then replaced.  A ``_rels/.rels`` that declares an
entity is still refused.
"""

from __future__ import annotations

import pathlib
import zipfile

import pytest

from parsers import registry
from parsers._base import ParseFailed, ParseOptions, Unit

WRONG_TARGET = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    b'<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    b'relationships/officeDocument" Target="nowhere/main.xml"/></Relationships>'
)
BREAKAGES: dict[str, bytes | None] = {
    "missing": None,
    "empty": b"",
    "garbage": b"\x00\x01 not XML at all",
    "cut short": b"",  # filled in from the real part: its first half
    "wrong target": WRONG_TARGET,
}


def parse(path: pathlib.Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return registry.parse(str(path), info, ParseOptions())[1]


def written(folder: pathlib.Path, ext: str) -> tuple[pathlib.Path, str]:
    """A package as its usual writer makes it, and a line of its text."""
    path = folder / f"clear.{ext}"
    if ext == "xlsx":
        import xlsxwriter

        wb = xlsxwriter.Workbook(str(path))
        wb.add_worksheet("Data").write("A1", "rels survive")
        wb.close()
        return path, "Data!A1 = rels survive"
    if ext == "docx":
        import docx

        document = docx.Document()
        document.add_paragraph("rels survive")
        document.save(str(path))
        return path, "rels survive"
    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "rels survive"
    deck.save(str(path))
    return path, "# rels survive"


def with_rels(clear: pathlib.Path, out: pathlib.Path, rels: bytes | None, *, cut: bool) -> None:
    with zipfile.ZipFile(clear) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "_rels/.rels":
                if rels is None:
                    continue
                data = data[: len(data) // 2] if cut else rels
            dst.writestr(item.filename, data)


@pytest.mark.parametrize("ext", ["xlsx", "docx", "pptx"])
@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_main_part_found_by_content_type(tmp_path: pathlib.Path, ext: str, breakage: str) -> None:
    clear, line = written(tmp_path, ext)
    assert line in parse(clear)[0].text.splitlines()
    broken = tmp_path / f"broken.{ext}"
    with_rels(clear, broken, BREAKAGES[breakage], cut=breakage == "cut short")
    units = parse(broken)
    assert line in "\n".join(u.text for u in units).splitlines()


@pytest.mark.parametrize("ext", ["xlsx", "docx", "pptx"])
def test_package_rels_declaring_an_entity_is_still_refused(
    tmp_path: pathlib.Path, ext: str
) -> None:
    clear, _ = written(tmp_path, ext)
    hostile = tmp_path / f"hostile.{ext}"
    rels = b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa">]><Relationships>&a;'
    with_rels(clear, hostile, rels, cut=False)
    with pytest.raises(ParseFailed, match=r"_rels/\.rels.*(DOCTYPE|entity)"):
        parse(hostile)


@pytest.mark.parametrize("ext", ["xlsx", "docx", "pptx"])
def test_no_main_part_at_all_still_fails(tmp_path: pathlib.Path, ext: str) -> None:
    """Without relationships and without the content type, nothing to read."""
    clear, _ = written(tmp_path, ext)
    hollow = tmp_path / f"hollow.{ext}"
    with zipfile.ZipFile(clear) as src, zipfile.ZipFile(hollow, "w") as dst:
        for item in src.infolist():
            if item.filename == "_rels/.rels":
                continue
            data = src.read(item.filename)
            if item.filename == "[Content_Types].xml":
                data = data.replace(b".main+xml", b".gone+xml")
            if item.filename.startswith(("word/document", "ppt/presentation", "xl/workbook")):
                continue
            dst.writestr(item.filename, data)
    with pytest.raises(ParseFailed):
        parse(hollow)
