"""Property test of the spreadsheet line format: one line per cell, line breaks as spaces."""

from __future__ import annotations

import pathlib
import re
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import registry
from parsers._base import ParseOptions

# The shape swfs's cell-level diff reads back (parsers.cells.CELL_LINE), written out
# here so that a change of the format shows as a failing test.
CELL_LINE = re.compile(
    r"^(?:'(?:[^'\n]|'')*'|[A-Za-z0-9_.]+)!([A-Z]{1,3})([0-9]+) = (.*)$", re.DOTALL
)

# Excel forbids : \ / ? * [ ] in sheet names and limits them to 31 characters.
sheet_names = st.text(
    alphabet=st.characters(
        blacklist_characters=":\\/?*[]", blacklist_categories=("Cs", "Cc", "Zl", "Zp")
    ),
    min_size=1,
    max_size=31,
).filter(lambda s: s.strip("'") == s and s.lower() != "history")
# XML 1.0 cannot carry most control characters; \r is normalised to \n by XML parsers.
cell_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r").filter(
        lambda c: c in "\t\n" or (ord(c) >= 0x20 and c not in "\ufffe\uffff")
    ),
    min_size=1,
    max_size=40,
)


def shown_as(text: str) -> str:
    """What a cell's text reads as: each line break one space."""
    return re.sub(r"\r\n|[\r\n\v\f\x85\u2028\u2029]", " ", text)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=sheet_names, values=st.lists(cell_text, min_size=1, max_size=5))
def test_lines_parse_back(name: str, values: list[str]) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    sheet = wb.active
    assert sheet is not None
    sheet.title = name
    for row, value in enumerate(values, start=1):
        cell = sheet.cell(row=row, column=2, value=value)
        cell.data_type = "s"  # a leading '=' is text here, not a formula
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "p.xlsx"
        wb.save(path)
        _, units = registry.parse(
            str(path), registry.file_info(str(path), "p.xlsx"), ParseOptions()
        )
    # Lines end at "\n" only (grep's lines); no line break of any kind stays in a value.
    assert units[0].text.endswith("\n")
    lines = units[0].text[:-1].split("\n")
    assert len(lines) == len(values)
    for row, (line, value) in enumerate(zip(lines, values, strict=True), start=1):
        match = CELL_LINE.match(line)
        assert match, line
        assert (match[1], match[2]) == ("B", str(row))
        shown = match[3]
        if value.startswith(("=", "'")):
            assert shown.startswith("'")
            shown = shown[1:]
        assert shown == shown_as(value)
        assert "\\n" not in shown or "\\n" in value
