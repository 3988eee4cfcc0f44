"""Review diff renderers: text against git, spreadsheets cell by cell, units."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import openpyxl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swfs.review import diffs
from swfs.review.diffs import (
    Cell,
    binary_diff,
    binary_line,
    parse_cell_lines,
    sheet_ref,
    spreadsheet_diff,
    text_diff,
    units_diff,
)

H_OLD = "1a2b3c4d5e6f7081" + "0" * 48
H_NEW = "9f8e7d6c5b4a3921" + "f" * 48


def body(diff: str) -> list[str]:
    """The lines after the git-style header (from the first line that is not one)."""
    lines = diff.splitlines()
    header = re.compile(
        r"diff --git |new file mode |deleted file mode |rename from |rename to |index "
    )
    i = 0
    while i < len(lines) and header.match(lines[i]):
        i += 1
    return lines[i:]


def hunks(diff: str) -> list[str]:
    """From the first '@@' on, with git's function context after '@@' dropped."""
    lines = diff.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    return [re.sub(r"^(@@ [^@]* @@).*", r"\1", line) for line in lines[start:]]


# -- text


def git_diff(tmp_path: Path, old: str | None, new: str | None) -> str:
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    args = []
    for p, text in ((a, old), (b, new)):
        if text is None:
            args.append("/dev/null")
        else:
            p.write_text(text)
            args.append(str(p))
    proc = subprocess.run(
        ["git", "diff", "--no-index", "--no-color", "-U3", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


SAMPLE_OLD = "".join(f"line {i}\n" for i in range(1, 61)) + "last line without newline"
SAMPLE_NEW = (
    "".join(f"line {i}\n" for i in range(1, 5))
    + "line 5 changed\n"
    + "".join(f"line {i}\n" for i in range(6, 30))
    + "".join(f"line {i}\n" for i in range(32, 50))
    + "inserted A\ninserted B\n"
    + "".join(f"line {i}\n" for i in range(50, 61))
    + "last line, now with newline\n"
)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize(
    ("old", "new"),
    [
        (SAMPLE_OLD, SAMPLE_NEW),
        (SAMPLE_NEW, SAMPLE_OLD),
        (None, "one\ntwo\n"),
        ("one\ntwo", None),
        ("a\r\nb\r\nc\r\n", "a\r\nB\r\nc\r\n"),
        ("same\nend", "same\nend\n"),
    ],
)
def test_text_hunks_match_git(tmp_path: Path, old: str | None, new: str | None) -> None:
    ours = text_diff("x.txt", "x.txt", old, new, old_hash=H_OLD, new_hash=H_NEW)
    assert hunks(ours) == hunks(git_diff(tmp_path, old, new))


def test_text_headers_modified() -> None:
    out = text_diff("notes.md", "notes.md", "a\n", "b\n", old_hash=H_OLD, new_hash=H_NEW)
    assert out.splitlines()[:4] == [
        "diff --git a/notes.md b/notes.md",
        "index 1a2b3c4d5e6f7081..9f8e7d6c5b4a3921",
        "--- a/notes.md",
        "+++ b/notes.md",
    ]
    assert out.endswith("+b\n")


def test_text_headers_added_deleted_renamed() -> None:
    added = text_diff(None, "new.txt", None, "x\n", old_hash=None, new_hash=H_NEW)
    assert added.splitlines()[:5] == [
        "diff --git a/new.txt b/new.txt",
        "new file mode 100644",
        "index 0000000000000000..9f8e7d6c5b4a3921",
        "--- /dev/null",
        "+++ b/new.txt",
    ]
    deleted = text_diff("old.txt", None, "x\n", None, old_hash=H_OLD, new_hash=None)
    assert deleted.splitlines()[:5] == [
        "diff --git a/old.txt b/old.txt",
        "deleted file mode 100644",
        "index 1a2b3c4d5e6f7081..0000000000000000",
        "--- a/old.txt",
        "+++ /dev/null",
    ]
    renamed = text_diff("a.txt", "b.txt", "x\ny\n", "x\nz\n", old_hash=H_OLD, new_hash=H_NEW)
    assert renamed.splitlines()[:6] == [
        "diff --git a/a.txt b/b.txt",
        "rename from a.txt",
        "rename to b.txt",
        "index 1a2b3c4d5e6f7081..9f8e7d6c5b4a3921",
        "--- a/a.txt",
        "+++ b/b.txt",
    ]
    pure_rename = text_diff("a.txt", "b.txt", "x\n", "x\n", old_hash=H_OLD, new_hash=H_OLD)
    assert "@@" not in pure_rename
    assert "rename to b.txt" in pure_rename


def test_text_bounded() -> None:
    old = "".join(f"{i}\n" for i in range(1000))
    out = text_diff("big.txt", "big.txt", old, None, old_hash=H_OLD, new_hash=None, max_lines=50)
    lines = body(out)
    # --- / +++ lines are header; 50 body lines, then the note.
    assert len(lines) == 2 + 50 + 1
    assert lines[-1] == "[swfs: diff cut at 50 lines; 951 more lines not shown]"


# -- binaries


def test_binary_line() -> None:
    line = binary_line("x.bin", old_size=1200, new_size=1350, old_hash=H_OLD, new_hash=H_NEW)
    assert line == (
        "Binary files a/x.bin and b/x.bin differ "
        "(1200 -> 1350 bytes, b3:1a2b3c4d5e6f7081 -> b3:9f8e7d6c5b4a3921)\n"
    )
    added = binary_diff("x.bin", old_size=None, new_size=5, old_hash=None, new_hash=H_NEW)
    assert added.splitlines() == [
        "diff --git a/x.bin b/x.bin",
        "new file mode 100644",
        "index 0000000000000000..9f8e7d6c5b4a3921",
        "Binary files /dev/null and b/x.bin differ (none -> 5 bytes, none -> b3:9f8e7d6c5b4a3921)",
    ]


# -- spreadsheets: the unit format


def render_sheet(ws: openpyxl.worksheet.worksheet.Worksheet) -> str:
    """A sheet unit in the xlsx parser's cell-line format (formulas without
    cached values, as openpyxl writes them)."""
    ref = sheet_ref(ws.title)
    lines = [f"# {ws.title}", ""]
    for row in ws.iter_rows():
        for c in row:
            if c.value is None:
                continue
            lines.append(f"{ref}!{c.coordinate} = {c.value}")
    return "\n".join(lines) + "\n"


def workbook_units(path: Path) -> list[tuple[str, str]]:
    wb = openpyxl.load_workbook(path)
    try:
        return [(ws.title, render_sheet(ws)) for ws in wb.worksheets]
    finally:
        wb.close()


def make_budget(path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    ws.title = "Sheet1"
    for r in range(1, 21):
        ws.cell(r, 1, f"item {r}")
        ws.cell(r, 2, r * 100)
    ws["B12"] = 1200
    ws["C12"] = "=B12*2"
    wb.save(path)


def test_parse_cell_lines() -> None:
    text = (
        "<!-- a header line -->\n"
        "Sheet1!A1 = Revenue\n"
        "Sheet1!B2 = 1200\n"
        "Sheet1!C2 = =B2*2 -> 2400\n"
        "Sheet1!D2 = =SUM(B2:C2)\n"
        'Sheet1!E2 = =IF(A1="x -> y","a -> b","c") -> c\n'
        "Sheet1!F2 = \n"
        "'It''s Q1'!A1 = quoted\n"
        "not a cell line\n"
    )
    assert parse_cell_lines(text) == {
        "A1": Cell("quoted"),  # the later line for A1 wins
        "B2": Cell("1200"),
        "C2": Cell("2400", "=B2*2"),
        "D2": Cell(None, "=SUM(B2:C2)"),
        "E2": Cell("c", '=IF(A1="x -> y","a -> b","c")'),
        "F2": Cell(""),
    }


def test_sheet_ref_quoting() -> None:
    assert sheet_ref("Sheet1") == "Sheet1"
    assert sheet_ref("data.v2_x") == "data.v2_x"
    assert sheet_ref("It's") == "'It''s'"
    assert sheet_ref("Q1 Budget") == "'Q1 Budget'"


# -- spreadsheets: diffs of real workbooks


def test_paper_example_b12(tmp_path: Path) -> None:
    path = tmp_path / "budget.xlsx"
    make_budget(path)
    old = workbook_units(path)
    wb = openpyxl.load_workbook(path)
    wb["Sheet1"]["B12"] = 1350
    wb.save(path)
    out = spreadsheet_diff("budget.xlsx", old, workbook_units(path), old_hash=H_OLD, new_hash=H_NEW)
    assert out.splitlines() == [
        "diff --git a/budget.xlsx b/budget.xlsx",
        "index 1a2b3c4d5e6f7081..9f8e7d6c5b4a3921",
        "Sheet1!B12: 1200 -> 1350",
    ]


def test_formula_change_and_added_removed_cells() -> None:
    old = [("Sheet1", "Sheet1!B12 = 1200\nSheet1!C12 = =B12*2 -> 2400\nSheet1!D5 = 7\n")]
    new = [("Sheet1", "Sheet1!B12 = 1350\nSheet1!C12 = =B12*3 -> 4050\nSheet1!D4 = 7\n")]
    out = spreadsheet_diff("b.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW)
    assert body(out) == [
        "Sheet1!D4: (empty) -> 7",
        "Sheet1!D5: 7 -> (empty)",
        "Sheet1!B12: 1200 -> 1350",
        "Sheet1!C12: =B12*2 -> 2400  =>  =B12*3 -> 4050",
    ]


def test_value_becomes_formula() -> None:
    old = [("S", "S!A1 = 5\nS!A2 = =A1+1\n")]
    new = [("S", "S!A1 = =2+3 -> 5\nS!A2 = =A1+1\n")]
    out = spreadsheet_diff("b.xlsx", old, new, old_hash=H_OLD, new_hash=H_NEW)
    assert body(out) == ["S!A1: 5  =>  =2+3 -> 5"]


def test_added_and_removed_sheets(tmp_path: Path) -> None:
    path = tmp_path / "budget.xlsx"
    make_budget(path)
    wb = openpyxl.load_workbook(path)
    old_ws = wb.create_sheet("Old")
    for r in range(1, 4):
        old_ws.cell(r, 1, r)
    wb.save(path)
    old = workbook_units(path)

    wb = openpyxl.load_workbook(path)
    del wb["Old"]
    summary = wb.create_sheet("It's Summary")
    for r in range(1, 5):
        for c in range(1, 4):
            summary.cell(r, c, r * c)
    wb.save(path)
    out = spreadsheet_diff("budget.xlsx", old, workbook_units(path), old_hash=H_OLD, new_hash=H_NEW)
    lines = body(out)
    assert lines[:4] == [
        "- sheet Old (3 cells)",
        "Old!A1: 1 -> (empty)",
        "Old!A2: 2 -> (empty)",
        "Old!A3: 3 -> (empty)",
    ]
    assert lines[4] == "+ sheet It's Summary (12 cells)"
    assert lines[5] == "'It''s Summary'!A1: (empty) -> 1"
    assert len(lines) == 4 + 1 + 12


def test_big_added_sheet_is_counted_only() -> None:
    text = "".join(f"Big!A{r} = {r}\n" for r in range(1, 500))
    out = spreadsheet_diff("b.xlsx", [], [("Big", text)], old_hash=H_OLD, new_hash=H_NEW)
    assert body(out) == ["+ sheet Big (499 cells)"]


def test_row_insertion_is_summarized(tmp_path: Path) -> None:
    path = tmp_path / "budget.xlsx"
    make_budget(path)
    old = workbook_units(path)
    wb = openpyxl.load_workbook(path)
    ws = wb["Sheet1"]
    ws.insert_rows(5, 100)
    for r in range(5, 105):
        ws.cell(r, 1, f"new item {r}")
        ws.cell(r, 2, r)
    ws["C112"] = "=B112*2"  # openpyxl does not shift formulas; the user fixes it
    ws["B113"] = 9999  # and one genuine change below the insertion
    wb.save(path)
    out = spreadsheet_diff("budget.xlsx", old, workbook_units(path), old_hash=H_OLD, new_hash=H_NEW)
    assert body(out) == [
        "Sheet1: 100 rows inserted at row 5 (rows 5-104), 200 cells not listed",
        "Sheet1!B113 (was B13): 1300 -> 9999",
    ]


def test_row_deletion_is_summarized() -> None:
    old_text = "".join(f"S!A{r} = v{r}\nS!B{r} = {r}\n" for r in range(1, 201))
    kept = [r for r in range(1, 201) if not 50 <= r <= 149]
    new_text = "".join(f"S!A{i} = v{r}\nS!B{i} = {r}\n" for i, r in enumerate(kept, start=1))
    out = spreadsheet_diff(
        "d.xlsx", [("S", old_text)], [("S", new_text)], old_hash=H_OLD, new_hash=H_NEW
    )
    assert body(out) == ["S: 100 rows deleted at row 50 (old rows 50-149), 200 cells not listed"]


def test_small_row_insertion_lists_cells() -> None:
    old_text = "".join(f"S!A{r} = v{r}\n" for r in range(1, 10))
    new_rows = [f"v{r}" for r in range(1, 4)] + ["Travel"] + [f"v{r}" for r in range(4, 10)]
    new_text = "".join(f"S!A{i} = {v}\n" for i, v in enumerate(new_rows, start=1))
    out = spreadsheet_diff(
        "d.xlsx", [("S", old_text)], [("S", new_text)], old_hash=H_OLD, new_hash=H_NEW
    )
    assert body(out) == ["S: 1 row inserted at row 4 (row 4)", "S!A4: (empty) -> Travel"]


def test_shifted_relative_formulas_are_not_changes() -> None:
    old_text = "".join(f"S!A{r} = {r}\nS!B{r} = =A{r}*2 -> {2 * r}\n" for r in range(1, 30))
    new_text = "S!A1 = 1\nS!B1 = =A1*2 -> 2\nS!A2 = inserted\n" + "".join(
        f"S!A{r + 1} = {r}\nS!B{r + 1} = =A{r + 1}*2 -> {2 * r}\n" for r in range(2, 30)
    )
    out = spreadsheet_diff(
        "d.xlsx", [("S", old_text)], [("S", new_text)], old_hash=H_OLD, new_hash=H_NEW
    )
    assert body(out) == ["S: 1 row inserted at row 2 (row 2)", "S!A2: (empty) -> inserted"]


def test_spreadsheet_bounded_and_unchanged() -> None:
    old_text = "".join(f"S!A{r} = {r}\n" for r in range(1, 101))
    new_text = "".join(f"S!A{r} = {r + 1000}\n" for r in range(1, 101))
    out = spreadsheet_diff(
        "d.xlsx", [("S", old_text)], [("S", new_text)], old_hash=H_OLD, new_hash=H_NEW, max_lines=10
    )
    lines = body(out)
    assert len(lines) == 11
    assert lines[0] == "S!A1: 1 -> 1001"
    assert lines[-1] == "[swfs: diff cut at 10 lines; 90 more lines not shown]"

    same = spreadsheet_diff(
        "d.xlsx", [("S", old_text)], [("S", old_text)], old_hash=H_OLD, new_hash=H_NEW
    )
    assert body(same) == ["(no cell changes; the file differs in formatting or other content)"]


def test_spreadsheet_added_file() -> None:
    out = spreadsheet_diff("new.xlsx", None, [("S", "S!A1 = 1\n")], old_hash=None, new_hash=H_NEW)
    assert out.splitlines() == [
        "diff --git a/new.xlsx b/new.xlsx",
        "new file mode 100644",
        "index 0000000000000000..9f8e7d6c5b4a3921",
        "+ sheet S (1 cell)",
        "S!A1: (empty) -> 1",
    ]


# -- parsed units


def pages(*texts: str) -> list[tuple[str, str]]:
    return [(f"page-{i:04d}.md", t) for i, t in enumerate(texts, start=1)]


def test_units_diff_labels_changed_unit() -> None:
    old = pages("intro\n", "revenue 1200\ncosts 300\n", "outlook\n")
    new = pages("intro\n", "revenue 1350\ncosts 300\n", "outlook\n")
    out = units_diff("report.pdf", old, new, old_hash=H_OLD, new_hash=H_NEW)
    assert out.splitlines() == [
        "diff --git a/report.pdf b/report.pdf",
        "index 1a2b3c4d5e6f7081..9f8e7d6c5b4a3921",
        "--- a/report.pdf#page-0002.md",
        "+++ b/report.pdf#page-0002.md",
        "@@ -1,2 +1,2 @@",
        "-revenue 1200",
        "+revenue 1350",
        " costs 300",
    ]


def test_units_diff_inserted_and_removed_pages() -> None:
    old = pages("one\n", "two\n", "three\n", "four\n")
    new = pages("one\n", "new page\n", "two\n", "three\n")
    out = units_diff("report.pdf", old, new, old_hash=H_OLD, new_hash=H_NEW)
    assert body(out) == [
        "--- /dev/null",
        "+++ b/report.pdf#page-0002.md",
        "@@ -0,0 +1 @@",
        "+new page",
        "unchanged: page-0003.md .. page-0004.md (was page-0002.md .. page-0003.md, 2 units)",
        "--- a/report.pdf#page-0004.md",
        "+++ /dev/null",
        "@@ -1 +0,0 @@",
        "-four",
    ]


def test_units_diff_deleted_file_and_bound() -> None:
    old = pages(*("".join(f"p{p} line {i}\n" for i in range(40)) for p in range(10)))
    out = units_diff("deck.pptx", old, None, old_hash=H_OLD, new_hash=None, max_lines=30)
    lines = out.splitlines()
    assert lines[1] == "deleted file mode 100644"
    assert lines[-1].startswith("[swfs: diff cut at 30 lines; ")
    assert len(body(out)) == 31


# -- text diffs are patches: applying one to the old text gives the new text


def apply_patch(old: str, diff: str) -> str:
    """A minimal unified-diff applier (hunks only), strict about context."""
    old_lines = old.split("\n")
    src = [line + "\n" for line in old_lines[:-1]] + ([old_lines[-1]] if old_lines[-1] else [])
    out: list[str] = []
    pos = 0
    last = ""
    lines = diff.split("\n")[:-1]
    first_hunk = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    for line in lines[first_hunk:]:
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line)
        if m:
            start = int(m[1]) - (0 if m[2] == "0" else 1)
            assert start >= pos
            out += src[pos:start]
            pos = start
        elif line.startswith((" ", "-")):
            assert src[pos].removesuffix("\n") == line[1:], (pos, line)
            if line[0] == " ":
                out.append(src[pos])
            pos += 1
        elif line.startswith("+"):
            out.append(line[1:] + "\n")
        elif line == "\\ No newline at end of file" and last.startswith("+"):
            out[-1] = out[-1].removesuffix("\n")
        last = line
    return "".join(out + src[pos:])


lines_strategy = st.lists(st.sampled_from(["a", "b", "c", "", "d d", "}"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(old=lines_strategy, new=lines_strategy, old_nl=st.booleans(), new_nl=st.booleans())
def test_text_diff_applies(old: list[str], new: list[str], old_nl: bool, new_nl: bool) -> None:
    old_text = "\n".join(old) + ("\n" if old_nl and old else "")
    new_text = "\n".join(new) + ("\n" if new_nl and new else "")
    out = text_diff("f", "f", old_text, new_text, old_hash=H_OLD, new_hash=H_NEW, max_lines=10**9)
    assert apply_patch(old_text, out) == new_text


def test_unaligned_middle_is_still_a_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Beyond the work bound the middle is one block: bigger, still correct.
    monkeypatch.setattr(diffs, "MATCH_WORK", 10)
    old_text = "".join(f"{i % 7}\n" for i in range(100))
    new_text = "head\n" + "".join(f"{i % 5}\n" for i in range(100)) + "tail\n"
    out = text_diff("f", "f", old_text, new_text, old_hash=H_OLD, new_hash=H_NEW, max_lines=10**9)
    assert apply_patch(old_text, out) == new_text


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_apply_accepts_our_patch(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "x.txt").write_text(SAMPLE_OLD)
    patch = text_diff("x.txt", "x.txt", SAMPLE_OLD, SAMPLE_NEW, old_hash=H_OLD, new_hash=H_NEW)
    (tmp_path / "p.diff").write_text(patch)
    subprocess.run(["git", "-C", str(tmp_path), "apply", "p.diff"], check=True)
    assert (tmp_path / "x.txt").read_text() == SAMPLE_NEW


# -- spreadsheet diffs are complete: replaying one on the old sheet gives the new


def replay_sheet(old: dict[int, dict[str, str]], diff: str) -> dict[int, dict[str, str]]:
    """Apply a spreadsheet diff's row insertions/deletions and cell changes
    (plain values only) to ``old`` ({row: {column: value}})."""
    deleted: set[int] = set()
    inserted: list[tuple[int, int]] = []
    changes: list[tuple[str, int, str]] = []
    for line in body(diff):
        if m := re.fullmatch(
            r"S: (\d+) rows? deleted at row \d+ \(old rows? (\d+)(?:-\d+)?\)", line
        ):
            first = int(m[2])
            deleted.update(range(first, first + int(m[1])))
        elif m := re.fullmatch(r"S: (\d+) rows? inserted at row (\d+) \(.*\)", line):
            inserted.append((int(m[2]), int(m[1])))
        elif m := re.fullmatch(
            r"S!([A-Z]+)(\d+)( \(was [A-Z]+\d+\)| \(old\))?: (.*) -> (.*)", line
        ):
            if m[3] != " (old)":  # cells of deleted rows go with their rows
                changes.append((m[1], int(m[2]), m[5]))
        elif not line.startswith("(no cell changes"):
            raise AssertionError(f"unexpected line {line!r}")
    new: dict[int, dict[str, str]] = {}
    gone = 0
    added = 0
    pending = sorted(inserted)
    for r in sorted(old.keys() | deleted):
        if r in deleted:
            gone += 1
            continue
        pos = r - gone + added
        while pending and pending[0][0] <= pos:
            added += pending.pop(0)[1]
            pos = r - gone + added
        new[pos] = dict(old[r])
    for col, row, value in changes:
        if value == "(empty)":
            del new[row][col]
        else:
            new.setdefault(row, {})[col] = value
    return {r: cells for r, cells in new.items() if cells}


def sheet_text(rows: dict[int, dict[str, str]]) -> str:
    return "".join(
        f"S!{col}{r} = {v}\n" for r in sorted(rows) for col, v in sorted(rows[r].items())
    )


values = st.sampled_from(["1", "2", "3", "x", "y"])
row_st = st.dictionaries(st.sampled_from("AB"), values, min_size=1, max_size=2)


@settings(max_examples=400, deadline=None)
@given(
    old_rows=st.lists(st.one_of(st.none(), row_st), max_size=25),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["insert", "delete", "set", "clear"]),
            st.integers(1, 30),
            st.integers(1, 8),
            row_st,
        ),
        max_size=5,
    ),
)
def test_spreadsheet_diff_replays(
    old_rows: list[dict[str, str] | None],
    edits: list[tuple[str, int, int, dict[str, str]]],
) -> None:
    old = {r: cells for r, cells in enumerate(old_rows, start=1) if cells}
    seq: list[dict[str, str] | None] = list(old_rows)
    for op, at, n, cells in edits:
        at = min(at, len(seq))
        if op == "insert":
            seq[at:at] = [dict(cells) if i % 2 else None for i in range(n)]
        elif op == "delete":
            del seq[at : at + n]
        elif op == "set":
            seq[at : at + 1] = [dict(cells)]
        elif at < len(seq):
            seq[at] = None
    new = {r: cells for r, cells in enumerate(seq, start=1) if cells}
    with mock.patch.object(diffs, "LIST_CELLS", 10**6):
        out = spreadsheet_diff(
            "s.xlsx",
            [("S", sheet_text(old))],
            [("S", sheet_text(new))],
            old_hash=H_OLD,
            new_hash=H_NEW,
            max_lines=10**9,
        )
    assert replay_sheet(old, out) == new, out


def test_long_aligned_rendering_is_recomputed_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    old_text = "".join(f"S!A{r} = v{r}\n" for r in range(1, 60))
    new_rows = [f"v{r}" for r in range(1, 10)] + [f"n{i}" for i in range(30)]
    new_rows += [f"v{r}" if r % 5 else f"w{r}" for r in range(10, 60)]
    new_text = "".join(f"S!A{i} = {v}\n" for i, v in enumerate(new_rows, start=1))
    sheets = ([("S", old_text)], [("S", new_text)])
    expected = spreadsheet_diff("s.xlsx", *sheets, old_hash=H_OLD, new_hash=H_NEW)
    assert body(expected)[0] == "S: 30 rows inserted at row 10 (rows 10-39), 30 cells not listed"
    assert body(expected)[1] == "S!A40 (was A10): v10 -> w10"
    monkeypatch.setattr(diffs, "KEEP_LINES", 1)
    assert spreadsheet_diff("s.xlsx", *sheets, old_hash=H_OLD, new_hash=H_NEW) == expected
