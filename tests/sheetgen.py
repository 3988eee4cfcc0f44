"""Spreadsheet fixtures written the way real programs write them, at test time.

XlsxWriter writes what Excel writes (a shared-string table, comments, charts,
hidden sheets, merged ranges, defined names, cached formula results);
LibreOffice converts that file to .xls, .ods and its own .xlsx; raw OOXML
parts stand in where no writer exists (strict OOXML, hostile workbooks).
"""

from __future__ import annotations

import datetime
import os
import pathlib
import shutil
import subprocess
import zipfile

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")


def excel_like_xlsx(path: pathlib.Path) -> pathlib.Path:
    import xlsxwriter

    wb = xlsxwriter.Workbook(str(path))
    wb.set_properties({"author": "Ann Analyst"})
    data = wb.add_worksheet("Data")
    bold = wb.add_format({"bold": True})
    pct = wb.add_format({"num_format": "0.0%"})
    day = wb.add_format({"num_format": "yyyy-mm-dd"})
    stamp = wb.add_format({"num_format": "yyyy-mm-dd hh:mm"})
    wrap = wb.add_format({"text_wrap": True})
    data.write_row("A1", ["Region", "Revenue", "Share"], bold)
    for row, (region, revenue) in enumerate([("North", 1200), ("South", 800), ("East", 500)], 2):
        data.write(f"A{row}", region)
        data.write(f"B{row}", revenue)
        data.write_formula(f"C{row}", f"=B{row}/SUM($B$2:$B$4)", pct, revenue / 2500)
    data.write_formula("B5", "=SUM(B2:B4)", None, 2500)
    data.write_formula("B6", "=B5/0", None, "#DIV/0!")
    data.write_formula("B7", "=#REF!+1", None, "#REF!")
    data.write("D2", 0.125, pct)
    data.write_datetime("D3", datetime.datetime(2024, 3, 5), day)
    data.write_datetime("D4", datetime.datetime(2024, 3, 5, 14, 30), stamp)
    data.write_boolean("D5", True)
    data.write("E1", "Total\nrevenue", wrap)
    data.write_rich_string("E2", "plain ", bold, "bold", " tail")
    data.write_comment("B5", "Checked against the ledger", {"author": "Ann Analyst"})
    data.merge_range("A9:C9", "Merged heading")
    data.write("A10", 0.1 + 0.2)
    chart = wb.add_chart({"type": "column"})
    chart.add_series(
        {"name": "=Data!$B$1", "categories": "=Data!$A$2:$A$4", "values": "=Data!$B$2:$B$4"}
    )
    chart.set_title({"name": "Revenue by region"})
    sheet = wb.add_chartsheet("Chart1")
    sheet.set_chart(chart)
    hidden = wb.add_worksheet("Hidden")
    hidden.write("A1", "hidden text")
    hidden.hide()
    secret = wb.add_worksheet("Secret")
    secret.write("A1", "very hidden text")
    secret.very_hidden()
    slash = wb.add_worksheet("Q1-Q2 plan")
    slash.write("A1", "plan")
    wb.define_name("TotalRevenue", "=Data!$B$5")
    wb.define_name("Data!LocalRate", "=0.2")
    wb.close()
    return path


def soffice_convert(src: pathlib.Path, fmt: str, outdir: pathlib.Path) -> pathlib.Path:
    """``soffice --headless --convert-to fmt`` with a profile of its own."""
    assert SOFFICE is not None
    outdir.mkdir(parents=True, exist_ok=True)
    profile = outdir / f"profile-{fmt.split(':')[0]}"
    subprocess.run(
        [
            SOFFICE,
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--norestore",
            "--convert-to",
            fmt,
            "--outdir",
            str(outdir),
            str(src),
        ],
        check=True,
        timeout=240,
        capture_output=True,
        env={**os.environ, "HOME": str(outdir)},
    )
    out = outdir / f"{src.stem}.{fmt.split(':')[0]}"
    assert out.exists(), f"soffice wrote no {out.name}"
    return out


_STRICT_SML = "http://purl.oclc.org/ooxml/spreadsheetml/main"
_STRICT_REL = "http://purl.oclc.org/ooxml/officeDocument/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_CT = "http://schemas.openxmlformats.org/package/2006/content-types"


def strict_xlsx(path: pathlib.Path) -> pathlib.Path:
    """A strict OOXML workbook (ISO/IEC 29500 strict namespaces), as Excel
    saves with "Strict Open XML Spreadsheet": shared strings, a number, a
    formula with its cached value, an ISO date cell."""
    head = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    parts = {
        "[Content_Types].xml": (
            f'{head}<Types xmlns="{_CT}">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
            '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
            "</Types>"
        ),
        "_rels/.rels": (
            f'{head}<Relationships xmlns="{_PKG_REL}">'
            f'<Relationship Id="rId1" Type="{_STRICT_REL}/officeDocument" '
            'Target="xl/workbook.xml"/></Relationships>'
        ),
        "xl/workbook.xml": (
            f'{head}<workbook xmlns="{_STRICT_SML}" xmlns:r="{_STRICT_REL}" conformance="strict">'
            '<sheets><sheet name="Strict Sheet" sheetId="1" r:id="rId1"/></sheets>'
            "<definedNames>"
            "<definedName name=\"Amount\">'Strict Sheet'!$B$1</definedName>"
            "</definedNames></workbook>"
        ),
        "xl/_rels/workbook.xml.rels": (
            f'{head}<Relationships xmlns="{_PKG_REL}">'
            f'<Relationship Id="rId1" Type="{_STRICT_REL}/worksheet" '
            'Target="worksheets/sheet1.xml"/>'
            f'<Relationship Id="rId2" Type="{_STRICT_REL}/sharedStrings" '
            'Target="sharedStrings.xml"/></Relationships>'
        ),
        "xl/sharedStrings.xml": (
            f'{head}<sst xmlns="{_STRICT_SML}" count="1" uniqueCount="1">'
            "<si><t>strict text</t></si></sst>"
        ),
        "xl/worksheets/sheet1.xml": (
            f'{head}<worksheet xmlns="{_STRICT_SML}"><sheetData>'
            '<row r="1"><c r="A1" t="s"><v>0</v></c><c r="B1"><v>4200</v></c>'
            '<c r="C1"><f>B1*2</f><v>8400</v></c></row>'
            "</sheetData></worksheet>"
        ),
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in parts.items():
            z.writestr(name, text)
    return path


def _raw_workbook(
    path: pathlib.Path, sheets: list[str], parts: dict[str, bytes], strings: bytes | None
) -> None:
    sml = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    entries = "".join(
        f'<sheet name="S{i}" sheetId="{i + 1}" r:id="rId{i + 1}"/>' for i in range(len(sheets))
    )
    rels = "".join(
        f'<Relationship Id="rId{i + 1}" Type="{rel}/worksheet" Target="{target}"/>'
        for i, target in enumerate(sheets)
    )
    if strings is not None:
        rels += f'<Relationship Id="rIdS" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/>'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "[Content_Types].xml",
            f'<?xml version="1.0"?><Types xmlns="{_CT}">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
            'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>',
        )
        z.writestr(
            "_rels/.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{_PKG_REL}">'
            f'<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/>'
            "</Relationships>",
        )
        z.writestr(
            "xl/workbook.xml",
            f'<?xml version="1.0"?><workbook xmlns="{sml}" xmlns:r="{rel}">'
            f"<sheets>{entries}</sheets></workbook>",
        )
        z.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<?xml version="1.0"?><Relationships xmlns="{_PKG_REL}">{rels}</Relationships>',
        )
        for name, data in parts.items():
            z.writestr(name, data)
        if strings is not None:
            z.writestr("xl/sharedStrings.xml", strings)


_SML = b"http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def shared_string_bomb_xlsx(path: pathlib.Path, mib: int = 512) -> pathlib.Path:
    """sharedStrings.xml holding one string of ``mib`` MiB (a few hundred KiB zipped)."""
    sheet = b'<worksheet xmlns="' + _SML + b'"><sheetData><row r="1"><c r="A1" t="s"><v>0</v></c>'
    sheet += b"</row></sheetData></worksheet>"
    sst = b'<sst xmlns="' + _SML + b'"><si><t>' + b"A" * (mib * 1024 * 1024) + b"</t></si></sst>"
    _raw_workbook(path, ["worksheets/sheet1.xml"], {"xl/worksheets/sheet1.xml": sheet}, sst)
    return path


def shared_string_fanout_xlsx(path: pathlib.Path, cells: int, kib: int) -> pathlib.Path:
    """One ``kib`` KiB shared string referenced by ``cells`` cells: small parts,
    big text (each reference becomes a line)."""
    rows = b"".join(
        b'<row r="%d"><c r="A%d" t="s"><v>0</v></c></row>' % (r, r) for r in range(1, cells + 1)
    )
    sheet = b'<worksheet xmlns="' + _SML + b'"><sheetData>' + rows + b"</sheetData></worksheet>"
    text = bytes(range(0x41, 0x5B)) * (kib * 1024 // 26)
    sst = b'<sst xmlns="' + _SML + b'"><si><t>' + text + b"</t></si></sst>"
    _raw_workbook(path, ["worksheets/sheet1.xml"], {"xl/worksheets/sheet1.xml": sheet}, sst)
    return path


def many_sheets_xlsx(path: pathlib.Path, sheets: int = 100_000) -> pathlib.Path:
    """``sheets`` sheet entries, all pointing at one small sheet part."""
    sheet = b'<worksheet xmlns="' + _SML + b'"><sheetData><row r="1"><c r="A1"><v>1</v></c>'
    sheet += b"</row></sheetData></worksheet>"
    _raw_workbook(
        path, ["worksheets/sheet1.xml"] * sheets, {"xl/worksheets/sheet1.xml": sheet}, None
    )
    return path
