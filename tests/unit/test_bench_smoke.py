"""The benchmark's generators make what they claim and its report formats; no timing."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bench import gen
from bench.common import Sizes
from bench.mounter import fuse_daemon_pid
from bench.report import ABSOLUTE, Metric, Target, WorkloadResult, format_table, write_json


def test_file_tree_counts(tmp_path: Path) -> None:
    root = gen.file_tree(tmp_path, 250, 25)
    files = list(gen.iter_files(root / "tree"))
    assert len(files) == 250
    leaf_dirs = {p.parent for p in files}
    assert len(leaf_dirs) == 25
    with_needle = [p for p in files if gen.NEEDLE in p.read_text()]
    assert len(with_needle) == gen.count_needles(250)


def test_generation_is_cached(tmp_path: Path) -> None:
    first = gen.file_tree(tmp_path, 20, 4)
    marker = first.with_name(first.name + ".done")
    stamp = marker.stat().st_mtime_ns
    assert gen.file_tree(tmp_path, 20, 4) == first
    assert marker.stat().st_mtime_ns == stamp
    # Other parameters: another directory.
    assert gen.file_tree(tmp_path, 30, 4) != first


def test_big_file_size(tmp_path: Path) -> None:
    root = gen.big_file(tmp_path, 3 * gen.MiB + 5)
    data = (root / "big" / "data.bin").read_bytes()
    assert len(data) == 3 * gen.MiB + 5
    assert data[: gen.MiB] != data[gen.MiB : 2 * gen.MiB]


def test_workspace_shape_and_real_documents(tmp_path: Path) -> None:
    import docx
    import openpyxl
    import pptx
    import pymupdf

    root = gen.workspace(tmp_path, 200, 30)
    counts = gen.census(root)
    assert sum(counts.values()) == 200
    assert gen.count_dirs(root) == 30
    assert counts[".xlsx"] == 76  # 38%
    docs = counts[".pdf"] + counts[".docx"] + counts[".pptx"]
    assert docs == 70  # 35%
    code = sum(counts.get(e, 0) for e in (".py", ".js", ".yaml", ".toml", ".json", ".sh", ".sql"))
    assert code == 26  # 13%

    files = list(gen.iter_files(root))
    xlsx = next(p for p in files if p.suffix == ".xlsx")
    wb = openpyxl.load_workbook(xlsx)
    ws = wb["Data"]
    assert str(ws["G2"].value).startswith("=SUM(")
    assert str(ws["A1"].value).startswith("xlsx")
    doc = docx.Document(str(next(p for p in files if p.suffix == ".docx")))
    assert doc.paragraphs[0].text.startswith("docx")
    prs = pptx.Presentation(str(next(p for p in files if p.suffix == ".pptx")))
    assert len(prs.slides) >= 3
    with pymupdf.open(next(p for p in files if p.suffix == ".pdf")) as pdf:
        assert pdf.page_count >= 1
        assert "page 1" in pdf[0].get_text()


def test_freshness_set(tmp_path: Path) -> None:
    import pymupdf

    root = gen.freshness_set(tmp_path, pdf_pages=6)
    with pymupdf.open(root / "edit" / "report.pdf") as pdf:
        assert pdf.page_count == 6
    assert (root / "edit" / "sheet.xlsx").stat().st_size > 0


def test_quick_sizes_are_smaller() -> None:
    full, quick = Sizes.full(), Sizes.quick()
    assert quick.big_file < full.big_file
    assert full.tree_files == 20_000
    assert full.ws_files == 11_000


def test_metric_summary_ratios() -> None:
    m = Metric("read", "s", target=Target("<=", 2.0, "<=2x"))
    m.native += [1.0, 2.0, 1.0]
    m.mount += [2.0, 3.0, 4.0]
    s = m.summary()
    assert s["ratios"] == [2.0, 1.5, 4.0]
    assert s["ratio_median"] == 2.0
    assert s["ratio_min"] == 1.5
    assert s["ratio_max"] == 4.0
    assert s["native_median"] == 1.0
    assert s["mount_median"] == 3.0
    assert s["target_met"] is True


def test_absolute_metric_and_target() -> None:
    m = Metric("remount_s", "s", kind=ABSOLUTE, target=Target("<", 2.0, "<2 s"))
    m.values += [2.5, 3.0, 1.0]
    s = m.summary()
    assert s["median"] == 2.5
    assert s["target_met"] is False
    assert Target(">=", 0.8, "").met(math.nan) is None


def test_table_and_json(tmp_path: Path) -> None:
    ok = WorkloadResult("tree")
    metric = ok.metric("find", "s", target=Target("<=", 21.0, "<=21x (ref)"))
    metric.native.append(0.5)
    metric.mount.append(5.0)
    nan = ok.metric("lat", "ms", kind=ABSOLUTE)
    nan.values.append(math.nan)
    skipped = WorkloadResult("freshness", status="skipped", note="needs --mounter swfs")
    failed = WorkloadResult("workspace", status="error", error="swfs lacks: index")
    results = [ok, skipped, failed]

    table = format_table(results)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["workload", "metric", "unit"]
    find_row = next(line for line in lines if " find " in line)
    assert "10.0x" in find_row
    assert "yes" in find_row
    assert "needs --mounter swfs" in table
    assert "swfs lacks: index" in table

    out = tmp_path / "r.json"
    write_json(out, {"mounter": "ref"}, results)
    doc = json.loads(out.read_text())
    assert doc["workloads"]["tree"]["metrics"][0]["ratio_median"] == 10.0
    assert doc["workloads"]["tree"]["metrics"][1]["median"] is None  # NaN -> null
    assert doc["workloads"]["workspace"]["status"] == "error"


def test_daemon_pid_of_unmounted_path(tmp_path: Path) -> None:
    assert fuse_daemon_pid(tmp_path / "not-mounted") is None
