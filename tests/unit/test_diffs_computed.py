"""Cell diffs of values, not of markers: a formula cell whose formula and value
are the same before and after is no change, whether the value was cached by
the file or computed by swfs (issue 37: an openpyxl save drops the cached
values, and the parser computes them)."""

from __future__ import annotations

from swfs.review.diffs import spreadsheet_diff
from tests.unit.test_diffs import H_NEW, H_OLD, body

NOTE = "with the same formula and value on both sides"


def sheet(rows: dict[int, tuple[str, str]], *, computed: bool) -> str:
    """Regions: B..E plain values, F the sum, cached or computed."""
    lines = []
    mark = " (computed)" if computed else ""
    for r, (b, f) in rows.items():
        lines.append(f"Regions!B{r} = {b}")
        lines.append(f"Regions!F{r} = =SUM(B{r}:E{r}) -> {f}{mark}")
    return "\n".join(lines) + "\n"


def test_cached_to_computed_with_the_same_value_is_one_note() -> None:
    rows = {r: (str(1000 * r), str(48213 + r)) for r in range(2, 11)}
    old = [("Regions", sheet(rows, computed=False))]
    changed = dict(rows)
    changed[4] = ("9999", "57208")  # a real change: its input and its sum
    new = [("Regions", sheet(changed, computed=True))]
    lines = body(spreadsheet_diff("book.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW))
    assert lines[:2] == [
        "Regions!B4: 4000 -> 9999",
        "Regions!F4: =SUM(B4:E4) -> 48217  =>  =SUM(B4:E4) -> 57208 (computed)",
    ]
    assert len(lines) == 3
    assert lines[2].startswith("(8 formula cells " + NOTE)
    assert not any(line.startswith("Regions!F2") for line in lines)


def test_only_markers_changed_is_a_note_and_no_change() -> None:
    rows = {2: ("100", "48213")}
    old = [("Regions", sheet(rows, computed=True))]
    new = [("Regions", sheet(rows, computed=False))]
    lines = body(spreadsheet_diff("book.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW))
    assert lines == [
        "(1 formula cell with the same formula and value on both sides, cached in one "
        "version and computed by swfs in the other: not changes, not listed)"
    ]


def test_a_changed_value_or_formula_is_still_a_change() -> None:
    old = [("S", "S!A1 = =B1*2 -> 10\nS!A2 = =B2*2 -> 20\nS!A3 = =B3 -> 3\n")]
    new = [("S", "S!A1 = =B1*2 -> 12 (computed)\nS!A2 = =B2*3 -> 20 (computed)\nS!A3 = =B3 -> 3\n")]
    lines = body(spreadsheet_diff("b.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW))
    assert lines == [
        "S!A1: =B1*2 -> 10  =>  =B1*2 -> 12 (computed)",
        "S!A2: =B2*2 -> 20  =>  =B2*3 -> 20 (computed)",
    ]


def test_plain_text_ending_like_the_marker_is_compared_as_text() -> None:
    old = [("S", "S!A1 = 5\n")]
    new = [("S", "S!A1 = 5 (computed)\n")]
    lines = body(spreadsheet_diff("b.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW))
    assert lines == ["S!A1: 5 -> 5 (computed)"]


def test_shifted_rows_with_markers_only_are_not_changes() -> None:
    rows = {r: (str(r), str(r * 10)) for r in range(2, 40)}
    old = [("Regions", sheet(rows, computed=False))]
    shifted = {r + 3 if r >= 20 else r: v for r, v in rows.items()}
    text = sheet(shifted, computed=True)
    inserted = "".join(f"Regions!B{r} = new {r}\n" for r in (20, 21, 22))
    new = [("Regions", text + inserted)]
    lines = body(spreadsheet_diff("book.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW))
    assert lines[0].startswith("Regions: 3 rows inserted at row 20"), lines
    assert not any("=>" in line for line in lines), lines
    assert lines[-1].startswith("(38 formula cells " + NOTE), lines
