"""The history commands on a workspace that is not mounted: the command line
opens the engine itself (no daemon), scans first, and says why when the
bytes it needs were never kept."""

from __future__ import annotations

import json
import os
from pathlib import Path

from swfs.store.fsutil import hash_bytes
from tests.mounted.test_history_mounted import tree
from tests.mountutil import swfs


def make(root: Path) -> Path:
    src = root / "ws"
    (src / "docs").mkdir(parents=True)
    (src / "docs" / "a.txt").write_text("alpha\n")
    (src / "b.csv").write_text("x,y\n1,2\n")
    (src / "c.md").write_text("# c\n")
    swfs("index", src)
    return src


def test_reset_to_a_snapshot_without_a_mount(tmp_path: Path) -> None:
    src = make(tmp_path)
    swfs("snapshot", src, "s0")  # keeps every byte: changes behind it can be undone
    before = tree(src)
    (src / "docs" / "a.txt").write_text("changed behind\n")
    (src / "c.md").unlink()
    os.rename(src / "b.csv", src / "moved.csv")
    (src / "new" / "deep").mkdir(parents=True)
    (src / "new" / "deep" / "n.txt").write_text("new\n")
    r = json.loads(swfs("reset", src, "--to", "s0", "--json").stdout)
    assert (r["restored"], r["removed"], r["renamed"], r["dirs_removed"]) == (2, 1, 1, 2)
    assert tree(src) == before
    assert "0 changed path(s)" in swfs("diff", src, "--summary").stdout
    assert "nothing to do" in swfs("reset", src).stdout


def test_reset_refuses_when_bytes_were_never_kept(tmp_path: Path) -> None:
    src = make(tmp_path)
    (src / "docs" / "a.txt").write_text("changed behind, no mount\n")
    (src / "extra.txt").write_text("added\n")
    before = tree(src)
    r = swfs("reset", src, check=False)
    assert r.returncode == 1
    assert r.stderr.startswith("swfs: error: cannot reset to baseline: the bytes of 1 file(s)")
    assert "docs/a.txt" in r.stderr
    assert "nothing was changed" in r.stderr
    assert tree(src) == before


def test_submit_submissions_snapshots_restore_and_gc(tmp_path: Path) -> None:
    src = make(tmp_path)
    (src / "out").mkdir()
    (src / "out" / "report.md").write_text("# report\n")
    out = swfs("submit", src, "final").stdout
    assert out.splitlines()[0] == "submission final: 1 file(s), snapshot final"
    subs = [json.loads(x) for x in swfs("submissions", src, "--json").stdout.splitlines()]
    assert [(s["name"], [f["path"] for f in s["files"]]) for s in subs] == [
        ("final", ["out/report.md"])
    ]
    assert subs[0]["files"][0]["hash"] == hash_bytes(b"# report\n")
    assert "out/report.md" in swfs("submissions", src).stdout
    snaps = swfs("snapshots", src).stdout.splitlines()
    assert snaps[0].split() == ["name", "kind", "taken", "files", "size"]
    assert snaps[1].split()[:2] == ["final", "submission"]

    (src / "out" / "report.md").write_text("# report, rewritten\n")
    swfs("restore", src, "out/report.md@final")
    assert (src / "out" / "report.md").read_text() == "# report\n"
    bad = swfs("restore", src, "nope.txt@final", check=False)
    assert bad.returncode == 1
    assert "nope.txt: not in 'final'" in bad.stderr

    gc = swfs("gc", src, "--keep", "0").stdout
    assert gc.startswith("gc (keeping 0 days of history): freed ")
    assert "ok" in swfs("check", src).stdout
    bad = swfs("gc", src, "--keep", "-1", check=False)
    assert bad.returncode == 2
    status = json.loads(swfs("status", src, "--json").stdout)
    assert status["store_bytes"] > 0
