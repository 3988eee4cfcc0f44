"""`.review/<book>.diff` after an openpyxl save (issue 37): the save drops
every cached formula value, the parser computes them, and the diff lists
only the cells whose formula or value changed; formula cells that are the
same on both sides, cached before and computed now, are one note line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pytest
import trio

from swfs.api import RelPath
from swfs.engine import Engine
from swfs.workspace import Config

BOOK = RelPath("regions.xlsx")


def excel_saved(path: Path) -> None:
    """A workbook as Excel saves it: every formula with its cached value."""
    import xlsxwriter

    wb = xlsxwriter.Workbook(str(path))
    ws = wb.add_worksheet("Regions")
    for row in range(2, 11):
        values = [row * 1000 + q for q in range(4)]
        ws.write_row(f"B{row}", values)
        ws.write_formula(f"F{row}", f"=SUM(B{row}:E{row})", None, sum(values))
    wb.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "ws"
    src.mkdir()
    excel_saved(src / BOOK)
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        yield eng


def test_an_openpyxl_save_shows_only_what_changed(engine: Engine) -> None:
    wb = openpyxl.load_workbook(engine.src / BOOK)
    wb["Regions"]["B4"] = 9999
    wb.save(engine.src / BOOK)  # no cached values any more
    engine.workspace.check_file(BOOK)
    trio.run(engine.drain)
    diff = (engine.reviews.review_diff(BOOK) or b"").decode()
    lines = [ln for ln in diff.splitlines() if ln.startswith(("Regions", "("))]
    assert lines[0] == "Regions!B4: 4000 -> 9999"
    assert lines[1] == "Regions!F4: =SUM(B4:E4) -> 16006  =>  =SUM(B4:E4) -> 22005 (computed)"
    assert lines[2].startswith("(8 formula cells with the same formula and value"), diff
    assert len(lines) == 3, diff
