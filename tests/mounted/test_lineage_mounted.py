"""The access journal and lineage through a real mount.

Scripted agent tasks (``bash -c`` commands, Python scripts, pipelines,
temp-then-rename saves, in-place edits) run in the mount; each has a known
ground-truth graph.  ``swfs lineage --json`` is scored against the truth by
Node F1 and Edge F1 (over paths), reported, and each must be at least 0.9.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mountutil import (
    Mount,
    needs_fuse,
    run_as,
    swfs,
    unprivileged_ids,
    workspace,
)

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]

ROWS = 400


def populate(src: Path) -> None:
    import xlsxwriter

    for d in ("data", "finance", "notes", "reports", "out", "tmp", "deliverables"):
        (src / d).mkdir()
    lines = ["id,region,amount"] + [f"{i},{'NSEW'[i % 4]},{i * 7 % 101}" for i in range(1, ROWS)]
    (src / "data" / "export.csv").write_text("\n".join(lines) + "\n")
    (src / "data" / "unrelated.csv").write_text("x,y\n1,2\n")
    wb = xlsxwriter.Workbook(str(src / "finance" / "budget.xlsx"))
    ws = wb.add_worksheet("Sheet1")
    ws.write_row(0, 0, ["region", "budget"])
    for r, (region, amount) in enumerate([("North", 1200), ("South", 900)], start=1):
        ws.write_row(r, 0, [region, amount])
    ws.write_formula(3, 1, "=SUM(B2:B3)", None, 2100)
    wb.close()
    (src / "notes" / "brief.md").write_text("# Brief\n\nSummarise Q3 revenue by region.\n")
    (src / "reports" / "q3.txt").write_text("Q3 report\nrevenue up\nmargins flat\nend\n")
    (src / "config.json").write_text('{"mode": "draft", "threshold": 3}\n')


SUMMARY_PY = """
import csv, openpyxl
wb = openpyxl.load_workbook("finance/budget.xlsx", data_only=True)
budget = {r[0]: r[1] for r in wb["Sheet1"].iter_rows(min_row=2, values_only=True) if r[0]}
totals = {}
with open("data/export.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] = totals.get(row["region"], 0) + int(row["amount"])
with open("deliverables/summary.md", "w") as out:
    out.write("# Summary\\n")
    for k, v in sorted(totals.items()):
        out.write(f"- {k}: {v} (budget {budget.get(k, '-')})\\n")
"""

STATS_PY = """
import json
n = sum(1 for _ in open("data/export.csv")) - 1
words = len(open("notes/brief.md").read().split())
json.dump({"rows": n, "brief_words": words}, open("out/stats.json", "w"))
"""

# An editor's save: read the file, write a temp file beside it, rename over.
ATOMIC_EDIT_PY = """
import os, sys, tempfile
path = sys.argv[1]
text = open(path).read().replace("flat", "up 2%")
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".edit-")
with os.fdopen(fd, "w") as f:
    f.write(text)
os.replace(tmp, path)
"""

# A report saved the way LibreOffice and many editors save: temp, then rename.
REPORT_PY = """
import os
summary = open("deliverables/summary.md").read()
tmp = "deliverables/.~lock-report.tmp"
with open(tmp, "w") as f:
    f.write("# Report\\n\\n" + summary)
os.rename(tmp, "deliverables/report.md")
"""

# (command, truth edges (input, output); outputs with no input as (None, out))
TASKS: list[tuple[list[str], list[tuple[str | None, str]]]] = [
    (
        ["bash", "-c", "cat data/export.csv | sort -t, -k2 | uniq > out/sorted.csv"],
        [("data/export.csv", "out/sorted.csv")],
    ),
    (
        ["bash", "-c", "cp notes/brief.md out/brief_copy.md"],
        [("notes/brief.md", "out/brief_copy.md")],
    ),
    (
        ["python", "{SUMMARY_PY}"],
        [
            ("finance/budget.xlsx", "deliverables/summary.md"),
            ("data/export.csv", "deliverables/summary.md"),
        ],
    ),
    (
        ["bash", "-c", "grep -h North .parsed/finance/budget.xlsx/*.md | head -5 > out/cells.txt"],
        [("finance/budget.xlsx", "out/cells.txt")],
    ),
    (["python", "{ATOMIC_EDIT_PY}", "reports/q3.txt"], [("reports/q3.txt", "reports/q3.txt")]),
    (["bash", "-c", "sed -i 's/draft/final/' config.json"], [("config.json", "config.json")]),
    (
        [
            "bash",
            "-c",
            "cut -d, -f1 data/export.csv > tmp/ids.txt; sort -n tmp/ids.txt > out/ids.txt",
        ],
        [("data/export.csv", "tmp/ids.txt"), ("tmp/ids.txt", "out/ids.txt")],
    ),
    (
        ["bash", "-c", "awk 'FNR==1' data/export.csv notes/brief.md > out/firsts.txt"],
        [("data/export.csv", "out/firsts.txt"), ("notes/brief.md", "out/firsts.txt")],
    ),
    (
        ["python", "{STATS_PY}"],
        [("data/export.csv", "out/stats.json"), ("notes/brief.md", "out/stats.json")],
    ),
    (["python", "{REPORT_PY}"], [("deliverables/summary.md", "deliverables/report.md")]),
    (
        [
            "bash",
            "-c",
            "head -n 2 reports/q3.txt > out/head.txt && wc -l < data/export.csv >> out/head.txt",
        ],
        [("reports/q3.txt", "out/head.txt"), ("data/export.csv", "out/head.txt")],
    ),
    (
        [
            "bash",
            "-c",
            "cat .parsed/data/export.csv/* 2>/dev/null | grep -c ,N, > out/north.txt",
        ],
        [("data/export.csv", "out/north.txt")],
    ),
    (["bash", "-c", "ls data notes > out/listing.txt"], [(None, "out/listing.txt")]),
]


def f1(truth: set[object], got: set[object]) -> float:
    if not truth and not got:
        return 1.0
    tp = len(truth & got)
    if tp == 0:
        return 0.0
    p, r = tp / len(got), tp / len(truth)
    return 2 * p * r / (p + r)


def run_task(m: Mount, cmd: list[str], scripts: Path) -> None:
    argv = []
    for a in cmd:
        if a == "python":
            argv.append(sys.executable)
        elif a.startswith("{") and a.endswith("}"):
            argv.append(str(scripts / f"{a[1:-1].lower()}.py"))
        else:
            argv.append(a)
    proc = subprocess.run(argv, cwd=m.mnt, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{cmd}: {proc.stderr}"


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    # Scripts live outside the mount: the interpreter's reads of them are no input.
    for name, text in (
        ("summary_py", SUMMARY_PY),
        ("stats_py", STATS_PY),
        ("atomic_edit_py", ATOMIC_EDIT_PY),
        ("report_py", REPORT_PY),
    ):
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


@pytest.fixture
def ws() -> Iterator[Mount]:
    with workspace(populate=populate) as m:
        yield m


def test_lineage_of_scripted_tasks_matches_the_truth(
    ws: Mount, scripts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth_nodes: set[object] = set()
    truth_edges: set[object] = set()
    for cmd, edges in TASKS:
        run_task(ws, cmd, scripts)
        for a, b in edges:
            truth_nodes.add(b)
            if a is not None:
                truth_nodes.add(a)
                truth_edges.add((a, b))
    graph = json.loads(swfs("lineage", ws.mnt, "--json").stdout)
    got_nodes = {n["path"] for n in graph["nodes"]}
    got_edges = {(e["from_path"], e["to_path"]) for e in graph["edges"]}
    node_f1, edge_f1 = f1(truth_nodes, got_nodes), f1(truth_edges, got_edges)
    with capsys.disabled():
        print(
            f"\nlineage over {len(TASKS)} tasks: Node F1 {node_f1:.3f}, Edge F1 {edge_f1:.3f}"
            f" (missing edges {sorted(map(str, truth_edges - got_edges))},"
            f" extra {sorted(map(str, got_edges - truth_edges))})"
        )
    assert node_f1 >= 0.9, truth_nodes ^ got_nodes
    assert edge_f1 >= 0.9, truth_edges ^ got_edges

    # Every input carries the hash it had when read: the in-place edits are
    # their own inputs at their earlier hash.
    q3 = [e for e in graph["edges"] if e["to_path"] == "reports/q3.txt"]
    assert q3
    assert q3[0]["from_hash"] != q3[0]["to_hash"]
    xattr = os.getxattr(ws.mnt / "reports" / "q3.txt", "user.sw.inputs")
    assert json.loads(xattr)[0]["hash"] == q3[0]["from_hash"]
    assert q3[0]["to_hash"] == os.getxattr(ws.mnt / "reports" / "q3.txt", "user.sw.hash").decode()
    # The temp file of the save is not a node: its lineage went to the final name.
    assert not any(".edit-" in n or ".~lock" in n for n in got_nodes)

    # One file and what it came from, transitively.
    sub = json.loads(swfs("lineage", ws.mnt, "out/ids.txt", "--json").stdout)
    assert {(e["from_path"], e["to_path"]) for e in sub["edges"]} == {
        ("data/export.csv", "tmp/ids.txt"),
        ("tmp/ids.txt", "out/ids.txt"),
    }

    # .review/LINEAGE.md: each added or modified file and what it came from.
    md = (ws.mnt / ".review" / "LINEAGE.md").read_text()
    summary_line = next(x for x in md.splitlines() if x.startswith("deliverables/summary.md <- "))
    # Read through the kernel's cache (read before): no range is known.
    assert "data/export.csv" in summary_line
    assert "finance/budget.xlsx" in summary_line
    assert "out/cells.txt <- finance/budget.xlsx (Sheet1)" in md
    assert "data/unrelated.csv" not in md

    # DOT for Graphviz, and PROV-JSON the prov package reads back.
    dot = swfs("lineage", ws.mnt, "--dot").stdout
    assert dot.startswith("digraph lineage {")
    assert "->" in dot
    from prov.model import ProvDocument

    prov_text = swfs("lineage", ws.mnt, "--prov").stdout
    doc = ProvDocument.deserialize(content=prov_text, format="json")
    generated = {
        str(r.formal_attributes[0][1])
        for r in doc.get_records()
        if r.get_type().localpart == "Generation"
    }
    assert any("summary.md" in g for g in generated)
    used = [r for r in doc.get_records() if r.get_type().localpart == "Usage"]
    assert len(used) >= len(truth_edges) - 2


def test_journal_records_reads_listings_and_writes_with_processes(ws: Mount) -> None:
    subprocess.run(
        [
            "bash",
            "-c",
            "ls data >/dev/null; head -n 5 data/export.csv >/dev/null; "
            "cat .parsed/finance/budget.xlsx/sheet-Sheet1.md >/dev/null; echo hi > out/hi.txt",
        ],
        cwd=ws.mnt,
        check=True,
        timeout=60,
    )
    reads = [
        json.loads(x) for x in swfs("log", ws.mnt, "--json", "--kind", "read").stdout.splitlines()
    ]
    unit = [r for r in reads if r["path"] == ".parsed/finance/budget.xlsx/sheet-Sheet1.md"]
    assert unit
    assert unit[-1]["locator"] == "finance/budget.xlsx#sheet=Sheet1"
    assert unit[-1]["process"]["name"] == "cat"
    assert unit[-1]["source"] == "finance/budget.xlsx"
    assert len(unit[-1]["hash"]) == 64
    assert unit[-1]["process"]["parents"][0]["name"] == "bash"
    native = [r for r in reads if r["path"] == "data/export.csv" and r["process"]["name"] == "head"]
    assert native
    assert native[-1]["lines"][0] == 1
    assert native[-1]["bytes"] > 0
    # One event per open handle, however many read requests it made.
    assert len(native) == 1
    lists = [
        json.loads(x) for x in swfs("log", ws.mnt, "--json", "--kind", "list").stdout.splitlines()
    ]
    listing = [e for e in lists if e["path"] == "data" and e["process"]["name"] == "ls"]
    assert listing
    assert set(listing[-1]["names"]) == {"export.csv", "unrelated.csv"}
    writes = [
        json.loads(x) for x in swfs("log", ws.mnt, "--json", "--kind", "write").stdout.splitlines()
    ]
    hi = [w for w in writes if w["path"] == "out/hi.txt"]
    assert hi
    assert hi[-1]["process"]["cmdline"][:2] == ["bash", "-c"]
    assert hi[-1]["hash"]
    assert all(e["kind"] == "read" for e in reads)
    # Without --kind, the state transitions are there too, in time order.
    everything = swfs("log", ws.mnt, "--json").stdout.splitlines()
    assert any('"ev": ' in x for x in everything)
    assert any('"kind": "read"' in x for x in everything)


def test_a_read_records_the_hash_of_the_bytes_it_read(ws: Mount) -> None:
    """The hash an open found recorded is the read's hash; a file changed
    behind the mount is checked at its open, and the read gets the new one."""
    from blake3 import blake3

    path = ws.src / "reports" / "q3.txt"
    hashes = [blake3(path.read_bytes()).hexdigest()]
    subprocess.run(
        ["cat", "reports/q3.txt"], cwd=ws.mnt, check=True, timeout=60, stdout=subprocess.DEVNULL
    )
    path.write_text("Q3 report\nrevised behind the mount\n")
    hashes.append(blake3(path.read_bytes()).hexdigest())
    got = subprocess.run(
        ["cat", "reports/q3.txt"], cwd=ws.mnt, check=True, timeout=60, capture_output=True
    )
    assert b"revised behind the mount" in got.stdout

    def reads() -> list[str]:
        out = swfs("log", ws.mnt, "--json", "--kind", "read").stdout.splitlines()
        events = [json.loads(x) for x in out]
        return [
            e["hash"]
            for e in events
            if e["path"] == "reports/q3.txt" and e["process"]["name"] == "cat"
        ]

    deadline = time.monotonic() + 60
    while len(reads()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert reads() == hashes


def _stored_reads(store: Path) -> set[str]:
    con = sqlite3.connect(f"file:{store / 'access.sqlite'}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT path FROM events WHERE kind='read'")}
    finally:
        con.close()


def test_kill_9_loses_at_most_the_last_second() -> None:
    def make(src: Path) -> None:
        for i in range(50):
            (src / f"f{i:02d}.txt").write_text(f"file {i}\n")

    with workspace(populate=make) as m:
        for i in range(50):
            (m.mnt / f"f{i:02d}.txt").read_bytes()
        done = time.monotonic()
        # The guarantee is about events older than a second: wait that long
        # (by the clock, not asserting on it), then crash the daemon.
        while time.monotonic() < done + 1.0:
            time.sleep(0.05)
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait(30)
        m.kill()
        stored = _stored_reads(m.src / ".swfs")
        assert {f"f{i:02d}.txt" for i in range(50)} <= stored


def test_no_journal_records_nothing() -> None:
    with workspace(["--no-journal"], populate=populate) as m:
        subprocess.run(["bash", "-c", "cat data/export.csv > out/copy.csv"], cwd=m.mnt, check=True)
        assert swfs("log", m.mnt, "--kind", "read").stdout == ""
        assert not (m.src / ".swfs" / "access.sqlite").exists()
        assert "LINEAGE.md" not in os.listdir(m.mnt / ".review")
        copy = m.mnt / "out" / "copy.csv"
        assert run_as((0, 0), lambda: os.getxattr(copy, "user.sw.inputs")) == errno.ENODATA
        # The state log still works.
        assert "write" in swfs("log", m.mnt).stdout


def test_lineage_belongs_to_the_mounting_user(ws: Mount) -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    subprocess.run(["bash", "-c", "cp notes/brief.md out/shared.md"], cwd=ws.mnt, check=True)
    os.chmod(ws.mnt / "out" / "shared.md", 0o644)
    swfs("lineage", ws.mnt)  # flushed and readable by the mounting user
    lineage_md = ws.mnt / ".review" / "LINEAGE.md"
    assert "out/shared.md <- notes/brief.md" in lineage_md.read_text()
    assert os.getxattr(ws.mnt / "out" / "shared.md", "user.sw.inputs")
    # Another user may read the file itself, not what it was derived from.
    assert run_as(ids, lambda: (ws.mnt / "out" / "shared.md").read_bytes()) == 0
    assert run_as(ids, lambda: lineage_md.read_bytes()) == errno.EACCES
    shared = ws.mnt / "out" / "shared.md"
    assert run_as(ids, lambda: os.getxattr(shared, "user.sw.inputs")) == errno.EACCES
    # `swfs lineage` reads the access journal, which only its owner may open.
    db = ws.src / ".swfs" / "access.sqlite"
    assert db.stat().st_mode & 0o777 == 0o600
    assert run_as(ids, lambda: db.open("rb").close()) == errno.EACCES
