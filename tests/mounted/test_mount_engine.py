"""The daemon over the real engine: what an agent does, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MountFactory

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120)]


def grep(m_root: Path, word: str) -> str:
    return subprocess.run(
        ["grep", "-rn", word, ".parsed"], cwd=m_root, capture_output=True, text=True, check=False
    ).stdout


def wait_for(fn: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def make_book(src: Path) -> None:
    code = (
        "import openpyxl,sys;wb=openpyxl.Workbook();ws=wb.active;ws.title='Budget';"
        "ws['A12']='travel';ws['B12']=1200;wb.save(sys.argv[1])"
    )
    subprocess.run([sys.executable, "-c", code, str(src / "budget.xlsx")], check=True)


def test_agent_session_on_the_real_engine(mount_tree: MountFactory) -> None:
    m = mount_tree({"notes.md": "# Notes\nbudget travel 1200\n"}, setup=make_book)
    out = grep(m.mnt, "1200")
    assert ".parsed/notes.md/" in out
    assert ".parsed/budget.xlsx/sheet-Budget.md:" in out
    assert os.getxattr(m.mnt, "user.sw.source").decode() == str(m.src)
    assert os.getxattr(m.mnt / "notes.md", "user.sw.freshness") == b"current"

    # Python saving the workbook in place through the mount.
    code = (
        "import openpyxl,sys;p=sys.argv[1];wb=openpyxl.load_workbook(p);"
        "wb['Budget']['B12']=1350;wb.save(p)"
    )
    subprocess.run([sys.executable, "-c", code, str(m.mnt / "budget.xlsx")], check=True)
    assert (m.mnt / "budget.xlsx").read_bytes() == (m.src / "budget.xlsx").read_bytes()
    wait_for(lambda: "1350" in grep(m.mnt, "1350"))
    unit = next((m.mnt / ".parsed/budget.xlsx").iterdir())
    assert b"1350" in unit.read_bytes()
    assert len(os.listdir(m.mnt / ".versions/budget.xlsx")) == 2
    diff = (m.mnt / ".review/budget.xlsx.diff").read_text()
    assert "B12" in diff
    assert "1200" in diff
    assert "1350" in diff

    # An editor's save: temp file, then rename over the original.
    (m.mnt / ".notes.md.swp").write_text("# Notes\nbudget travel 1500\n")
    os.replace(m.mnt / ".notes.md.swp", m.mnt / "notes.md")
    versions = sorted(os.listdir(m.mnt / ".versions/notes.md"))
    assert len(versions) == 2, versions
    assert (m.mnt / ".versions/notes.md" / versions[0]).read_text().endswith("1200\n")
    assert (m.mnt / ".versions/notes.md" / versions[1]).read_text().endswith("1500\n")
    wait_for(lambda: "1500" in grep(m.mnt, "1500"))
    summary = (m.mnt / ".review/SUMMARY.md").read_text()
    assert "notes.md" in summary
    assert "budget.xlsx" in summary
    assert ".swp" not in summary
