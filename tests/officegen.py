"""Word and PowerPoint fixtures for the docx and pptx parser vectors.

Written the way real programs write them: python-docx and python-pptx where
they can (headings, tables, headers and footers, comments, charts, groups,
notes), and raw OOXML parts shaped like Word's own output where no Python
writer exists (footnotes, endnotes, tracked changes, equations, checkboxes,
text boxes, 2016 charts, SmartArt).
"""

from __future__ import annotations

import datetime
import io
import pathlib
import struct
import zipfile
import zlib

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NAMESPACES = (
    f'xmlns:w="{W_NS}" xmlns:r="{R_NS}" '
    'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
    'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math" '
    'xmlns:w14="http://schemas.microsoft.com/office/word/2010/wordml" '
    'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
    'xmlns:v="urn:schemas-microsoft-com:vml" '
    'mc:Ignorable="w14"'
)
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"


def _with_parts(
    data: bytes, replace: dict[str, str], rels: dict[str, list[tuple[str, str, str]]]
) -> bytes:
    """``data`` (a package) with members replaced or added, and relationships
    (id, type, target) added to the named ``.rels`` members."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(data)) as src,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        names = src.namelist()
        for name in names:
            content = src.read(name).decode("utf-8") if name.endswith((".xml", ".rels")) else None
            if name in replace:
                content = replace[name]
            if name in rels and content is not None:
                extra = "".join(
                    f'<Relationship Id="{rid}" Type="{kind}" Target="{target}"/>'
                    for rid, kind, target in rels[name]
                )
                content = content.replace("</Relationships>", extra + "</Relationships>")
            dst.writestr(name, content if content is not None else src.read(name))
        for name, content in replace.items():
            if name not in names:
                dst.writestr(name, content)
    return out.getvalue()


def tiny_png(path: pathlib.Path) -> pathlib.Path:
    """A 2x2 grey PNG (what a picture's bytes are does not matter here)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"\x00\x80\x80" * 2)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )
    return path


# -- Word -----------------------------------------------------------------------------------


def written_docx(directory: pathlib.Path) -> pathlib.Path:
    """python-docx: title, nested headings (one with a slash and quotes), a
    merged table, headers and footers (default, first page, even), comments."""
    import docx

    doc = docx.Document()
    doc.add_paragraph("Prepared for the board.")
    doc.add_heading("Master Services Agreement", level=0)
    doc.add_paragraph("This agreement is between Acme and Globex.")
    doc.add_heading("Clause 7", level=1)
    doc.add_paragraph("Payment terms follow.")
    doc.add_heading("7.2", level=2)
    late = doc.add_paragraph("Late invoices accrue ")
    interest = late.add_run("interest at 1.5 percent")
    late.add_run(" per month.")
    doc.add_comment(
        [interest], text="Check the rate with finance.", author="Dana Lee", initials="DL"
    )
    doc.add_heading('Q1/Q2 "true-up"', level=2)
    doc.add_paragraph("Reconciled twice a year.")
    doc.add_heading("Clause 8", level=1)
    picture = doc.add_picture(str(tiny_png(directory / "signature-block.png")))
    # python-docx has no alt-text property; Word keeps alt text in docPr/@descr.
    picture._inline.docPr.set("descr", "Signatures of both parties")
    table = doc.add_table(rows=3, cols=3)
    table.cell(0, 0).text, table.cell(0, 1).text, table.cell(0, 2).text = "Item", "Qty", "Price"
    merged = table.cell(1, 0).merge(table.cell(1, 1))
    merged.text = "Setup fee"
    table.cell(1, 2).text = "900"
    table.cell(2, 0).text, table.cell(2, 1).text, table.cell(2, 2).text = "Licence", "3", "1200"
    section = doc.sections[0]
    section.header.paragraphs[0].text = "ACME CONFIDENTIAL"
    section.footer.paragraphs[0].text = "Contract 2024-117"
    section.different_first_page_header_footer = True
    section.first_page_header.paragraphs[0].text = "Cover page header"
    doc.settings.odd_and_even_pages_header_footer = True
    section.even_page_footer.paragraphs[0].text = "Even page footer"
    path = directory / "contract.docx"
    doc.save(str(path))
    return path


def _p(inner: str, style: str = "") -> str:
    props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
    return f"<w:p>{props}{inner}</w:p>"


def _r(text: str) -> str:
    return f'<w:r><w:t xml:space="preserve">{text}</w:t></w:r>'


def _notes(kind: str, notes: dict[int, str]) -> str:
    separators = (
        f'<w:{kind} w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:{kind}>'
        f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p><w:r><w:t>SEPARATOR-TEXT</w:t>'
        f"</w:r></w:p></w:{kind}>"
    )
    body = "".join(
        f'<w:{kind} w:id="{i}"><w:p><w:r><w:{kind}Ref/></w:r>{_r(" " + text)}</w:p></w:{kind}>'
        for i, text in notes.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f"<w:{kind}s {_NAMESPACES}>{separators}{body}</w:{kind}s>"
    )


# Office Math as Word saves an equation typed as "x = (-b ± √(b^2-4ac))/(2a)".
_QUADRATIC = (
    "<m:oMathPara><m:oMath><m:r><m:t>x=</m:t></m:r><m:f><m:num><m:r><m:t>-b±</m:t></m:r>"
    '<m:rad><m:radPr><m:degHide m:val="1"/></m:radPr><m:deg/><m:e><m:sSup><m:e><m:r><m:t>b</m:t>'
    "</m:r></m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup><m:r><m:t>-4ac</m:t></m:r></m:e>"
    "</m:rad></m:num><m:den><m:r><m:t>2a</m:t></m:r></m:den></m:f></m:oMath></m:oMathPara>"
)
_SUM = (
    '<m:oMath><m:nary><m:naryPr><m:chr m:val="∑"/></m:naryPr><m:sub><m:r><m:t>i=1</m:t></m:r>'
    "</m:sub><m:sup><m:r><m:t>n</m:t></m:r></m:sup><m:e><m:sSub><m:e><m:r><m:t>a</m:t></m:r></m:e>"
    "<m:sub><m:r><m:t>i</m:t></m:r></m:sub></m:sSub></m:e></m:nary></m:oMath>"
)


def _checkbox(checked: bool, label: str) -> str:
    glyph = "☒" if checked else "☐"
    return (
        '<w:p><w:sdt><w:sdtPr><w:id w:val="1"/><w14:checkbox>'
        f'<w14:checked w14:val="{int(checked)}"/>'
        '<w14:checkedState w14:val="2612" w14:font="MS Gothic"/>'
        '<w14:uncheckedState w14:val="2610" w14:font="MS Gothic"/></w14:checkbox></w:sdtPr>'
        f"<w:sdtContent><w:r><w:t>{glyph}</w:t></w:r></w:sdtContent></w:sdt>{_r(' ' + label)}</w:p>"
    )


def _form_checkbox(checked: bool, label: str) -> str:
    state = "<w:checked/>" if checked else ""
    return (
        '<w:p><w:r><w:fldChar w:fldCharType="begin"><w:ffData><w:name w:val="Check1"/><w:enabled/>'
        f'<w:calcOnExit w:val="0"/><w:checkBox><w:sizeAuto/><w:default w:val="0"/>{state}'
        "</w:checkBox></w:ffData></w:fldChar></w:r>"
        '<w:r><w:instrText xml:space="preserve"> FORMCHECKBOX </w:instrText></w:r>'
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
        f"{_r(' ' + label)}</w:p>"
    )


def _form_dropdown(entries: list[str], chosen: int, label: str) -> str:
    items = "".join(f'<w:listEntry w:val="{e}"/>' for e in entries)
    return (
        '<w:p><w:r><w:fldChar w:fldCharType="begin"><w:ffData><w:name w:val="Drop1"/><w:enabled/>'
        f'<w:ddList><w:result w:val="{chosen}"/>{items}</w:ddList></w:ffData></w:fldChar></w:r>'
        '<w:r><w:instrText xml:space="preserve"> FORMDROPDOWN </w:instrText></w:r>'
        '<w:r><w:fldChar w:fldCharType="separate"/></w:r>'
        '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
        f"{_r(' ' + label)}</w:p>"
    )


def _text_box(text: str) -> str:
    """A DrawingML text box with Word's VML fallback holding the same text."""
    content = f"<w:txbxContent>{_p(_r(text))}</w:txbxContent>"
    return (
        "<w:p>" + _r("Anchor paragraph.") + '<w:r><mc:AlternateContent><mc:Choice Requires="wps">'
        '<w:drawing><wp:anchor distT="0" distB="0" distL="0" distR="0" simplePos="0" '
        'relativeHeight="1" behindDoc="0" locked="0" layoutInCell="1" allowOverlap="1">'
        '<wp:simplePos x="0" y="0"/><wp:extent cx="914400" cy="457200"/>'
        '<wp:docPr id="1" name="Text Box 1"/><a:graphic><a:graphicData '
        'uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"><wps:wsp>'
        f"<wps:txbx>{content}</wps:txbx><wps:bodyPr/></wps:wsp></a:graphicData></a:graphic>"
        "</wp:anchor></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape>"
        f"<v:textbox>{content}</v:textbox></v:shape></w:pict></mc:Fallback>"
        "</mc:AlternateContent></w:r></w:p>"
    )


def _vml_text_box(text: str) -> str:
    """A text box as older Word versions saved it: VML only."""
    return (
        "<w:p><w:r><w:pict><v:shape><v:textbox><w:txbxContent>"
        f"{_p(_r(text))}</w:txbxContent></v:textbox></v:shape></w:pict></w:r></w:p>"
    )


def raw_docx(directory: pathlib.Path) -> pathlib.Path:
    """A python-docx package whose body is replaced by WordprocessingML that no
    Python writer produces, and which gains footnotes and endnotes parts."""
    import docx

    base = io.BytesIO()
    docx.Document().save(base)
    body = (
        _p(_r("Summary"), "Heading1")
        + _p(
            _r("Revenue grew") + '<w:r><w:rPr><w:rStyle w:val="FootnoteReference"/></w:rPr>'
            '<w:footnoteReference w:id="1"/></w:r>'
            + _r(" and costs fell")
            + '<w:r><w:endnoteReference w:id="1"/></w:r>'
            + _r(".")
        )
        + _p(
            _r("The fee is ") + '<w:del w:id="11" w:author="Dana" w:date="2024-05-01T10:00:00Z">'
            "<w:r><w:delText>500 euros</w:delText></w:r></w:del>"
            '<w:ins w:id="12" w:author="Dana" w:date="2024-05-01T10:00:00Z">'
            + _r("650 euros")
            + "</w:ins>"
            + _r(" per seat.")
        )
        + _p(
            '<w:moveFrom w:id="13" w:author="Ravi">'
            + _r("Moved away")
            + "</w:moveFrom>"
            + _r(" stays ")
            + '<w:moveTo w:id="14" w:author="Ravi">'
            + _r("moved here")
            + "</w:moveTo>"
        )
        + _p(
            '<w:ins w:id="15" w:author="Dana">' + _r("Pricing") + "</w:ins>"
            '<w:del w:id="16" w:author="Dana"><w:r><w:delText>Costs</w:delText></w:r></w:del>',
            "Heading2",
        )
        + _p(_r("Quadratic formula:"))
        + _p(_QUADRATIC)
        + _p(_r("The total is ") + _SUM + _r(" over all items."))
        + _p(_r("Checklist"), "Heading1")
        + _checkbox(True, "Signed by both parties")
        + _checkbox(False, "Countersigned by legal")
        + _form_checkbox(True, "Legacy approved")
        + _form_checkbox(False, "Legacy rejected")
        + _form_dropdown(["Monthly", "Quarterly", "Yearly"], 1, "billing cycle")
        + _text_box("Callout: fees are reviewed yearly")
        + _vml_text_box("Old style box text")
        + '<w:sectPr><w:pgSz w:w="12240" w:h="15840"/></w:sectPr>'
    )
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f"<w:document {_NAMESPACES}><w:body>{body}</w:body></w:document>"
    )
    data = _with_parts(
        base.getvalue(),
        {
            "word/document.xml": document,
            "word/footnotes.xml": _notes("footnote", {1: "Audited figures, fiscal 2023."}),
            "word/endnotes.xml": _notes(
                "endnote", {1: "Costs exclude one-off items.", 2: "An endnote nothing cites."}
            ),
        },
        {
            "word/_rels/document.xml.rels": [
                ("rIdFn", _REL + "footnotes", "footnotes.xml"),
                ("rIdEn", _REL + "endnotes", "endnotes.xml"),
            ]
        },
    )
    path = directory / "raw.docx"
    path.write_bytes(data)
    return path


# -- PowerPoint -----------------------------------------------------------------------------


def written_pptx(directory: pathlib.Path) -> pathlib.Path:
    """python-pptx: a chart and a text box inside nested groups, a bar-and-line
    chart on the slide, a scatter chart, a table, speaker notes."""
    from pptx import Presentation
    from pptx.chart.data import CategoryChartData, XyChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    assert slide.shapes.title is not None
    slide.shapes.title.text = "Regional results"
    data = CategoryChartData()
    data.categories = ["North", "South", "West"]
    data.add_series("FY2023", (1.25, 2.5, 3.75))
    data.add_series("FY2024", (4.5, 5.0, 6.125))
    frame = slide.shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(0.5), Inches(1.5), Inches(5), Inches(3), data
    )
    chart = frame.chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Revenue by region"
    chart.value_axis.has_title = True
    chart.value_axis.axis_title.text_frame.text = "EUR million"

    outer = slide.shapes.add_group_shape()
    inner = outer.shapes.add_group_shape()
    box = inner.shapes.add_textbox(Inches(6), Inches(5), Inches(3), Inches(1))
    box.text_frame.text = "Grouped caption text"
    inner.shapes.add_picture(str(tiny_png(directory / "org-chart.png")), Inches(6), Inches(6))
    pie = CategoryChartData()
    pie.categories = ["Licences", "Services"]
    pie.add_series("Mix", (70, 30))
    grouped = inner.shapes.add_chart(
        XL_CHART_TYPE.PIE, Inches(6), Inches(1.5), Inches(3), Inches(3), pie
    )
    grouped.chart.has_title = True
    grouped.chart.chart_title.text_frame.text = "Revenue mix"

    second = deck.slides.add_slide(deck.slide_layouts[5])
    assert second.shapes.title is not None
    second.shapes.title.text = "Detail"
    table = second.shapes.add_table(2, 2, Inches(0.5), Inches(1.5), Inches(6), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "Region", "Head"
    table.cell(1, 0).text, table.cell(1, 1).text = "North", "Ines Braga"
    xy = XyChartData()
    fit = xy.add_series("Fit")
    fit.add_data_point(0.5, 7.25)
    fit.add_data_point(1.5, 9.75)
    second.shapes.add_chart(
        XL_CHART_TYPE.XY_SCATTER, Inches(0.5), Inches(3), Inches(5), Inches(3), xy
    )
    dated = CategoryChartData()  # date categories: python-pptx writes a date axis
    dated.categories = [datetime.date(2024, 3, 31), datetime.date(2024, 6, 30)]
    dated.add_series("Backlog", (410, 388))
    second.shapes.add_chart(XL_CHART_TYPE.LINE, Inches(6), Inches(3), Inches(3), Inches(3), dated)
    notes = second.notes_slide.notes_text_frame
    assert notes is not None
    notes.text = "Mention the hiring freeze."
    path = directory / "results.pptx"
    deck.save(str(path))
    return path


_CX = "http://schemas.microsoft.com/office/drawing/2014/chartex"
_DGM = "http://schemas.openxmlformats.org/drawingml/2006/diagram"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"


def raw_pptx(directory: pathlib.Path) -> pathlib.Path:
    """A python-pptx deck given, as PowerPoint writes them, a waterfall chart
    (``cx:chartSpace``, behind ``mc:AlternateContent``) and a SmartArt diagram."""
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[6])
    base = io.BytesIO()
    deck.save(base)
    chartex = (
        f'<?xml version="1.0" encoding="UTF-8"?><cx:chartSpace xmlns:cx="{_CX}" xmlns:a="{_A}">'
        '<cx:chartData><cx:data id="0"><cx:strDim type="cat"><cx:f>Sheet1!$A$2:$A$4</cx:f>'
        '<cx:lvl ptCount="3"><cx:pt idx="0">Start</cx:pt><cx:pt idx="1">Growth</cx:pt>'
        '<cx:pt idx="2">End</cx:pt></cx:lvl></cx:strDim><cx:numDim type="val">'
        '<cx:lvl ptCount="3" formatCode="General"><cx:pt idx="0">100</cx:pt>'
        '<cx:pt idx="1">35</cx:pt><cx:pt idx="2">135</cx:pt></cx:lvl></cx:numDim></cx:data>'
        "</cx:chartData><cx:chart><cx:title><cx:tx><cx:txData><cx:v>Bridge to target</cx:v>"
        "</cx:txData></cx:tx></cx:title><cx:plotArea><cx:plotAreaRegion>"
        '<cx:series layoutId="waterfall"><cx:tx><cx:txData><cx:f>Sheet1!$B$1</cx:f>'
        '<cx:v>Cash</cx:v></cx:txData></cx:tx><cx:dataId val="0"/></cx:series>'
        "</cx:plotAreaRegion></cx:plotArea></cx:chart></cx:chartSpace>"
    )
    smartart = (
        f'<?xml version="1.0" encoding="UTF-8"?><dgm:dataModel xmlns:dgm="{_DGM}" xmlns:a="{_A}">'
        '<dgm:ptLst><dgm:pt modelId="0" type="doc"><dgm:t><a:bodyPr/><a:p><a:endParaRPr/></a:p>'
        "</dgm:t></dgm:pt>"
        '<dgm:pt modelId="1"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Discover</a:t></a:r></a:p>'
        "</dgm:t></dgm:pt>"
        '<dgm:pt modelId="2"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Deliver</a:t></a:r></a:p>'
        "</dgm:t></dgm:pt>"
        '<dgm:pt modelId="3" type="parTrans"><dgm:t><a:p><a:r><a:t>TRANSITION-TEXT</a:t>'
        "</a:r></a:p>"
        "</dgm:t></dgm:pt></dgm:ptLst></dgm:dataModel>"
    )
    frames = (
        '<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006">'
        '<mc:Choice xmlns:cx1="http://schemas.microsoft.com/office/drawing/2015/9/8/chartex" '
        'Requires="cx1"><p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="4" name="Chart 3"/>'
        "<p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr>"
        '<p:xfrm><a:off x="100" y="100"/><a:ext cx="10" cy="10"/></p:xfrm><a:graphic>'
        f'<a:graphicData uri="http://schemas.microsoft.com/office/drawing/2014/chartex">'
        f'<cx:chart xmlns:cx="{_CX}" r:id="rIdCx"/></a:graphicData></a:graphic></p:graphicFrame>'
        '</mc:Choice><mc:Fallback><p:sp><p:nvSpPr><p:cNvPr id="5" name="fallback"/><p:cNvSpPr/>'
        "<p:nvPr/></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/><a:p><a:r>"
        "<a:t>FALLBACK-PICTURE-TEXT</a:t></a:r></a:p></p:txBody></p:sp></mc:Fallback>"
        "</mc:AlternateContent>"
        '<p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="6" name="Diagram 5"/>'
        "<p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr>"
        '<p:xfrm><a:off x="100" y="900"/><a:ext cx="10" cy="10"/></p:xfrm><a:graphic>'
        f'<a:graphicData uri="{_DGM}"><dgm:relIds xmlns:dgm="{_DGM}" r:dm="rIdDm" r:lo="rIdLo" '
        'r:qs="rIdQs" r:cs="rIdCs"/></a:graphicData></a:graphic></p:graphicFrame>'
    )
    with zipfile.ZipFile(io.BytesIO(base.getvalue())) as z:
        slide = z.read("ppt/slides/slide1.xml").decode("utf-8")
    slide = slide.replace("</p:spTree>", frames + "</p:spTree>")
    if 'xmlns:r="' not in slide:
        slide = slide.replace("<p:sld ", f'<p:sld xmlns:r="{R_NS}" ', 1)
    data = _with_parts(
        base.getvalue(),
        {
            "ppt/slides/slide1.xml": slide,
            "ppt/charts/chartEx1.xml": chartex,
            "ppt/diagrams/data1.xml": smartart,
        },
        {
            "ppt/slides/_rels/slide1.xml.rels": [
                (
                    "rIdCx",
                    "http://schemas.microsoft.com/office/2014/relationships/chartEx",
                    "../charts/chartEx1.xml",
                ),
                ("rIdDm", _REL + "diagramData", "../diagrams/data1.xml"),
            ]
        },
    )
    path = directory / "modern.pptx"
    path.write_bytes(data)
    return path
