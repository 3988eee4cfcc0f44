"""DrawingML charts (``c:chartSpace`` and the 2016 ``cx:chartSpace``) as Markdown.

A chart part keeps a cache of the numbers it draws (``c:numCache``,
``c:strCache``), which is what PowerPoint shows when the embedded workbook is
not opened; that cache is read here, never the workbook.  The output is what
markitdown gives, so an agent that knows one reads the other::

    ### Chart: Revenue by region

    | Category | 2023 | 2024 |
    | --- | --- | --- |
    | North | 1.2 | 1.5 |

Axis titles follow as ``Axis: ...`` lines.  Values are the cached strings as
stored (``1500000``, not ``1.5M``): that is what grep can match; a date axis's
day numbers are shown as ISO dates (``2024-03-31``).  A scatter
chart's x values are its first column.  Series of every plot in the chart (a
bar-and-line combination) share the table.
"""

from __future__ import annotations

import datetime
import re
from xml.etree.ElementTree import Element

from parsers._ooxml import markdown_table

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
CX = "{http://schemas.microsoft.com/office/drawing/2014/chartex}"

# A chart's table is bounded: a scatter of a million points is not a table
# anyone reads, and the text budget should not be spent on it.
MAX_ROWS = 2000

_AXES = (C + "catAx", C + "valAx", C + "dateAx", C + "serAx")
_QUOTED = re.compile(r'"[^"]*"|\[[^]]*\]|\\.')
_EPOCH = datetime.datetime(1899, 12, 30)  # day 0 of the 1900 date system
_EPOCH_1904 = datetime.datetime(1904, 1, 1)  # charts made on a Mac with date1904


def _rich(element: Element | None) -> str:
    """The text of a title: rich text paragraphs, or a cached string reference."""
    if element is None:
        return ""
    lines = []
    for paragraph in element.iter(A + "p"):
        lines.append("".join(t.text or "" for t in paragraph.iter(A + "t")))
    text = " ".join(" ".join(lines).split())
    if text:
        return text
    values = (v.text or "" for v in element.iter() if v.tag in (C + "v", CX + "v"))
    return " ".join(" ".join(values).split())


def _points(ref: Element | None, epoch: datetime.datetime) -> dict[int, str]:
    """idx -> cached value of a ``c:cat``/``c:val``/``c:tx``-like element."""
    found: dict[int, str] = {}
    if ref is None:
        return found
    levels = list(ref.iter(C + "lvl"))
    if levels:  # multi-level categories: outer level first, joined
        for level in reversed(levels):
            for idx, value in _pts(level, epoch).items():
                found[idx] = f"{found[idx]} / {value}" if idx in found else value
        return found
    return _pts(ref, epoch)


def _pts(element: Element, epoch: datetime.datetime = _EPOCH) -> dict[int, str]:
    found = {}
    code = next(element.iter(C + "formatCode"), None)
    shared = code.text if code is not None else None
    for pt in element.iter(C + "pt"):
        try:
            idx = int(pt.get("idx", ""))
        except ValueError:
            continue
        if 0 <= idx < MAX_ROWS:
            value = pt.findtext(C + "v") or ""
            found[idx] = _as_date(value, pt.get("formatCode") or shared, epoch)
    return found


def _as_date(value: str, format_code: str | None, epoch: datetime.datetime) -> str:
    """A date axis caches serial day numbers; show them as the dates they are."""
    if not format_code or not re.search(r"[dmy]", _QUOTED.sub("", format_code).lower()):
        return value
    try:
        when = epoch + datetime.timedelta(days=float(value))
    except (ValueError, OverflowError):
        return value
    if when.time() == datetime.time(0):
        return when.date().isoformat()
    return when.isoformat(sep=" ", timespec="minutes")


def _series_name(ser: Element, number: int) -> str:
    tx = ser.find(C + "tx")
    if tx is not None:
        direct = tx.findtext(C + "v")
        name = direct if direct else " ".join(_pts(tx).values())
        if name.strip():
            return name.strip()
    return f"Series {number}"


def _table(header: list[str], categories: dict[int, str], columns: list[dict[int, str]]) -> str:
    indexes = set(categories)
    for column in columns:
        indexes.update(column)
    if not indexes and not columns:
        return ""
    rows = [header]
    for idx in sorted(indexes):
        rows.append([categories.get(idx, ""), *(column.get(idx, "") for column in columns)])
    return markdown_table(rows)


def chart_markdown(root: Element) -> str:
    """A ``c:chartSpace`` or ``cx:chartSpace`` part as a heading, a table and axis titles."""
    if root.tag == CX + "chartSpace":
        return _chartex(root)
    chart = root.find(C + "chart")
    if chart is None:
        return ""
    title = _rich(chart.find(C + "title"))
    date1904 = root.find(C + "date1904")
    epoch = (
        _EPOCH_1904
        if date1904 is not None and date1904.get("val", "1") in ("1", "true")
        else _EPOCH
    )
    header = ["Category"]
    categories: dict[int, str] = {}
    columns: list[dict[int, str]] = []
    plot = chart.find(C + "plotArea")
    axes = []
    if plot is not None:
        for kind in plot:
            series = kind.findall(C + "ser")
            for ser in series:
                cat = ser.find(C + "cat")
                if cat is None and (cat := ser.find(C + "xVal")) is not None:
                    header[0] = "X"
                if not categories:
                    categories = _points(cat, epoch)
                val = ser.find(C + "val")
                if val is None:
                    val = ser.find(C + "yVal")
                header.append(_series_name(ser, len(columns) + 1))
                columns.append(_points(val, epoch))
                size = ser.find(C + "bubbleSize")
                if size is not None:
                    header.append(f"{header[-1]} (size)")
                    columns.append(_points(size, epoch))
            if kind.tag in _AXES and (axis := _rich(kind.find(C + "title"))):
                axes.append(axis)
    parts = [f"### Chart: {title}" if title else "### Chart"]
    if table := _table(header, categories, columns):
        parts.append(table)
    if axes:
        parts.append("\n".join(f"Axis: {axis}" for axis in axes))
    return "\n\n".join(parts)


def _chartex(root: Element) -> str:
    """The 2016 chart types (waterfall, treemap, sunburst, histogram, funnel ...)."""
    data: dict[str, tuple[dict[int, str], dict[int, str]]] = {}
    for block in root.iter(CX + "data"):
        cats: dict[int, str] = {}
        vals: dict[int, str] = {}
        for dim in block:
            if dim.tag not in (CX + "strDim", CX + "numDim"):
                continue
            levels = dim.findall(CX + "lvl")
            target = vals if dim.tag == CX + "numDim" else cats
            for level in reversed(levels):
                for pt in level.findall(CX + "pt"):
                    try:
                        idx = int(pt.get("idx", ""))
                    except ValueError:
                        continue
                    if 0 <= idx < MAX_ROWS:
                        value = pt.text or ""
                        target[idx] = f"{target[idx]} / {value}" if idx in target else value
        data[block.get("id", "")] = (cats, vals)
    chart = root.find(CX + "chart")
    title = _rich(chart.find(CX + "title")) if chart is not None else ""
    header = ["Category"]
    categories: dict[int, str] = {}
    columns: list[dict[int, str]] = []
    for series in root.iter(CX + "series"):
        data_id = series.find(CX + "dataId")
        cats, vals = data.get(data_id.get("val", "") if data_id is not None else "", ({}, {}))
        categories = categories or cats
        name = " ".join(v.text or "" for v in series.iter(CX + "v")).strip()
        header.append(name or f"Series {len(columns) + 1}")
        columns.append(vals)
    parts = [f"### Chart: {title}" if title else "### Chart"]
    if table := _table(header, categories, columns):
        parts.append(table)
    return "\n\n".join(parts)
