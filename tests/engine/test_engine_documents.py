"""Real documents through the engine's worker processes: the paper's Fig. 2
(a spreadsheet cell edit), PDF pages, and hostile documents that must fail
with a reason without taking anything down."""

from __future__ import annotations

import shutil
from pathlib import Path

import openpyxl
import pytest
import trio

from swfs.api import ChangeStatus, Freshness, RelPath
from swfs.engine import Engine
from swfs.samples import set_cached_values
from swfs.views.parsework import WorkerLimits
from swfs.workspace import Config
from tests import docgen


def unit_text(eng: Engine, rel: str, name: str) -> str:
    view = eng.views.parsed_view(RelPath(rel))
    assert view is not None, rel
    for u in view.units:
        if u.name == name:
            return u.content.decode()
    raise AssertionError(f"{rel} has no unit {name}: {[u.name for u in view.units]}")


def test_sample_workspace_is_all_current(sample: Engine) -> None:
    counts = sample.views.counts()
    assert counts["files"] == counts["current"] == 8
    assert "EMEA" in unit_text(sample, "reports/q3-report.pdf", "page-0007.md")
    assert "EMEA" not in unit_text(sample, "reports/q3-report.pdf", "page-0006.md")
    assert "Sheet1!B12 = 1200" in unit_text(sample, "budget.xlsx", "sheet-Sheet1.md")
    assert "Sheet1!C12 = =B12*2 -> 2400" in unit_text(sample, "budget.xlsx", "sheet-Sheet1.md")
    assert "40 enterprise customers" in unit_text(sample, "deck/pitch.pptx", "slide-002.md")


def test_content_counts_match_the_documents(sample: Engine) -> None:
    """Pages, slides, sheets and cells, counted by the libraries that wrote them."""
    import pptx
    import pymupdf

    pages = slides = sheets = cells = 0
    for path in sorted(sample.src.rglob("*")):
        if path.suffix == ".pdf":
            with pymupdf.open(path) as doc:
                pages += doc.page_count
        elif path.suffix == ".pptx":
            slides += len(pptx.Presentation(str(path)).slides)
        elif path.suffix == ".xlsx":
            wb = openpyxl.load_workbook(path)
            sheets += len(wb.worksheets)
            cells += sum(
                c.value is not None for ws in wb.worksheets for row in ws.iter_rows() for c in row
            )
    assert min(pages, slides, sheets, cells) > 0
    assert sample.views.content_counts() == {
        "pages": pages,
        "slides": slides,
        "sheets": sheets,
        "cells": cells,
    }


def test_fig2_cell_edit_goes_stale_then_current_and_diffs_by_cell(sample: Engine) -> None:
    """The paper's Fig. 2: budget.xlsx Sheet1!B12 goes from 1200 to 1350."""
    rel = RelPath("budget.xlsx")
    path = sample.src / rel
    parses_before = sum(
        1 for _, ev in sample.workspace.store.iter_state_log() if ev["ev"] == "parse"
    )
    sample.workspace.preserve(rel)
    wb = openpyxl.load_workbook(path)
    wb["Sheet1"]["B12"] = 1350
    wb.save(path)
    set_cached_values(path, {("Sheet1", "C12"): 2700})
    state = sample.workspace.record_write(rel)
    assert state is not None
    assert state.freshness == Freshness.STALE
    stale = unit_text(sample, rel, "sheet-Sheet1.md")
    assert 'freshness="stale"' in stale.splitlines()[0]
    assert "Sheet1!B12 = 1200" in stale  # the prior view, marked stale
    trio.run(sample.drain)
    current = unit_text(sample, rel, "sheet-Sheet1.md")
    assert 'freshness="current"' in current.splitlines()[0]
    assert "Sheet1!B12 = 1350" in current
    diff = sample.reviews.review_diff(rel)
    assert diff is not None
    text = diff.decode()
    assert "Sheet1!B12: 1200 -> 1350" in text
    assert [e.status for e in sample.reviews.review()] == [ChangeStatus.MODIFIED]
    # Only the edited workbook was parsed again; everything else reused its record.
    parses = [ev for _, ev in sample.workspace.store.iter_state_log() if ev["ev"] == "parse"]
    assert [ev["path"] for ev in parses[parses_before:]] == ["budget.xlsx"]
    # The old bytes are a readable version.
    old = sample.history.version_file(rel, 1)
    assert old is not None
    with open(old, "rb") as f:
        wb_old = openpyxl.load_workbook(f)
    assert wb_old["Sheet1"]["B12"].value == 1200


def test_parsed_diff_works_after_an_overwrite_behind_the_mount(sample: Engine) -> None:
    rel = RelPath("reports/q3-report.pdf")
    path = sample.src / rel
    path.write_bytes(docgen.pdf_bytes(12, fact_page=3, fact="Churn rose to 9% in Q3."))
    sample.scan()  # the old bytes were never preserved
    assert not sample.history.versions(rel)[0].available
    trio.run(sample.drain)
    diff = (sample.reviews.review_diff(rel) or b"").decode()
    assert "page-0007.md" in diff
    assert "-Churn in the EMEA segment fell to 3.2% in Q3." in diff
    assert "+Churn rose to 9% in Q3." in diff


HOSTILE = {
    "encrypted.pdf": docgen.encrypted_pdf,
    "cyclic.pdf": docgen.cyclic_pdf,
    "notzip.xlsx": docgen.non_zip_xlsx,
    "random.docx": docgen.random_docx,
    "entity.xlsx": docgen.entity_bomb_xlsx,
    "bomb.xlsx": docgen.ratio_bomb,
}


@pytest.mark.timeout(180)
def test_hostile_documents_fail_with_a_reason(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    made = tmp_path / "made"
    made.mkdir()
    names = {}
    for label, make in HOSTILE.items():
        out = made / label
        out.mkdir()
        produced = make(out)
        dest = src / f"{label}{produced.suffix if produced.suffix != Path(label).suffix else ''}"
        shutil.copy(produced, dest)
        names[dest.name] = label
    (src / "ok.txt").write_text("fine\n")
    limits = WorkerLimits(timeout=30, memory_mb=2048, workers=2)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        assert eng.views.parsed_view(RelPath("ok.txt")).freshness == Freshness.CURRENT  # type: ignore[union-attr]
        for name in names:
            view = eng.views.parsed_view(RelPath(name))
            if view is None:  # unsupported: no parser claims it (the random .docx may be)
                state = eng.workspace.file_state(RelPath(name))
                assert state is not None
                assert state.freshness == Freshness.UNSUPPORTED, name
                continue
            assert view.freshness == Freshness.FAILED, (name, view.freshness)
            assert view.error, name
            assert "\n" not in view.error
            # Each failed for its own reason: none hung a worker until the
            # timeout stopped it.
            assert "timed out" not in view.error, (name, view.error)
