"""Fixture generators for parser tests: ordinary documents and hostile ones.

Each function writes one file into ``directory`` and returns its path.  They
are cheap (well under a second each) except ``million_cell_xlsx``, which is
used by a slow-marked memory test.
"""

from __future__ import annotations

import io
import json
import pathlib
import random
import struct
import zipfile

FACT = "The Zephyr-9 valve tolerates 417 kPa at 80 C."

_OOXML_CT = "http://schemas.openxmlformats.org/package/2006/content-types"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_DOC_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_SML = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_WML = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


# -- PDF ---------------------------------------------------------------------------------


def pdf_bytes(pages: int, *, fact_page: int | None = None, fact: str = FACT) -> bytes:
    import pymupdf

    doc = pymupdf.open()
    for number in range(1, pages + 1):
        page = doc.new_page()
        text = f"Section {number}\nOrdinary filler text for page {number}."
        if number == fact_page:
            text += "\n" + fact
        page.insert_text((72, 72), text, fontsize=11)
    data = doc.tobytes()
    doc.close()
    return bytes(data)


def pdf_with_fact(directory: pathlib.Path, pages: int = 40, fact_page: int = 17) -> pathlib.Path:
    path = directory / "manual.pdf"
    path.write_bytes(pdf_bytes(pages, fact_page=fact_page))
    return path


def encrypted_pdf(directory: pathlib.Path) -> pathlib.Path:
    import pymupdf

    doc = pymupdf.open("pdf", pdf_bytes(2, fact_page=1))
    path = directory / "secret.pdf"
    doc.save(
        str(path),
        encryption=pymupdf.PDF_ENCRYPT_AES_256,  # type: ignore[attr-defined]
        user_pw="user-secret",
        owner_pw="owner-secret",
    )
    doc.close()
    return path


def truncated_pdf(directory: pathlib.Path) -> pathlib.Path:
    data = pdf_bytes(10)
    path = directory / "truncated.pdf"
    path.write_bytes(data[: len(data) // 2])
    return path


def fuzzed_pdf(directory: pathlib.Path, seed: int, flips: int = 12) -> pathlib.Path:
    """A valid PDF with ``flips`` random bytes overwritten (deterministic per seed)."""
    rng = random.Random(seed)
    data = bytearray(pdf_bytes(5, fact_page=3))
    for _ in range(flips):
        data[rng.randrange(len(data))] = rng.randrange(256)
    path = directory / f"fuzzed-{seed}.pdf"
    path.write_bytes(bytes(data))
    return path


def _pdf_from_objects(objects: list[bytes], root: int = 1) -> bytes:
    """A PDF with a correct xref table around hand-written object bodies."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\n" % (len(objects) + 1, root)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def cyclic_pdf(directory: pathlib.Path) -> pathlib.Path:
    """A page tree whose /Pages node lists itself among its /Kids."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 2 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Length 0 >>\nstream\n\nendstream",
    ]
    path = directory / "cyclic.pdf"
    path.write_bytes(_pdf_from_objects(objects))
    return path


# -- zip containers: plumbing --------------------------------------------------------------


def _content_types(overrides: dict[str, str]) -> str:
    items = "".join(
        f'<Override PartName="/{part}" ContentType="{ctype}"/>' for part, ctype in overrides.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'<Types xmlns="{_OOXML_CT}">'
        '<Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        f"{items}</Types>"
    )


def _rels(targets: list[tuple[str, str]]) -> str:
    items = "".join(
        f'<Relationship Id="rId{n}" Type="{kind}" Target="{target}"/>'
        for n, (kind, target) in enumerate(targets, start=1)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'<Relationships xmlns="{_PKG_REL}">{items}</Relationships>'
    )


_OFFICE_DOC = _DOC_REL + "/officeDocument"
_XLSX_MAIN = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
_XLSX_SHEET = "application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"
_XLSX_STRINGS = "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
_DOCX_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"


def _write_xlsx(path: pathlib.Path, sheet_xml: str | bytes, *, strings: str | None = None) -> None:
    overrides = {"xl/workbook.xml": _XLSX_MAIN, "xl/worksheets/sheet1.xml": _XLSX_SHEET}
    targets = [(_DOC_REL + "/worksheet", "worksheets/sheet1.xml")]
    if strings is not None:
        overrides["xl/sharedStrings.xml"] = _XLSX_STRINGS
        targets.append((_DOC_REL + "/sharedStrings", "sharedStrings.xml"))
    workbook = (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_SML}" xmlns:r="{_DOC_REL}">'
        '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", _content_types(overrides))
        z.writestr("_rels/.rels", _rels([(_OFFICE_DOC, "xl/workbook.xml")]))
        z.writestr("xl/workbook.xml", workbook)
        z.writestr("xl/_rels/workbook.xml.rels", _rels(targets))
        z.writestr("xl/worksheets/sheet1.xml", sheet_xml)
        if strings is not None:
            z.writestr("xl/sharedStrings.xml", strings)


def _sheet(rows_xml: str, tail: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_SML}">'
        f"<sheetData>{rows_xml}</sheetData>{tail}</worksheet>"
    )


_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def _write_docx(path: pathlib.Path, body_xml: str, *, styles_xml: str | None = None) -> None:
    document = (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{_WML}" xmlns:mc="{_MC}">'
        f"<w:body>{body_xml}</w:body></w:document>"
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", _content_types({"word/document.xml": _DOCX_MAIN}))
        z.writestr("_rels/.rels", _rels([(_OFFICE_DOC, "word/document.xml")]))
        z.writestr("word/document.xml", document)
        if styles_xml is not None:
            z.writestr(
                "word/_rels/document.xml.rels", _rels([(_DOC_REL + "/styles", "styles.xml")])
            )
            z.writestr(
                "word/styles.xml",
                f'<?xml version="1.0" encoding="UTF-8"?><w:styles xmlns:w="{_WML}">'
                f"{styles_xml}</w:styles>",
            )


def _p(text: str, style: str | None = None, extra_props: str = "") -> str:
    props = f'<w:pStyle w:val="{style}"/>' if style else ""
    return f"<w:p><w:pPr>{props}{extra_props}</w:pPr><w:r><w:t>{text}</w:t></w:r></w:p>"


def rich_docx(directory: pathlib.Path) -> pathlib.Path:
    """Localised heading styles, lists, tracked changes, alternate content, nested tables."""
    styles = (
        '<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>'
        '<w:style w:type="paragraph" w:styleId="Body"><w:name w:val="Body Text"/></w:style>'
    )
    item = '<w:numPr><w:ilvl w:val="{0}"/><w:numId w:val="1"/></w:numPr>'
    nested = (
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>inner-a</w:t></w:r></w:p></w:tc>"
        "<w:tc><w:p><w:r><w:t>inner-b</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
    )
    body = (
        _p("Bericht", "berschrift1")
        + _p("Kapitel", "berschrift2")
        + _p("Plain body text.", "Body")
        + _p("first item", extra_props=item.format(0))
        + _p("sub item", extra_props=item.format(1))
        + "<w:p><w:r><w:t>kept </w:t></w:r><w:del><w:r><w:delText>REMOVED</w:delText></w:r>"
        "</w:del><w:ins><w:r><w:t>inserted</w:t></w:r></w:ins></w:p>"
        '<w:p><w:r><w:t xml:space="preserve">col1</w:t><w:tab/><w:t>col2</w:t></w:r></w:p>'
        '<w:p><w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:t>boxed once</w:t>'
        "</mc:Choice><mc:Fallback><w:t>boxed once</w:t></mc:Fallback></mc:AlternateContent>"
        "</w:r></w:p>"
        "<w:sdt><w:sdtContent>" + _p("inside a content control") + "</w:sdtContent></w:sdt>"
        "<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Key</w:t></w:r></w:p></w:tc>"
        "<w:tc><w:p><w:r><w:t>Value</w:t></w:r></w:p></w:tc></w:tr>"
        "<w:tr><w:tc><w:p><w:r><w:t>pipe | here</w:t></w:r></w:p></w:tc>"
        f"<w:tc>{nested}</w:tc></w:tr></w:tbl>"
    )
    path = directory / "rich.docx"
    _write_docx(path, body, styles_xml=styles)
    return path


def _replace_member(path: pathlib.Path, member: str, data: bytes | str) -> None:
    with zipfile.ZipFile(path) as z:
        parts = [(info, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info, content in parts:
            z.writestr(info.filename, data if info.filename == member else content)


# -- ordinary containers ------------------------------------------------------------------


def simple_xlsx(directory: pathlib.Path, rows: list[list[object]]) -> pathlib.Path:
    import openpyxl

    wb = openpyxl.Workbook()
    sheet = wb.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    path = directory / "simple.xlsx"
    wb.save(path)
    return path


def html_file(directory: pathlib.Path) -> pathlib.Path:
    path = directory / "page.html"
    path.write_text(
        "<html><head><title>T</title><script>var hidden = 'SCRIPT-ONLY';</script></head>"
        "<body><h1>Quarterly note</h1><p>Revenue grew <b>12%</b>.</p></body></html>",
        encoding="utf-8",
    )
    return path


def notebook_file(directory: pathlib.Path) -> pathlib.Path:
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Churn model\n"]},
            {
                "cell_type": "code",
                "metadata": {},
                "execution_count": 1,
                "outputs": [],
                "source": ["rate = 0.032\n"],
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = directory / "model.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    return path


def epub_file(directory: pathlib.Path, *, chapter_doctype: str = "") -> pathlib.Path:
    container = (
        '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    opf = (
        '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
        'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        '<dc:title>Field Guide</dc:title><dc:identifier id="id">x</dc:identifier></metadata>'
        '<manifest><item id="c1" href="ch1.xhtml" media-type="application/xhtml+xml"/>'
        '</manifest><spine><itemref idref="c1"/></spine></package>'
    )
    chapter = (
        f'<?xml version="1.0" encoding="utf-8"?>{chapter_doctype}'
        '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>One</title></head>'
        "<body><h1>Chapter one</h1><p>Owls hunt at dusk.</p></body></html>"
    )
    path = directory / "guide.epub"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", container, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/content.opf", opf, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/ch1.xhtml", chapter, compress_type=zipfile.ZIP_DEFLATED)
    return path


def formula_kinds_xlsx(directory: pathlib.Path) -> pathlib.Path:
    """Shared and array formulas, error, boolean and string results, as Excel writes them."""
    rows = (
        '<row r="1"><c r="A1"><v>1</v></c><c r="B1"><v>10</v></c>'
        '<c r="C1"><f t="shared" ref="C1:C3" si="0">A1*2</f><v>2</v></c>'
        '<c r="D1"><f t="array" ref="D1">SUM(A1:A3*B1:B3)</f><v>140</v></c>'
        '<c r="E1" t="e"><f>1/0</f><v>#DIV/0!</v></c></row>'
        '<row r="2"><c r="A2"><v>2</v></c><c r="B2"><v>20</v></c>'
        '<c r="C2"><f t="shared" si="0"/><v>4</v></c>'
        '<c r="E2" t="b"><f>A2&gt;1</f><v>1</v></c></row>'
        '<row r="3"><c r="A3"><v>3</v></c><c r="B3"><v>30</v></c>'
        '<c r="C3"><f t="shared" si="0"/><v>6</v></c>'
        '<c r="E3" t="str"><f>"x"&amp;A3</f><v>x3</v></c>'
        '<c r="F3" t="inlineStr"><is><t>inline text</t></is></c></row>'
    )
    path = directory / "formulas.xlsx"
    _write_xlsx(path, _sheet(rows))
    return path


def layout_pptx(directory: pathlib.Path) -> pathlib.Path:
    """Shapes added out of reading order, a group, a line break, and a chart-free slide."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    slide.shapes.title.text = "Layout test"
    low = slide.shapes.add_textbox(Inches(1), Inches(6), Inches(4), Inches(1))
    low.text_frame.text = "bottom box"
    high = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
    high.text_frame.text = "top box"
    right = slide.shapes.add_textbox(Inches(6), Inches(2), Inches(3), Inches(1))
    right.text_frame.text = "top right box"
    group = slide.shapes.add_group_shape()
    inner = group.shapes.add_textbox(Inches(1), Inches(4), Inches(4), Inches(1))
    paragraph = inner.text_frame.paragraphs[0]
    paragraph.add_run().text = "grouped"
    paragraph.add_line_break()
    paragraph.add_run().text = "second line"
    deck.slides.add_slide(deck.slide_layouts[6])  # blank
    path = directory / "layout.pptx"
    deck.save(str(path))
    return path


def media_heavy_pptx(directory: pathlib.Path, mib: int = 32) -> pathlib.Path:
    """The sample-like deck with an incompressible ``mib`` MiB video linked from slide 1."""
    from pptx import Presentation

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Product demo"
    slide.placeholders[1].text = "Watch the recording"
    path = directory / "demo.pptx"
    deck.save(str(path))
    rels_member = "ppt/slides/_rels/slide1.xml.rels"
    with zipfile.ZipFile(path) as z:
        rels = z.read(rels_member).decode()
    video_rel = f'<Relationship Id="rId99" Type="{_DOC_REL}/video" Target="../media/video1.bin"/>'
    _replace_member(
        path, rels_member, rels.replace("</Relationships>", video_rel + "</Relationships>")
    )
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("ppt/media/video1.bin", random.Random(1).randbytes(mib * 1024 * 1024))
    return path


# -- hostile containers ---------------------------------------------------------------------


def non_zip_xlsx(directory: pathlib.Path) -> pathlib.Path:
    path = directory / "fake.xlsx"
    path.write_text("Name,Amount\nRent,1800\n", encoding="utf-8")
    return path


def random_docx(directory: pathlib.Path, seed: int = 7) -> pathlib.Path:
    path = directory / "noise.docx"
    path.write_bytes(random.Random(seed).randbytes(64 * 1024))
    return path


OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def ole_named(directory: pathlib.Path, name: str) -> pathlib.Path:
    """An OLE header (as Office writes for password-protected OOXML) under ``name``."""
    path = directory / name
    path.write_bytes(OLE_MAGIC + bytes(4096 - len(OLE_MAGIC)))
    return path


_FREESECT, _ENDOFCHAIN, _FATSECT, _NOSTREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF


def ole_file(directory: pathlib.Path, name: str, streams: dict[str, bytes]) -> pathlib.Path:
    """A minimal OLE compound file (CFB v3) holding ``streams`` at the root.

    Streams are padded to 4096 bytes so that none lives in the mini stream;
    one FAT sector and one directory sector: up to 3 streams, ~60 KB.
    """
    assert len(streams) <= 3
    sector = 512
    data_sectors: list[bytes] = []
    entries = [_ole_entry("Root Entry", 5, _ENDOFCHAIN, 0, child=1 if streams else _NOSTREAM)]
    fat = [_FATSECT, _ENDOFCHAIN]
    for index, (stream_name, payload) in enumerate(streams.items(), start=1):
        padded = payload.ljust(max(4096, len(payload)), b"\0")
        padded = padded.ljust(-(-len(padded) // sector) * sector, b"\0")
        first = 2 + len(data_sectors)
        count = len(padded) // sector
        data_sectors += [padded[i * sector : (i + 1) * sector] for i in range(count)]
        fat += [first + i + 1 for i in range(count - 1)] + [_ENDOFCHAIN]
        right = index + 1 if index < len(streams) else _NOSTREAM
        entries.append(_ole_entry(stream_name, 2, first, len(padded), right=right))
    assert len(fat) <= sector // 4
    header = bytearray(sector)
    header[0:8] = OLE_MAGIC
    struct.pack_into("<HHHHH", header, 24, 0x3E, 3, 0xFFFE, 9, 6)
    struct.pack_into("<IIII", header, 44, 1, 1, 0, 4096)
    struct.pack_into("<IIII", header, 60, _ENDOFCHAIN, 0, _ENDOFCHAIN, 0)
    struct.pack_into("<I", header, 76, 0)
    for slot in range(1, 109):
        struct.pack_into("<I", header, 76 + 4 * slot, _FREESECT)
    fat_sector = struct.pack(f"<{sector // 4}I", *(fat + [_FREESECT] * (sector // 4 - len(fat))))
    table = b"".join(entries) + _ole_entry("", 0, 0, 0) * (4 - len(entries))
    path = directory / name
    path.write_bytes(bytes(header) + fat_sector + table + b"".join(data_sectors))
    return path


def _ole_entry(
    name: str, kind: int, start: int, size: int, *, right: int = _NOSTREAM, child: int = _NOSTREAM
) -> bytes:
    entry = bytearray(128)
    encoded = name.encode("utf-16-le")
    entry[0 : len(encoded)] = encoded
    struct.pack_into("<HBB", entry, 64, len(encoded) + 2 if name else 0, kind, 1)
    struct.pack_into("<III", entry, 68, _NOSTREAM, right if kind else _NOSTREAM, child)
    struct.pack_into("<IQ", entry, 116, start, size)
    return bytes(entry)


def word_fib(*, encrypted: bool) -> bytes:
    """The start of a Word binary FIB: wIdent, nFib, ..., flags with fEncrypted (bit 8)."""
    flags = 0x0100 if encrypted else 0
    return struct.pack("<HHHHHH", 0xA5EC, 0x00C1, 0, 0x0409, 0, flags)


def biff_stream(*, encrypted: bool) -> bytes:
    """A BIFF8 workbook stream start: BOF, then FILEPASS when encrypted, then EOF."""
    records = struct.pack("<HH", 0x0809, 16) + bytes(16)
    if encrypted:
        records += struct.pack("<HH", 0x002F, 6) + bytes(6)
    return records + struct.pack("<HH", 0x000A, 0)


def outlook_msg(directory: pathlib.Path, subject: str, sender: str, body: str) -> pathlib.Path:
    """An Outlook .msg with Unicode subject, sender and body property streams."""

    def prop(text: str) -> bytes:
        data = text.encode("utf-16-le")
        space = " ".encode("utf-16-le")
        return data + space * ((4096 - len(data)) // 2)  # padding a reader strips

    streams = {
        "__substg1.0_0037001F": prop(subject),
        "__substg1.0_0C1F001F": prop(sender),
        "__substg1.0_1000001F": prop(body),
    }
    return ole_file(directory, "mail.msg", streams)


BILLION_LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n <!ENTITY lol "lol">\n'
    + "".join(
        f' <!ENTITY lol{n} "{("&lol" + (str(n - 1) if n > 1 else "") + ";") * 10}">\n'
        for n in range(1, 10)
    )
    + f']>\n<sst xmlns="{_SML}" count="1" uniqueCount="1"><si><t>&lol9;</t></si></sst>'
)


def entity_bomb_xlsx(directory: pathlib.Path) -> pathlib.Path:
    """A workbook whose sharedStrings.xml is the billion-laughs entity bomb."""
    path = directory / "laughs.xlsx"
    _write_xlsx(
        path, _sheet('<row r="1"><c r="A1" t="s"><v>0</v></c></row>'), strings=BILLION_LAUGHS
    )
    return path


def ratio_bomb(directory: pathlib.Path, name: str = "bomb.xlsx", mib: int = 64) -> pathlib.Path:
    """A workbook whose sheet part is ``mib`` MiB of zeros deflated (~1000x ratio)."""
    path = directory / name
    _write_xlsx(path, _sheet('<row r="1"><c r="A1"><v>1</v></c></row>'))
    zeros = bytes(1024 * 1024)
    with (
        zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED, compresslevel=1) as z,
        z.open("xl/media/padding.xml", "w") as member,
    ):
        for _ in range(mib):
            member.write(zeros)
    return path


def declared_size_bomb(
    directory: pathlib.Path, name: str = "huge.docx", declared: int = 3 * 1024**3
) -> pathlib.Path:
    """A document whose main part declares ``declared`` uncompressed bytes (headers patched).

    Nothing large is ever compressed: only the size fields lie, which is what
    a guard that reads declared sizes must catch before decompressing.
    """
    path = directory / name
    _write_docx(path, "<w:p><w:r><w:t>hello</w:t></w:r></w:p>")
    _patch_declared_size(path, "word/document.xml", declared)
    return path


def understated_size_xlsx(directory: pathlib.Path, mib: int = 64) -> pathlib.Path:
    """A sheet part that inflates to ``mib`` MiB but declares only its first KiB.

    The guard sees a harmless size; the defence is that zipfile never returns
    more than the declared size (and then fails the CRC check).
    """
    path = directory / "liar.xlsx"
    sheet = _sheet('<row r="1"><c r="A1"><v>1</v></c></row>').encode()
    _write_xlsx(path, sheet)
    _replace_member(path, "xl/worksheets/sheet1.xml", sheet + b" " * (mib * 1024 * 1024))
    _patch_declared_size(path, "xl/worksheets/sheet1.xml", 1024)
    return path


def _patch_declared_size(path: pathlib.Path, member: str, size: int) -> None:
    """Overwrite ``member``'s uncompressed size in its local and central headers."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        target = z.getinfo(member)
    struct.pack_into("<I", data, target.header_offset + 22, size)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        name_len = struct.unpack_from("<H", data, central + 28)[0]
        if data[central + 46 : central + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, central + 24, size)
            break
        central = data.find(b"PK\x01\x02", central + 4)
    path.write_bytes(bytes(data))


def deep_docx(directory: pathlib.Path, depth: int = 2000) -> pathlib.Path:
    """Tables nested ``depth`` levels deep."""
    inner = "<w:p><w:r><w:t>core</w:t></w:r></w:p>"
    body = "<w:tbl><w:tr><w:tc>" * depth + inner + "</w:tc></w:tr></w:tbl>" * depth
    path = directory / "deep.docx"
    _write_docx(path, body + "<w:p/>")
    return path


def deep_xlsx(directory: pathlib.Path, depth: int = 30_000) -> pathlib.Path:
    """A sheet with one cell and an extension list nested ``depth`` elements deep.

    The default stays under the zip guard's ratio check (the part is < 1 MiB),
    so the parser itself meets the nesting.
    """
    tail = "<extLst>" + '<ext uri="{0}">' * depth + "</ext>" * depth + "</extLst>"
    path = directory / "deep.xlsx"
    _write_xlsx(path, _sheet('<row r="1"><c r="A1"><v>7</v></c></row>', tail))
    return path


def deep_pptx(directory: pathlib.Path, depth: int = 2000) -> pathlib.Path:
    """A one-slide deck whose shapes are groups nested ``depth`` levels deep."""
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[6])
    buffer = io.BytesIO()
    deck.save(buffer)
    path = directory / "deep.pptx"
    path.write_bytes(buffer.getvalue())
    ns = (
        'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
        'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"'
    )
    group_open = (
        '<p:grpSp><p:nvGrpSpPr><p:cNvPr id="{n}" name="g{n}"/><p:cNvGrpSpPr/><p:nvPr/>'
        "</p:nvGrpSpPr><p:grpSpPr/>"
    )
    nested = "".join(group_open.format(n=n + 2) for n in range(depth)) + "</p:grpSp>" * depth
    slide = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><p:sld {ns}><p:cSld><p:spTree>'
        '<p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr>'
        f"<p:grpSpPr/>{nested}</p:spTree></p:cSld></p:sld>"
    )
    _replace_member(path, "ppt/slides/slide1.xml", slide)
    return path


def million_cell_xlsx(directory: pathlib.Path, rows: int = 100_000, cols: int = 10) -> pathlib.Path:
    """``rows * cols`` cells written as raw XML (openpyxl would take minutes).

    Column J holds a formula with a cached value; the rest are numbers and
    inline strings.
    """
    path = directory / "million.xlsx"
    _write_xlsx(path, _sheet(""))  # the skeleton; the sheet is replaced below
    letters = [chr(ord("A") + c) for c in range(cols)]
    with zipfile.ZipFile(path) as z:
        parts = [(info.filename, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for name, content in parts:
            if name != "xl/worksheets/sheet1.xml":
                z.writestr(name, content)
        with z.open("xl/worksheets/sheet1.xml", "w") as sheet:
            prolog = f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_SML}">'
            dimension = f'<dimension ref="A1:{letters[cols - 1]}{rows}"/>'
            sheet.write((prolog + dimension).encode() + b"<sheetData>")
            for r in range(1, rows + 1):
                cells = [f'<c r="A{r}" t="inlineStr"><is><t>row {r}</t></is></c>']
                cells += [
                    f'<c r="{letters[c]}{r}"><v>{r * c}.5</v></c>' for c in range(1, cols - 1)
                ]
                cells.append(f'<c r="{letters[cols - 1]}{r}"><f>B{r}*2</f><v>{r * 2 + 1}</v></c>')
                sheet.write(f'<row r="{r}">{"".join(cells)}</row>'.encode())
            sheet.write(b"</sheetData></worksheet>")
    return path
