"""An agent's spreadsheet edit through the engine (worker processes, no FUSE):
openpyxl saves without cached values, and the dependent formula's new value
is still in the parsed view, marked as computed, and in the review diff."""

from __future__ import annotations

from pathlib import Path

import openpyxl
import trio

from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.workspace import Config


def grep(eng: Engine, rel: str, needle: str) -> list[str]:
    """``grep -rn needle .parsed/<rel>/``: 'unit:line:text' for each hit."""
    view = eng.views.parsed_view(RelPath(rel))
    assert view is not None
    hits = []
    for unit in view.units:
        for n, line in enumerate(unit.content.decode().splitlines(), start=1):
            if needle in line:
                hits.append(f"{unit.name}:{n}:{line}")
    return hits


def test_openpyxl_edit_makes_the_computed_value_greppable(sample: Engine) -> None:
    rel = RelPath("budget.xlsx")
    path = sample.src / rel
    assert grep(sample, rel, "2700") == []
    sample.workspace.preserve(rel)
    wb = openpyxl.load_workbook(path)
    wb["Sheet1"]["B12"] = 1350
    wb.save(path)  # openpyxl drops every cached formula value
    state = sample.workspace.record_write(rel)
    assert state is not None
    assert state.freshness == Freshness.STALE
    trio.run(sample.drain)
    view = sample.views.parsed_view(rel)
    assert view is not None
    header = view.units[0].content.decode().splitlines()[0]
    assert 'freshness="current"' in header
    assert 'parser="xlsx@2"' in header
    # The edited cell's dependant, and Summary!B2 = =Sheet1!C12 across sheets.
    assert grep(sample, rel, "2700") == [
        "sheet-Sheet1.md:27:Sheet1!C12 = =B12*2 -> 2700 (computed)",
        "sheet-Summary.md:5:Summary!B2 = =Sheet1!C12 -> 2700 (computed)",
    ]
    assert grep(sample, rel, "-> 2400") == []
    diff = (sample.reviews.review_diff(rel) or b"").decode()
    assert "Sheet1!B12: 1200 -> 1350" in diff
    assert "Sheet1!C12: =B12*2 -> 2400  =>  =B12*2 -> 2700 (computed)" in diff


def test_cell_counts_leave_out_annotation_lines(tmp_path: Path) -> None:
    """Hidden-sheet marks, merged ranges, notes, charts and empty-sheet lines
    are not cells: the cells the engine counts are the ones openpyxl sees."""
    from tests import sheetgen

    src = tmp_path / "ws"
    src.mkdir()
    path = sheetgen.excel_like_xlsx(src / "report.xlsx")
    wb = openpyxl.load_workbook(path)
    values = sum(c.value is not None for ws in wb.worksheets for row in ws.iter_rows() for c in row)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        assert eng.views.counts()["current"] == 1
        assert eng.views.content_counts()["cells"] == values
