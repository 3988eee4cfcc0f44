"""Parser vectors for Word and PowerPoint: for each fixture, what each unit (by
locator) must contain and must not contain.

Fixtures come from python-docx and python-pptx, from raw OOXML parts where no
Python writer exists (tests/officegen.py), and from LibreOffice re-saving them
as Word does not: a second real writer with its own habits.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from typing import TypeVar

import pytest

from parsers import registry
from parsers._base import ParseOptions, Unit
from swfs.review.diffs import units_diff
from tests import officegen

T = TypeVar("T")

# (locator, must include, must not include)
Vector = tuple[str, list[str], list[str]]


def parse(path: pathlib.Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    _, units = registry.parse(str(path), info, ParseOptions())
    return units


def check(units: list[Unit], vectors: list[Vector]) -> None:
    by_locator = {u.locator: u for u in units}
    assert len(by_locator) == len(units), [u.locator for u in units]
    for locator, included, excluded in vectors:
        assert locator in by_locator, (locator, list(by_locator))
        text = by_locator[locator].text
        for needle in included:
            assert needle in text, (locator, needle, text)
        for needle in excluded:
            assert needle not in text, (locator, needle, text)


def holders(units: list[Unit], needle: str) -> list[str]:
    return [u.locator for u in units if needle in u.text]


# -- Word, written by python-docx ---------------------------------------------------------------

CONTRACT: list[Vector] = [
    (
        # The Title is a heading in the text, not a section nor part of any path.
        "preamble",
        [
            "Prepared for the board.\n\n# Master Services Agreement\n\n"
            "This agreement is between Acme and Globex.\n"
        ],
        ["ACME CONFIDENTIAL", "Payment terms"],
    ),
    ("h=Clause 7", ["# Clause 7\n", "Payment terms follow."], ["7.2", "Master Services"]),
    (
        "h=Clause 7/7.2",
        [
            "## 7.2\n",
            "Late invoices accrue interest at 1.5 percent[^c1] per month.",
            '[^c1]: comment by Dana Lee on "interest at 1.5 percent": Check the rate with finance.',
        ],
        ["Reconciled", "Payment terms"],
    ),
    (
        'h=Clause 7/Q1%2FQ2 "true-up"',
        ['## Q1/Q2 "true-up"\n', "Reconciled twice a year."],
        ["Check the rate", "Late invoices"],
    ),
    (
        "h=Clause 8",
        [
            "| Item | Qty | Price |\n| --- | --- | --- |\n",
            "| Setup fee |  | 900 |\n",  # merged over two columns: the price stays third
            "| Licence | 3 | 1200 |",
            "[image: Signatures of both parties]",
        ],
        ["ACME CONFIDENTIAL", "Contract 2024-117"],
    ),
    (
        "headers-footers",
        [
            "## Header\n\nACME CONFIDENTIAL",
            "## Footer\n\nContract 2024-117",
            "## Header (first page)\n\nCover page header",
            "## Footer (even pages)\n\nEven page footer",
        ],
        ["Late invoices", "Prepared for the board."],
    ),
]


def test_docx_sections_by_heading_path(tmp_path: pathlib.Path) -> None:
    units = parse(officegen.written_docx(tmp_path))
    assert [u.name for u in units] == [
        "section-000.md",
        "section-001.md",
        "section-002.md",
        "section-003.md",
        "section-004.md",
        "headers-footers.md",
    ]
    check(units, CONTRACT)
    # Each text once, in the section it belongs to.
    assert holders(units, "Check the rate with finance.") == ["h=Clause 7/7.2"]
    assert holders(units, "ACME CONFIDENTIAL") == ["headers-footers"]


def test_docx_without_headings_stays_one_document(tmp_path: pathlib.Path) -> None:
    import docx

    doc = docx.Document()
    doc.add_paragraph("Only a paragraph.")
    doc.sections[0].footer.paragraphs[0].text = "Page footer"
    path = tmp_path / "plain.docx"
    doc.save(str(path))
    units = parse(path)
    assert [(u.name, u.locator) for u in units] == [
        ("document.md", "document"),
        ("headers-footers.md", "headers-footers"),
    ]
    check(
        units,
        [
            ("document", ["Only a paragraph."], ["Page footer", "#"]),
            ("headers-footers", ["## Footer\n\nPage footer"], ["Only a paragraph"]),
        ],
    )


def test_docx_heading_titles_are_bounded_and_flat(tmp_path: pathlib.Path) -> None:
    import docx

    doc = docx.Document()
    long_title = "Scope " + "very " * 40 + "long"
    heading = doc.add_heading("Line one", level=1)
    heading.add_run().add_break()
    heading.add_run("line two 100%")
    doc.add_paragraph("under the broken heading")
    doc.add_heading(long_title, level=2)
    doc.add_paragraph("under the long heading")
    doc.add_heading("", level=1)  # an empty heading opens no section
    doc.add_paragraph("still under the long heading")
    path = tmp_path / "titles.docx"
    doc.save(str(path))
    units = parse(path)
    assert [u.locator for u in units][0] == "h=Line one line two 100%25"
    second = units[1].locator
    assert second.startswith("h=Line one line two 100%25/Scope very very")
    assert second.endswith("…")
    assert len(second.split("/")[1]) == 80
    assert "\n" not in "".join(u.locator for u in units)
    check(units, [(second, ["under the long heading", "still under the long heading"], [])])


# -- Word, raw parts no Python writer produces -----------------------------------------------

RAW: list[Vector] = [
    (
        "h=Summary",
        [
            "Revenue grew[^1] and costs fell[^e1].",
            "[^1]: Audited figures, fiscal 2023.",
            "[^e1]: Costs exclude one-off items.",
            "The fee is [-500 euros-]{+650 euros+} per seat.",
            "[-Moved away-] stays {+moved here+}",
        ],
        ["SEPARATOR-TEXT", "The fee is 500 euros", "650 euros per seat", "An endnote nothing"],
    ),
    (
        # The path reads as if the changes were accepted; the heading shows them.
        "h=Summary/Pricing",
        [
            "## {+Pricing+}[-Costs-]\n",
            "x=(-b±√(b^2-4ac))/(2a)",
            "The total is ∑_(i=1)^n a_i over all items.",
        ],
        ["Costs/", "Revenue grew"],
    ),
    (
        "h=Checklist",
        [
            "[x] Signed by both parties",
            "[ ] Countersigned by legal",
            "[x] Legacy approved",
            "[ ] Legacy rejected",
            "Quarterly billing cycle",
            "Anchor paragraph.\n\nCallout: fees are reviewed yearly\n",
            "Old style box text",
            "[^e2]: An endnote nothing cites.",  # unreferenced: listed last, not lost
        ],
        ["☒", "☐", "FORMCHECKBOX", "FORMDROPDOWN", "Monthly", "Yearly", "Quadratic"],
    ),
]


def test_docx_raw_parts(tmp_path: pathlib.Path) -> None:
    units = parse(officegen.raw_docx(tmp_path))
    assert [(u.name, u.locator) for u in units] == [
        ("section-001.md", "h=Summary"),
        ("section-002.md", "h=Summary/Pricing"),
        ("section-003.md", "h=Checklist"),
    ]
    check(units, RAW)
    # The text box's DrawingML choice and VML fallback hold the same text: once.
    assert "".join(u.text for u in units).count("Callout: fees") == 1


def _math_docx(tmp_path: pathlib.Path, math: str) -> pathlib.Path:
    body = f'<w:p><w:r><w:t xml:space="preserve">eq: </w:t></w:r><m:oMath>{math}</m:oMath></w:p>'
    return _body_docx(tmp_path, body, "math.docx")


def _r(text: str) -> str:
    return f"<m:r><m:t>{text}</m:t></m:r>"


@pytest.mark.parametrize(
    ("math", "linear"),
    [
        (
            "<m:d><m:e>" + _r("a") + "</m:e><m:e>" + _r("b") + "</m:e></m:d>",
            "(a|b)",
        ),
        (
            "<m:func><m:fName>" + _r("sin") + "</m:fName><m:e>" + _r("θ") + "</m:e></m:func>",
            "sin(θ)",
        ),
        (
            "<m:m><m:mr><m:e>" + _r("1") + "</m:e><m:e>" + _r("0") + "</m:e></m:mr>"
            "<m:mr><m:e>" + _r("0") + "</m:e><m:e>" + _r("1") + "</m:e></m:mr></m:m>",
            "[1, 0; 0, 1]",
        ),
        (
            "<m:sSup><m:e>" + _r("10") + "</m:e><m:sup>" + _r("-6") + "</m:sup></m:sSup>",
            "10^(-6)",
        ),
        (
            "<m:rad><m:deg>" + _r("3") + "</m:deg><m:e>" + _r("x") + "</m:e></m:rad>",
            "√(3&x)",
        ),
        (
            "<m:limLow><m:e>" + _r("lim") + "</m:e><m:lim>" + _r("n→∞") + "</m:lim></m:limLow>",
            "lim_(n→∞)",
        ),
    ],
)
def test_docx_equation_forms(tmp_path: pathlib.Path, math: str, linear: str) -> None:
    (unit,) = parse(_math_docx(tmp_path, math))
    assert unit.text == f"eq: {linear}\n"


def test_docx_deep_equation_keeps_its_text(tmp_path: pathlib.Path) -> None:
    depth = 3000
    math = "<m:f><m:num>" * depth + _r("z") + "</m:num><m:den/></m:f>" * depth
    (unit,) = parse(_math_docx(tmp_path, math))
    assert unit.text.startswith("eq: ")
    assert "z" in unit.text


# -- Word, re-saved by LibreOffice --------------------------------------------------------


def _soffice_docx(source: pathlib.Path, out: pathlib.Path, profile: pathlib.Path) -> pathlib.Path:
    binary = shutil.which("soffice")
    if binary is None:
        pytest.skip("LibreOffice (soffice) is not installed; scripts/bootstrap.sh installs it")
    out.mkdir(exist_ok=True)
    subprocess.run(
        [
            binary,
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--convert-to",
            "docx:MS Word 2007 XML",
            "--outdir",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return out / source.name


@pytest.mark.timeout(400)
def test_docx_written_by_libreoffice(tmp_path: pathlib.Path) -> None:
    written = officegen.written_docx(tmp_path)
    raw = officegen.raw_docx(tmp_path)
    out = tmp_path / "lo"
    contract = parse(_soffice_docx(written, out, tmp_path / "profile-a"))
    check(contract, CONTRACT)
    units = parse(_soffice_docx(raw, out, tmp_path / "profile-b"))
    # LibreOffice rewrites notes, changes, checkboxes and text boxes its own
    # way (it drops equations and notes nothing cites).
    check(
        units,
        [
            (
                "h=Summary",
                [
                    "Revenue grew[^1] and costs fell[^e1].",
                    "[^1]: Audited figures, fiscal 2023.",
                    "[^e1]: Costs exclude one-off items.",
                    "The fee is [-500 euros-]{+650 euros+} per seat.",
                ],
                ["SEPARATOR-TEXT"],
            ),
            ("h=Summary/Pricing", ["## {+Pricing+}[-Costs-]"], []),
            (
                "h=Checklist",
                [
                    "[x] Signed by both parties",
                    "[ ] Countersigned by legal",
                    "[x] Legacy approved",
                    "[ ] Legacy rejected",
                    "Callout: fees are reviewed yearly",
                    "Old style box text",
                ],
                ["☒", "☐", "FORMCHECKBOX"],
            ),
        ],
    )


# -- review diffs label sections -----------------------------------------------------------


def test_docx_section_diff_names_the_changed_section(tmp_path: pathlib.Path) -> None:
    import docx

    def write(name: str, extra_section: bool, rate: str) -> list[tuple[str, str]]:
        doc = docx.Document()
        if extra_section:
            doc.add_heading("Definitions", level=1)
            doc.add_paragraph("Terms used below.")
        doc.add_heading("Clause 7", level=1)
        doc.add_paragraph(f"Interest is {rate} percent.")
        doc.add_heading("Clause 8", level=1)
        doc.add_paragraph("Termination needs notice.")
        path = tmp_path / name
        doc.save(str(path))
        return [(u.name, u.text) for u in parse(path)]

    old = write("old.docx", False, "1.5")
    new = write("new.docx", True, "2.0")
    diff = units_diff("contract.docx", old, new, old_hash="a" * 64, new_hash="b" * 64)
    assert "+++ b/contract.docx#section-001.md" in diff  # the added section
    assert "-Interest is 1.5 percent." in diff
    assert "+Interest is 2.0 percent." in diff
    assert "unchanged: section-003.md (was section-002.md)" in diff
    assert "Termination" not in diff


# -- PowerPoint ----------------------------------------------------------------------------

RESULTS: list[Vector] = [
    (
        "slide=1",
        [
            "# Regional results\n",
            "### Chart: Revenue by region\n\n| Category | FY2023 | FY2024 |\n| --- | --- | --- |\n"
            "| North | 1.25 | 4.5 |\n| South | 2.5 | 5.0 |\n| West | 3.75 | 6.125 |",
            "Axis: EUR million",
            # inside a group inside a group
            "### Chart: Revenue mix\n\n| Category | Mix |\n| --- | --- |\n| Licences | 70 |\n"
            "| Services | 30 |",
            "Grouped caption text",
            "[image: org-chart.png]",
        ],
        ["Ines Braga", "hiring freeze", "| X |"],
    ),
    (
        "slide=2",
        [
            "# Detail\n",
            "| Region | Head |\n| --- | --- |\n| North | Ines Braga |",
            "### Chart\n\n| X | Fit |\n| --- | --- |\n| 0.5 | 7.25 |\n| 1.5 | 9.75 |",
            # a date axis caches day numbers (45382): shown as dates
            "| Category | Backlog |\n| --- | --- |\n| 2024-03-31 | 410 |\n| 2024-06-30 | 388 |",
            "## Notes\n\nMention the hiring freeze.",
        ],
        ["Revenue", "Grouped caption", "45382"],
    ),
]


def test_pptx_charts_tables_groups_notes(tmp_path: pathlib.Path) -> None:
    units = parse(officegen.written_pptx(tmp_path))
    assert [u.name for u in units] == ["slide-001.md", "slide-002.md"]
    check(units, RESULTS)


def test_pptx_chartex_and_smartart(tmp_path: pathlib.Path) -> None:
    units = parse(officegen.raw_pptx(tmp_path))
    check(
        units,
        [
            (
                "slide=1",
                [
                    "### Chart: Bridge to target\n\n| Category | Cash |\n| --- | --- |\n"
                    "| Start | 100 |\n| Growth | 35 |\n| End | 135 |",
                    "- Discover\n- Deliver",
                ],
                ["FALLBACK-PICTURE-TEXT", "TRANSITION-TEXT"],
            )
        ],
    )


def test_pptx_chart_part_missing_is_not_fatal(tmp_path: pathlib.Path) -> None:
    path = officegen.written_pptx(tmp_path)
    broken = tmp_path / "broken.pptx"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            if not info.filename.startswith("ppt/charts/chart"):
                dst.writestr(info, src.read(info))
    units = parse(broken)
    check(
        units,
        [
            (
                "slide=1",
                ["Grouped caption text", "### Chart (its data part is missing from the file)"],
                ["| North |"],
            )
        ],
    )


# -- through the mount: the heading path in the header and the xattr -----------------------


@pytest.mark.mount
@pytest.mark.timeout(120)
@pytest.mark.skipif(
    not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
    reason="needs /dev/fuse and fusermount3",
)
def test_heading_path_in_header_and_xattr() -> None:
    from tests.mountutil import workspace

    with workspace(populate=officegen.written_docx) as m:
        out = subprocess.run(
            ["grep", "-rln", "Reconciled twice a year", ".parsed"],
            cwd=m.mnt,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.split() == [".parsed/contract.docx/section-003.md"]
        unit = m.mnt / ".parsed" / "contract.docx" / "section-003.md"
        header = unit.read_text().splitlines()[0]
        assert 'locator="contract.docx#h=Clause 7/Q1%2FQ2 &quot;true-up&quot;"' in header
        assert os.getxattr(unit, "user.sw.locator").decode() == (
            'contract.docx#h=Clause 7/Q1%2FQ2 "true-up"'
        )


def _body_docx(tmp_path: pathlib.Path, body: str, name: str) -> pathlib.Path:
    import io

    import docx

    base = io.BytesIO()
    docx.Document().save(base)
    with zipfile.ZipFile(base) as z:
        document = z.read("word/document.xml").decode()
    start = document.index("<w:body>") + len("<w:body>")
    document = document[:start] + body + document[start:]
    path = tmp_path / name
    path.write_bytes(officegen._with_parts(base.getvalue(), {"word/document.xml": document}, {}))
    return path


def _calls_during(fn: Callable[[], T]) -> tuple[T, int]:
    """``fn()`` and the function calls it made, Python's and C's: its work
    counted, not timed."""
    calls = 0

    def count(_frame: object, event: str, _arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, calls


def test_docx_unclosed_comment_ranges_stay_cheap(tmp_path: pathlib.Path) -> None:
    """Thousands of comment ranges opened and never closed, over thousands of
    runs: bounded work, and the text is all there."""
    ranges = runs = 5_000
    opened = "".join(f'<w:commentRangeStart w:id="{i}"/>' for i in range(ranges))
    text = "".join(f"<w:r><w:t>word{i} </w:t></w:r>" for i in range(runs))
    path = _body_docx(tmp_path, f"<w:p>{opened}{text}</w:p>", "ranges.docx")
    plain = _body_docx(tmp_path, f"<w:p>{text}</w:p>", "plain.docx")
    _, plain_calls = _calls_during(lambda: parse(plain))
    (unit,), calls = _calls_during(lambda: parse(path))
    # The open ranges cost a few calls a run; feeding each of them every
    # run's text would cost about ``ranges`` a run.
    assert calls - plain_calls < 100 * runs, (calls, plain_calls)
    assert "word0 " in unit.text
    assert f"word{runs - 1}" in unit.text


def test_docx_comment_threads(tmp_path: pathlib.Path) -> None:
    """A comment over two paragraphs, resolved, with a reply (Word 2013+ keeps
    replies and the resolved state in commentsExtended.xml), and a comment
    nothing references."""
    import io

    import docx

    w = officegen.W_NS
    w14 = "http://schemas.microsoft.com/office/word/2010/wordml"
    w15 = "http://schemas.microsoft.com/office/word/2012/wordml"
    comments = (
        f'<?xml version="1.0" encoding="UTF-8"?><w:comments xmlns:w="{w}" xmlns:w14="{w14}">'
        '<w:comment w:id="3" w:author="Mei" w:initials="M"><w:p w14:paraId="1A2B3C4D">'
        "<w:r><w:t>Both paragraphs?</w:t></w:r></w:p></w:comment>"
        '<w:comment w:id="5" w:author="Ravi"><w:p w14:paraId="00000AAA"><w:r><w:t>Yes, both.'
        "</w:t></w:r></w:p></w:comment>"
        '<w:comment w:id="4" w:author=""><w:p><w:r><w:t>Never referenced.</w:t></w:r></w:p>'
        "</w:comment></w:comments>"
    )
    extended = (
        f'<?xml version="1.0" encoding="UTF-8"?><w15:commentsEx xmlns:w15="{w15}">'
        '<w15:commentEx w15:paraId="1A2B3C4D" w15:done="1"/>'
        '<w15:commentEx w15:paraId="00000AAA" w15:paraIdParent="1A2B3C4D" w15:done="0"/>'
        "</w15:commentsEx>"
    )
    body = (
        '<w:p><w:r><w:t xml:space="preserve">Alpha </w:t></w:r><w:commentRangeStart w:id="3"/>'
        '<w:commentRangeStart w:id="5"/><w:r><w:t>first half</w:t></w:r></w:p>'
        '<w:p><w:r><w:t>second half</w:t></w:r><w:commentRangeEnd w:id="3"/>'
        '<w:r><w:commentReference w:id="3"/></w:r><w:commentRangeEnd w:id="5"/>'
        '<w:r><w:commentReference w:id="5"/></w:r>'
        '<w:r><w:t xml:space="preserve"> omega</w:t></w:r></w:p>'
    )
    base = io.BytesIO()
    docx.Document().save(base)
    with zipfile.ZipFile(base) as z:
        document = z.read("word/document.xml").decode()
    start = document.index("<w:body>") + len("<w:body>")
    document = document[:start] + body + document[start:]
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/comments"
    data = officegen._with_parts(
        base.getvalue(),
        {
            "word/document.xml": document,
            "word/comments.xml": comments,
            "word/commentsExtended.xml": extended,
        },
        {
            "word/_rels/document.xml.rels": [
                ("rIdCm", rel, "comments.xml"),
                (
                    "rIdCx",
                    "http://schemas.microsoft.com/office/2011/relationships/commentsExtended",
                    "commentsExtended.xml",
                ),
            ]
        },
    )
    path = tmp_path / "thread.docx"
    path.write_bytes(data)
    (unit,) = parse(path)
    assert unit.text == (
        "Alpha first half\n\nsecond half[^c1][^c2] omega\n\n"
        '[^c1]: comment by Mei on "first half second half" (resolved): Both paragraphs?\n'
        "[^c2]: reply by Ravi to [^c1]: Yes, both.\n"
        "[^c3]: comment: Never referenced.\n"
    )


def test_docx_headings_from_based_on_styles_and_outline_levels(tmp_path: pathlib.Path) -> None:
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    doc = docx.Document()
    clause = doc.styles.add_style("Clause Head", WD_STYLE_TYPE.PARAGRAPH)
    clause.base_style = doc.styles["Heading 1"]
    plain = doc.styles.add_style("Fine Print", WD_STYLE_TYPE.PARAGRAPH)
    plain.base_style = doc.styles["Normal"]
    doc.add_paragraph("Clause 9", style="Clause Head")
    doc.add_paragraph("Not a heading", style="Fine Print")
    outlined = doc.add_paragraph("Schedule A")
    level = outlined._p.get_or_add_pPr().makeelement(docx.oxml.ns.qn("w:outlineLvl"), {})
    level.set(docx.oxml.ns.qn("w:val"), "1")
    outlined._p.get_or_add_pPr().append(level)
    doc.add_paragraph("Body under schedule A.")
    path = tmp_path / "styled.docx"
    doc.save(str(path))
    units = parse(path)
    assert [u.locator for u in units] == ["h=Clause 9", "h=Clause 9/Schedule A"]
    check(
        units,
        [
            ("h=Clause 9", ["# Clause 9\n", "Not a heading"], ["# Not a heading", "Schedule"]),
            ("h=Clause 9/Schedule A", ["## Schedule A\n", "Body under schedule A."], []),
        ],
    )


def test_docx_text_boxes_nested_deep_keep_their_text(tmp_path: pathlib.Path) -> None:
    depth = 40
    opening = "<w:p><w:r><w:pict><v:shape><v:textbox><w:txbxContent>"
    closing = "</w:txbxContent></v:textbox></v:shape></w:pict></w:r></w:p>"
    body = (
        opening * depth
        + "<w:p><w:r><w:t>innermost box</w:t></w:r></w:p>"
        + closing * depth
        + "<w:p><w:r><w:t>after the boxes</w:t></w:r></w:p>"
    )
    body = body.replace(
        "<w:p><w:r><w:pict>", '<w:p xmlns:v="urn:schemas-microsoft-com:vml"><w:r><w:pict>'
    )
    (unit,) = parse(_body_docx(tmp_path, body, "boxes.docx"))
    assert unit.text.count("innermost box") == 1
    assert unit.text.endswith("after the boxes\n")


def test_pptx_chart_dates_in_the_1904_system(tmp_path: pathlib.Path) -> None:
    """A chart made on a Mac counts days from 1904 (4 years and a day later)."""
    path = officegen.written_pptx(tmp_path)
    with zipfile.ZipFile(path) as z:
        member = next(
            n for n in z.namelist() if n.startswith("ppt/charts/chart") and b"Backlog" in z.read(n)
        )
        xml = z.read(member).decode()
    assert '<c:date1904 val="0"/>' in xml
    mac = tmp_path / "mac.pptx"
    mac.write_bytes(
        officegen._with_parts(
            path.read_bytes(), {member: xml.replace('date1904 val="0"', 'date1904 val="1"')}, {}
        )
    )
    check(
        parse(mac),
        [("slide=2", ["| 2028-04-01 | 410 |", "| 2028-07-01 | 388 |"], ["2024-03-31"])],
    )
