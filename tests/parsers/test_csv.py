"""CSV and TSV: row-range units for large files, cell-level diffs.

Fixtures are written with Python's csv module the way exporting programs
write them (Excel's dialect: CRLF records, quoted fields with embedded line
breaks), plus the encodings Windows and Japanese exports use.
"""

from __future__ import annotations

import csv
import io
import pathlib
import re

import pytest
import trio

from parsers import registry
from parsers._base import ParseOptions, Unit
from parsers.delimited import SPLIT_ROWS, read_table
from swfs.api import RelPath
from swfs.engine import Engine
from swfs.review import diffs
from swfs.workspace import Config
from tests import mountutil
from tests.mountutil import needs_fuse

HEADER = ["id", "region", "amount", "note"]


def records(n: int, *, changed: dict[int, str] | None = None) -> list[list[str]]:
    changed = changed or {}
    rows = [HEADER]
    for i in range(1, n + 1):
        note = "first line\nsecond line" if i == 7 else ("a|b" if i == 8 else "ok")
        rows.append([str(i), f"R{i % 5}", changed.get(i, str(i * 10)), note])
    return rows


def write_csv(
    path: pathlib.Path, rows: list[list[str]], *, lineterminator: str = "\r\n", delimiter: str = ","
) -> pathlib.Path:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator=lineterminator, delimiter=delimiter)
    writer.writerows(rows)
    path.write_bytes(buf.getvalue().encode("utf-8"))
    return path


def parse(path: pathlib.Path) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def by_locator(units: list[Unit]) -> dict[str, str]:
    return {u.locator: u.text for u in units}


# -- units ---------------------------------------------------------------------------------


def test_small_csv_is_content_txt(tmp_path: pathlib.Path) -> None:
    path = write_csv(tmp_path / "small.csv", records(50))
    kind, units = parse(path)
    assert kind == "csv"
    assert [(u.name, u.locator) for u in units] == [("content.txt", "content")]
    assert units[0].text == path.read_bytes().decode("utf-8")


def test_large_csv_becomes_row_units(tmp_path: pathlib.Path) -> None:
    n = 12_000
    path = write_csv(tmp_path / "export.csv", records(n))
    kind, units = parse(path)
    assert kind == "csv"
    assert [(u.name, u.locator) for u in units] == [
        ("rows-000001-005000.md", "rows=1-5000"),
        ("rows-005001-010000.md", "rows=5001-10000"),
        ("rows-010001-012000.md", "rows=10001-12000"),
    ]
    head = "| row | id | region | amount | note |\n| --- | --- | --- | --- | --- |\n"
    for u in units:
        assert u.text.startswith(head), u.name
        assert len(u.text.encode()) < 256 * 1024
    texts = by_locator(units)
    # must include, with its locator: a record per line, its row number first
    assert "| 1 | 1 | R1 | 10 | ok |\n" in texts["rows=1-5000"]
    assert "| 5001 | 5001 | R1 | 50010 | ok |\n" in texts["rows=5001-10000"]
    assert texts["rows=10001-12000"].endswith("| 12000 | 12000 | R0 | 120000 | ok |\n")
    # a quoted field with a line break is one record; a pipe is escaped
    assert "| 7 | 7 | R2 | 70 | first line<br>second line |\n" in texts["rows=1-5000"]
    assert "| 8 | 8 | R3 | 80 | a\\|b |\n" in texts["rows=1-5000"]
    # must not include: a row in the wrong unit, the raw record, the header as a row
    assert "| 5001 |" not in texts["rows=1-5000"]
    assert "| 5000 |" not in texts["rows=5001-10000"]
    assert "7,R2,70" not in texts["rows=1-5000"]
    assert "| 1 | id |" not in texts["rows=1-5000"]
    # every record once, in order
    numbers = [int(m[1]) for u in units for m in re.finditer(r"^\| (\d+) \|", u.text, re.MULTILINE)]
    assert numbers == list(range(1, n + 1))


def test_wide_rows_make_smaller_units(tmp_path: pathlib.Path) -> None:
    rows = [["k", "text"]] + [[str(i), "w" * 300] for i in range(1, 3001)]
    kind, units = parse(write_csv(tmp_path / "wide.csv", rows))
    assert units[0].locator == "rows=1-500"
    assert units[-1].locator == "rows=2501-3000"
    assert all(len(u.text.encode()) < 256 * 1024 for u in units)


def test_tsv_without_header(tmp_path: pathlib.Path) -> None:
    rows = [[str(i), f"{i * 1.5}", f"item {i}"] for i in range(1, SPLIT_ROWS + 2)]
    path = write_csv(tmp_path / "readings.tsv", rows, lineterminator="\n", delimiter="\t")
    kind, units = parse(path)
    assert kind == "csv"
    first = units[0].text
    assert first.startswith("| row | A | B | C |\n")
    assert "| 1 | 1 | 1.5 | item 1 |\n" in first
    assert "| 5001 | 5001 | 7501.5 | item 5001 |\n" in units[1].text
    assert "\t" not in first


def test_semicolon_csv_in_cp1252(tmp_path: pathlib.Path) -> None:
    """A European Excel export: ';' separated, cp1252, more than SPLIT_ROWS rows."""
    lines = ["Kunde;Stadt;Betrag"] + [f"Müller {i};Köln;{i},50" for i in range(1, 6001)]
    path = tmp_path / "kunden.csv"
    path.write_bytes("\r\n".join(lines).encode("cp1252"))
    _, units = parse(path)
    assert units[0].text.startswith("| row | Kunde | Stadt | Betrag |\n")
    assert "| 3 | Müller 3 | Köln | 3,50 |\n" in units[0].text
    assert "\ufffd" not in units[0].text
    assert "MÃ¼ller" not in units[0].text


def test_shift_jis_csv(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "meibo.csv"
    path.write_bytes("名前,年齢,住所\n佐藤太郎,30,東京\n三木英子,25,大阪\n".encode("cp932"))
    _, units = parse(path)
    assert "佐藤太郎,30,東京" in units[0].text
    assert "\ufffd" not in units[0].text


def test_latin1_text_file_is_not_replacement_characters(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes("Réunion déplacée à jeudi.\n".encode("cp1252"))
    assert parse(path)[1][0].text == "Réunion déplacée à jeudi.\n"


def test_mostly_utf8_keeps_utf8(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "mixed.txt"
    path.write_bytes("naïve café ".encode() * 20 + b"\xff stray\n")
    text = parse(path)[1][0].text
    assert text.startswith("naïve café")
    assert text.endswith("\ufffd stray\n")


# -- diffs ---------------------------------------------------------------------------------


def table(rows: list[list[str]], lineterminator: str = "\r\n") -> diffs.Table:
    buf = io.StringIO()
    csv.writer(buf, lineterminator=lineterminator).writerows(rows)
    return read_table(buf.getvalue(), ".csv")


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(("diff --git", "index "))]


def test_cell_changes_and_rows() -> None:
    old = records(30)
    new = [r for r in records(30, changed={12: "12"}) if r[0] != "7"]
    new.append(["31", "R1", "5", "late"])
    out = diffs.table_diff("data.csv", table(old), table(new), old_hash="a" * 64, new_hash="b" * 64)
    assert body(out) == [
        "data.csv old row 7 removed: id=7; region=R2; amount=70; note=first line<br>second line",
        "data.csv row 11 (was row 12) [amount]: 120 -> 12",
        "data.csv row 30 added: id=31; region=R1; amount=5; note=late",
    ]


def test_columns_by_name() -> None:
    old = [["id", "amount", "notes"], ["1", "10", "x"], ["2", "20", "y"]]
    new = [["id", "discount", "amount"], ["1", "0", "10"], ["2", "5", "25"]]
    out = diffs.table_diff("d.csv", table(old), table(new), old_hash=None, new_hash=None)
    assert body(out) == [
        "d.csv column removed: notes",
        "d.csv column added: discount",
        "d.csv row 2 [amount]: 20 -> 25",
    ]


def test_many_added_rows_are_counted() -> None:
    old = records(10)
    new = records(10) + [[str(i), "R", "1", "n"] for i in range(11, 111)]
    out = diffs.table_diff("d.csv", table(old), table(new), old_hash=None, new_hash=None)
    assert body(out) == ["d.csv rows 11-110 added (100 rows, not listed)"]


def test_line_endings_only_is_no_change() -> None:
    rows = records(20_000)
    out = diffs.table_diff(
        "big.csv", table(rows, "\r\n"), table(rows, "\n"), old_hash=None, new_hash=None
    )
    assert body(out) == ["(no cell changes; the file differs in line endings, quoting or encoding)"]


def test_units_read_back_match_the_source(tmp_path: pathlib.Path) -> None:
    """A diff between a small file (content.txt) and a large one (row units)
    compares the same cells."""
    path = write_csv(tmp_path / "grow.csv", records(6000))
    _, units = parse(path)
    from_units = diffs.table_from_units([(u.name, u.text) for u in units], ".csv")
    from_text = read_table(path.read_bytes().decode("utf-8"), ".csv")
    assert from_units == from_text


# -- through the engine --------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_review_of_a_large_csv(tmp_path: pathlib.Path) -> None:
    """A 20,000-row export: a CRLF rewrite is no change; one edited cell is one line."""
    src = tmp_path / "ws"
    src.mkdir()
    path = write_csv(src / "export.csv", records(20_000))
    rel = RelPath("export.csv")
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        view = eng.views.parsed_view(rel)
        assert view is not None
        assert [u.name for u in view.units][:2] == [
            "rows-000001-005000.md",
            "rows-005001-010000.md",
        ]
        unit = view.units[2].content.decode()
        assert 'locator="export.csv#rows=10001-15000"' in unit.splitlines()[0]
        assert "| 12345 | 12345 | R0 | 123450 | ok |" in unit

        write_csv(path, records(20_000), lineterminator="\n")
        eng.scan()
        trio.run(eng.drain)
        text = (eng.reviews.review_diff(rel) or b"").decode()
        assert "(no cell changes; the file differs in line endings" in text
        assert len(text.splitlines()) < 5

        write_csv(path, records(20_000, changed={12_345: "999"}), lineterminator="\n")
        eng.scan()
        trio.run(eng.drain)
        text = (eng.reviews.review_diff(rel) or b"").decode()
        assert body(text) == ["export.csv row 12345 [amount]: 123450 -> 999"]


def test_unterminated_quote_still_gives_rows(tmp_path: pathlib.Path) -> None:
    """A quote never closed would swallow the rest of the file as one field:
    the file is read again with quotes taken literally."""
    rows = ["a,b,c"] + [f"{i},x,y" for i in range(1, 8001)]
    rows[10] = '10,"unterminated,y'
    path = tmp_path / "broken.csv"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    _, units = parse(path)
    assert units[0].locator == "rows=1-5000"
    assert '| 10 | 10 | "unterminated | y |\n' in units[0].text
    assert "| 11 | 11 | x | y |\n" in units[0].text
    assert "| 8000 | 8000 | x | y |\n" in units[1].text


def test_apostrophes_are_not_quotes(tmp_path: pathlib.Path) -> None:
    rows = [["name", "city", "n"]] + [
        [f"O'Brien {i}", "L'Aquila", str(i)] for i in range(1, SPLIT_ROWS + 10)
    ]
    _, units = parse(write_csv(tmp_path / "names.csv", rows, lineterminator="\n"))
    assert "| 2 | O'Brien 2 | L'Aquila | 2 |\n" in units[0].text


# -- through a real mount ------------------------------------------------------------------


@needs_fuse
@pytest.mark.mount
@pytest.mark.timeout(300)
def test_grep_through_the_mount_gives_the_row() -> None:
    """`grep -rn` over .parsed names the row-range unit and the row; a CRLF
    rewrite through the mount is no cell change in .review."""
    import subprocess

    def populate(src: pathlib.Path) -> None:
        write_csv(src / "export.csv", records(20_000, changed={12_345: "NEEDLE-77"}))

    with mountutil.workspace(populate=populate) as ws:
        proc = subprocess.run(
            ["grep", "-rn", "NEEDLE-77", str(ws.mnt / ".parsed")],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        [hit] = proc.stdout.splitlines()
        assert "/.parsed/export.csv/rows-010001-015000.md:" in hit
        assert hit.endswith("| 12345 | 12345 | R0 | NEEDLE-77 | ok |")
        head = (ws.mnt / ".parsed" / "export.csv" / "rows-010001-015000.md").read_text()
        assert 'locator="export.csv#rows=10001-15000"' in head.splitlines()[0]

        write_csv(
            ws.mnt / "export.csv",
            records(20_000, changed={12_345: "NEEDLE-77"}),
            lineterminator="\n",
        )
        mountutil.swfs("sync", ws.mnt)
        diff = (ws.mnt / ".review" / "export.csv.diff").read_text()
        assert "(no cell changes; the file differs in line endings" in diff
        assert len(diff.splitlines()) < 5


def test_large_file_without_records_stays_text(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "blank.csv"
    path.write_bytes(b"\r\n" * 100_000)
    kind, units = parse(path)
    assert (kind, [u.name for u in units]) == ("csv", ["content.txt"])
