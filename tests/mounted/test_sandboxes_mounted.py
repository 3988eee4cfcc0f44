"""Task sandboxes from one baseline (``swfs mount --staged --from BASE
--cache DIR TASKDIR MNT``): each shows BASE read-write with BASE's parsed
views and search index ready at once, parsing nothing; a task's edits are
seen neither by the other sandbox nor in BASE; ``swfs reset`` restores."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mountd.launch import mounted_swfs
from tests.mountutil import (
    SWFS,
    Mount,
    launch,
    lazy_unmount,
    needs_fuse,
    swfs,
    wait_until,
    workdir,
)

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]

FILES = {
    "report.txt": "Quarterly figures: the northern region grew 14 percent.\n",
    "notes/brief.md": "# Brief\n\nSummarise revenue by region.\n",
    "data.csv": "region,amount\nNorth,1200\nSouth,900\n",
}


def status(mnt: Path) -> dict[str, Any]:
    return dict(json.loads(swfs("status", mnt, "--json").stdout))


def sandbox(root: Path, base: Path, name: str) -> Mount:
    mnt = root / f"mnt-{name}"
    mnt.mkdir()
    task = root / f"task-{name}"
    cmd = [SWFS, "mount", "-f", "--staged", "--from", base, "--cache", root / "cache"]
    cmd += ["--reserve", "0", task, mnt]
    # The launcher keeps the daemon's log beside its first path: TASKDIR's.
    return launch(cmd, task / "x", mnt, timeout=120, env=None)


def grep(mnt: Path, word: str) -> str:
    proc = subprocess.run(
        ["grep", "-rn", word, ".parsed"], cwd=mnt, capture_output=True, text=True, timeout=60
    )
    return proc.stdout


def test_two_sandboxes_from_one_base() -> None:
    root = workdir()
    base = root / "base"
    for rel, text in FILES.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    swfs("index", base, timeout=300)
    assert (base / ".swfs" / "search.sqlite").exists()  # index builds it: sandboxes copy it
    before = {rel: (base / rel).read_bytes() for rel in FILES}
    mounts: list[Mount] = []
    try:
        (root / "task-1").mkdir()  # the launcher's log goes there; the rest is made
        (root / "task-2").mkdir()
        one = sandbox(root, base, "1")
        mounts.append(one)
        two = sandbox(root, base, "2")
        mounts.append(two)
        for m in (one, two):
            # Ready at once: BASE's views and index, nothing parsed here.
            info = status(m.mnt)
            assert info["current"] == len(FILES), info
            assert info["parses"]["runs"] == 0, info["parses"]
            assert ".parsed/report.txt/content.txt:2:" in grep(m.mnt, "northern")
            # (The daemon checks the copied index against its records first.)
            wait_until(
                "the search index",
                lambda m=m: "report.txt" in (m.mnt / ".search" / "northern region").read_text(),
            )

        (one.mnt / "report.txt").write_text("Rewritten by task one: southern focus.\n")
        (one.mnt / "notes" / "extra.md").write_text("added by task one\n")
        (one.mnt / "data.csv").unlink()
        swfs("sync", one.mnt)
        assert "southern focus" in grep(one.mnt, "southern")
        # Neither the other sandbox nor BASE sees any of it.
        assert (two.mnt / "report.txt").read_bytes() == before["report.txt"]
        assert not (two.mnt / "notes" / "extra.md").exists()
        assert (two.mnt / "data.csv").exists()
        assert grep(two.mnt, "southern") == ""
        assert {rel: (base / rel).read_bytes() for rel in FILES} == before
        assert not (base / "notes" / "extra.md").exists()
        assert swfs("commit", one.mnt, check=False).returncode != 0  # never into BASE

        r = json.loads(swfs("reset", one.mnt, "--json").stdout)
        assert (r["restored"], r["removed"]) == (2, 1), r
        swfs("sync", one.mnt)
        for rel, data in before.items():
            assert (one.mnt / rel).read_bytes() == data
        assert not (one.mnt / "notes" / "extra.md").exists()
        assert grep(one.mnt, "southern") == ""
        assert ".parsed/report.txt/content.txt:2:" in grep(one.mnt, "northern")
        assert status(one.mnt)["staged"]["paths"] == 0
        assert {rel: (base / rel).read_bytes() for rel in FILES} == before

        # A task's edits outlive its daemon; TASKDIR names its sandbox.
        (two.mnt / "report.txt").write_text("task two's own words\n")
        two.stop()
        mounts.remove(two)
        info = json.loads(swfs("status", root / "task-2", "--json").stdout)
        assert info["source"] == str(base)
        assert info["staged"]["paths"] == 1
        refused = swfs("mount", root / "task-2", root / "mnt-2", check=False)
        assert "--from" in refused.stderr
        again = launch(
            [SWFS, "mount", "-f", "--staged", "--from", base, root / "task-2", root / "mnt-2"],
            root / "task-2" / "x",
            root / "mnt-2",
            timeout=120,
            env=None,
        )
        mounts.append(again)
        assert (again.mnt / "report.txt").read_text() == "task two's own words\n"
        assert (base / "report.txt").read_bytes() == before["report.txt"]
    finally:
        for m in mounts:
            m.stop()
        for name in ("1", "2"):
            lazy_unmount(root / f"mnt-{name}")
        if not any(mounted_swfs(root / f"mnt-{n}") for n in ("1", "2")):
            shutil.rmtree(root, ignore_errors=True)
