"""A small, realistic sample workspace for ``make demo`` and for tests.

``build_sample_workspace(dest)`` writes::

    reports/q3-report.pdf      12 pages; page 7 states the EMEA churn figure
    budget.xlsx                Sheet1 (labels, numbers, B12 = 1200, C12 = =B12*2)
                               and Summary (a formula over Sheet1), cached values set
    notes/meeting memo.docx    heading, paragraphs, a table
    notes/café.txt             a non-ASCII file name
    deck/pitch.pptx            3 slides; slide 2 has the customer target, slide 3 notes
    README.md, src/analysis.py, data/sales.csv

openpyxl writes formulas without cached values; ``set_cached_values`` puts
them into the saved file the way Excel would, so tests that re-save
``budget.xlsx`` with openpyxl can restore them.
"""

from __future__ import annotations

import io
import logging
import pathlib
import posixpath
import zipfile
from collections.abc import Mapping

log = logging.getLogger(__name__)

CHURN_SENTENCE = "Churn in the EMEA segment fell to 3.2% in Q3."
TARGET_SENTENCE = "Target: 40 enterprise customers"

_NS_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_NS_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"

CellValue = int | float | str | bool

BUDGET_ROWS: list[tuple[str, int]] = [
    ("Salaries", 5200),
    ("Rent", 1800),
    ("Travel", 640),
    ("Software", 890),
    ("Hardware", 450),
    ("Training", 300),
    ("Marketing", 1500),
    ("Legal", 700),
    ("Insurance", 350),
    ("Utilities", 260),
    ("Contingency", 1200),
]


def build_sample_workspace(dest: pathlib.Path) -> None:
    """Write the sample files under ``dest`` (created if missing)."""
    dest.mkdir(parents=True, exist_ok=True)
    for sub in ("reports", "notes", "deck", "src", "data"):
        (dest / sub).mkdir(exist_ok=True)
    write_report_pdf(dest / "reports" / "q3-report.pdf")
    write_budget_xlsx(dest / "budget.xlsx")
    write_memo_docx(dest / "notes" / "meeting memo.docx")
    write_pitch_pptx(dest / "deck" / "pitch.pptx")
    (dest / "README.md").write_text(_README, encoding="utf-8")
    (dest / "src" / "analysis.py").write_text(_ANALYSIS, encoding="utf-8")
    (dest / "data" / "sales.csv").write_text(_SALES, encoding="utf-8")
    (dest / "notes" / "café.txt").write_text(_CAFE, encoding="utf-8")
    log.debug("sample workspace written to %s", dest)


def write_report_pdf(path: pathlib.Path) -> None:
    import pymupdf

    topics = [
        "Executive summary",
        "Revenue by region",
        "Gross margin",
        "Operating expenses",
        "Headcount",
        "Product usage",
        "Customer retention",
        "Pipeline",
        "Cash flow",
        "Risks",
        "Outlook",
        "Appendix",
    ]
    doc = pymupdf.open()
    for number, topic in enumerate(topics, start=1):
        page = doc.new_page()
        lines = [
            f"Q3 Report - {topic}",
            "",
            f"This section covers {topic.lower()} for the third quarter.",
            "Figures are unaudited and rounded to the nearest thousand.",
        ]
        if number == 7:
            lines += ["", CHURN_SENTENCE, "Retention in North America held steady at 96%."]
        lines += ["", f"Page {number} of {len(topics)}"]
        page.insert_text((72, 72), "\n".join(lines), fontsize=11)
    doc.set_metadata({"title": "Q3 Report", "author": "Finance"})
    doc.save(str(path))
    doc.close()


def write_budget_xlsx(path: pathlib.Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    sheet = wb.active
    assert sheet is not None
    sheet.title = "Sheet1"
    sheet["A1"], sheet["B1"], sheet["C1"] = "Item", "Amount", "Doubled"
    for row, (label, amount) in enumerate(BUDGET_ROWS, start=2):
        sheet.cell(row=row, column=1, value=label)
        sheet.cell(row=row, column=2, value=amount)
    sheet["C12"] = "=B12*2"
    summary = wb.create_sheet("Summary")
    summary["A1"], summary["B1"] = "Total", "=SUM(Sheet1!B2:B12)"
    summary["A2"], summary["B2"] = "Contingency doubled", "=Sheet1!C12"
    wb.save(path)
    total = sum(amount for _, amount in BUDGET_ROWS)
    set_cached_values(
        path,
        {("Sheet1", "C12"): 2400, ("Summary", "B1"): total, ("Summary", "B2"): 2400},
    )


def set_cached_values(path: pathlib.Path, values: Mapping[tuple[str, str], CellValue]) -> None:
    """Store cached results for formula cells, in place: ``{("Sheet1", "C12"): 2400}``.

    Rewrites the ``<v>`` of each named cell (which must exist in the sheet XML,
    as every cell openpyxl saved does) and keeps every other part byte for byte.
    """
    from lxml import etree

    with zipfile.ZipFile(path) as archive:
        parts = {info.filename: archive.read(info) for info in archive.infolist()}
        infos = archive.infolist()
    targets = _sheet_parts(parts)
    by_part: dict[str, dict[str, CellValue]] = {}
    for (sheet, coord), value in values.items():
        if sheet not in targets:
            raise KeyError(f"no sheet {sheet!r} in {path.name}")
        by_part.setdefault(targets[sheet], {})[coord.upper()] = value
    for part, cells in by_part.items():
        root = etree.fromstring(parts[part])
        for coord, value in cells.items():
            found = root.find(f".//{{{_NS_MAIN}}}c[@r='{coord}']")
            if found is None:
                raise KeyError(f"no cell {coord} in {part}")
            _set_cached(found, value)
        parts[part] = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for info in infos:
            out.writestr(info, parts[info.filename], compress_type=zipfile.ZIP_DEFLATED)
    path.write_bytes(buffer.getvalue())


def _set_cached(cell: object, value: CellValue) -> None:
    from lxml import etree

    assert isinstance(cell, etree._Element)
    for old in cell.findall(f"{{{_NS_MAIN}}}v"):
        cell.remove(old)
    if isinstance(value, bool):
        kind, text = "b", "1" if value else "0"
    elif isinstance(value, int | float):
        kind, text = None, repr(value)
    else:
        kind, text = "str", value
    if kind is None:
        cell.attrib.pop("t", None)
    else:
        cell.set("t", kind)
    v = etree.SubElement(cell, f"{{{_NS_MAIN}}}v")
    v.text = text


def _sheet_parts(parts: Mapping[str, bytes]) -> dict[str, str]:
    """Sheet name -> zip member of its XML, following workbook.xml and its rels."""
    from lxml import etree

    workbook = etree.fromstring(parts["xl/workbook.xml"])
    rels = etree.fromstring(parts["xl/_rels/workbook.xml.rels"])
    target_of = {
        rel.get("Id"): rel.get("Target", "") for rel in rels.iter(f"{{{_NS_PKG_REL}}}Relationship")
    }
    result = {}
    for sheet in workbook.iter(f"{{{_NS_MAIN}}}sheet"):
        target = target_of[sheet.get(f"{{{_NS_REL}}}id")]
        member = target.lstrip("/") if target.startswith("/") else posixpath.join("xl", target)
        result[sheet.get("name", "")] = posixpath.normpath(member)
    return result


def write_memo_docx(path: pathlib.Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Meeting memo: Q4 planning", level=1)
    document.add_paragraph("Attendees: Dana (Finance), Ravi (Sales), Mei (Product).")
    document.add_paragraph(
        "We agreed to move the pricing review to October and to hire two account "
        "executives for the EMEA team."
    )
    document.add_heading("Action items", level=2)
    table = document.add_table(rows=1, cols=3)
    for cell, text in zip(table.rows[0].cells, ("Owner", "Task", "Due"), strict=True):
        cell.text = text
    for owner, task, due in [
        ("Dana", "Update the budget forecast", "2024-10-04"),
        ("Ravi", "Draft the EMEA hiring plan", "2024-10-11"),
        ("Mei", "Share the pricing proposal", "2024-10-18"),
    ]:
        cells = table.add_row().cells
        cells[0].text, cells[1].text, cells[2].text = owner, task, due
    document.add_paragraph("Next meeting: Thursday, same time.")
    document.save(str(path))


def write_pitch_pptx(path: pathlib.Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    title_layout, content_layout = deck.slide_layouts[0], deck.slide_layouts[1]

    first = deck.slides.add_slide(title_layout)
    first.shapes.title.text = "Acme Analytics"
    first.placeholders[1].text = "Series A pitch, October"

    second = deck.slides.add_slide(content_layout)
    second.shapes.title.text = "Go-to-market"
    body = second.placeholders[1].text_frame
    body.text = TARGET_SENTENCE
    body.add_paragraph().text = "Channel: direct sales in EMEA and North America"

    third = deck.slides.add_slide(deck.slide_layouts[5])
    third.shapes.title.text = "Financials"
    rows = [("Year", "Revenue"), ("2024", "1.2M"), ("2025", "3.5M")]
    shape = third.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            shape.table.cell(r, c).text = text
    third.notes_slide.notes_text_frame.text = "Mention the signed letters of intent."
    deck.save(str(path))


_README = """\
# Sample workspace

Files for trying swfs: a quarterly report, a budget, meeting notes, a pitch
deck, some code and data.
"""

_ANALYSIS = '''\
"""Summarise monthly sales by region."""

import csv
from collections import defaultdict


def totals(path):
    by_region = defaultdict(float)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            by_region[row["region"]] += float(row["amount"])
    return dict(by_region)
'''

_SALES = """\
month,region,amount
2024-07,EMEA,120500
2024-07,NA,210300
2024-08,EMEA,118900
2024-08,NA,205100
2024-09,EMEA,131200
2024-09,NA,219800
"""

_CAFE = """\
Café notes: the espresso machine on floor 3 is fixed.
Réunion déplacée à jeudi.
"""
