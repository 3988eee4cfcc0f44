"""Submissions, reset, snapshots and gc through a real mount: the agent
changes the tree through the mount with real tools (a shell redirect,
openpyxl saving in place, a write-temp-then-rename save, mkdir, rm, mv),
then the command line submits, resets and collects through the daemon."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from swfs.store.fsutil import hash_bytes
from tests.mountutil import Mount, needs_fuse, swfs, workspace
from tests.sheetgen import excel_like_xlsx

pytestmark = [pytest.mark.mount, needs_fuse]

HIDDEN = {".swfs", ".parsed", ".review", ".versions", ".render", ".search", ".tab"}


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) below ``root``, generated trees
    and the store left out."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d not in HIDDEN]
        rel_dir = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel_dir, d))] = None
        for f in filenames:
            out[os.path.normpath(os.path.join(rel_dir, f))] = Path(dirpath, f).read_bytes()
    return out


def populate(src: Path) -> None:
    (src / "docs" / "deep").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "docs" / "a.txt").write_text("alpha\nbeta\n")
    (src / "docs" / "deep" / "b.txt").write_text("bee\n")
    (src / "notes.md").write_text("# Notes\nfirst\n")
    (src / "gone.txt").write_text("to be deleted\n")
    (src / "data.csv").write_text("region,revenue\nNorth,1200\n")
    excel_like_xlsx(src / "book.xlsx")


def agent_changes(mnt: Path) -> None:
    """What an agent does, through the mount, with ordinary tools."""
    import openpyxl

    subprocess.run(["sh", "-c", f"echo 'gamma' >> '{mnt}/docs/a.txt'"], check=True)
    wb = openpyxl.load_workbook(mnt / "book.xlsx")
    wb["Data"]["B2"] = 1350
    wb.save(mnt / "book.xlsx")
    tmp = mnt / ".notes.md.swp"
    tmp.write_text("# Notes\nrewritten by an editor\n")
    os.replace(tmp, mnt / "notes.md")
    subprocess.run(["mkdir", "-p", f"{mnt}/out/charts"], check=True)
    (mnt / "out" / "charts" / "summary.txt").write_text("total 2650\n")
    (mnt / "out" / "report.md").write_text("# Report\n")
    subprocess.run(["rm", f"{mnt}/gone.txt"], check=True)
    subprocess.run(["mv", f"{mnt}/docs/deep/b.txt", f"{mnt}/moved.txt"], check=True)
    os.rename(mnt / "data.csv", mnt / "data-renamed.csv")
    with open(mnt / "data-renamed.csv", "a") as f:
        f.write("South,800\n")
    subprocess.run(["rmdir", f"{mnt}/empty"], check=True)


def summary(m: Mount) -> str:
    return (m.mnt / ".review" / "SUMMARY.md").read_text()


def test_submit_then_reset_to_the_baseline_byte_for_byte() -> None:
    with workspace(populate=populate) as m:
        before = tree(m.mnt)
        assert before == tree(m.src)
        os.listdir(m.mnt / "docs" / "deep")  # the kernel now keeps these listings
        agent_changes(m.mnt)
        changed = tree(m.mnt)
        swfs("sync", m.mnt)
        assert "0 changed path(s)" not in summary(m)

        out = swfs("submit", m.mnt, "task-1", "--json").stdout
        sub = json.loads(out)
        files = {f["path"]: f for f in sub["files"]}
        assert {p: f["status"] for p, f in files.items()} == {
            "book.xlsx": "modified",
            "data-renamed.csv": "added",  # renamed and modified: bytes differ
            "docs/a.txt": "modified",
            "moved.txt": "renamed",
            "notes.md": "modified",
            "out/charts/summary.txt": "added",
            "out/report.md": "added",
        }
        for path, f in files.items():
            assert f["hash"] == hash_bytes(changed[path] or b""), path
        listed = swfs("submissions", m.mnt, "--json").stdout.splitlines()
        assert [json.loads(line)["name"] for line in listed] == ["task-1"]

        text = swfs("reset", m.mnt).stdout
        assert "reset to baseline" in text
        assert tree(m.mnt) == before  # through the mount, at once
        assert tree(m.src) == before
        assert os.listdir(m.mnt / "docs" / "deep") == ["b.txt"]
        assert not (m.mnt / "out").exists()
        assert "0 changed path(s)" in summary(m)
        assert "+++" not in (m.mnt / ".review" / "ALL.diff").read_text()

        # The submitted state is a snapshot: reset brings it back too.
        swfs("reset", m.mnt, "--to", "task-1")
        assert tree(m.mnt) == changed
        snap = m.mnt / ".versions" / "@snapshots" / "task-1"
        assert (snap / "out" / "report.md").read_bytes() == changed["out/report.md"]
        swfs("reset", m.mnt)
        assert tree(m.mnt) == before
        again = swfs("reset", m.mnt).stdout
        assert "nothing to do" in again
        check = swfs("check", m.mnt, check=False)
        assert check.returncode == 0, check.stdout
        events = [
            json.loads(line)["ev"]
            for line in swfs("log", m.mnt, "--json", "--kind", "state").stdout.splitlines()
        ]
        assert "submit" in events
        assert events.count("reset") == 4


def test_gc_frees_space_and_keeps_what_a_snapshot_needs() -> None:
    # No temp-file rule here: every version of big.bin is kept until gc.
    with workspace(["--temp-lifetime", "0", "--version-interval", "0"], populate=populate) as m:
        kept = os.urandom(2_000_000)
        (m.mnt / "big.bin").write_bytes(kept)
        swfs("snapshot", m.mnt, "with-big")
        for i in range(3):  # versions nothing but the history needs
            (m.mnt / "big.bin").write_bytes(os.urandom(2_000_000) + bytes([i]))
        (m.mnt / "big.bin").unlink()
        swfs("sync", m.mnt)
        status = json.loads(swfs("status", m.mnt, "--json").stdout)
        dry = swfs("gc", m.mnt, "--keep", "0", "--dry-run").stdout
        assert "would free" in dry
        out = json.loads(swfs("gc", m.mnt, "--keep", "0", "--json").stdout)
        assert out["blob_bytes"] >= 6_000_000
        assert out["blobs_removed"] >= 3
        after = json.loads(swfs("status", m.mnt, "--json").stdout)
        assert after["blob_bytes"] <= status["blob_bytes"] - 6_000_000
        assert after["store_bytes"] < status["store_bytes"]
        # Nothing a snapshot needs went: its bytes read back, reset brings them.
        snap = m.mnt / ".versions" / "@snapshots" / "with-big" / "big.bin"
        assert snap.read_bytes() == kept
        swfs("reset", m.mnt, "--to", "with-big")
        assert (m.mnt / "big.bin").read_bytes() == kept
        assert "ok" in swfs("check", m.mnt).stdout
        text = swfs("gc", m.mnt).stdout
        assert text.startswith("gc (keeping 7 days of history): freed")


def test_snapshots_restore_and_rebaseline_commands() -> None:
    with workspace(populate=populate) as m:
        a = m.mnt / "docs" / "a.txt"
        a.write_text("second\n")
        swfs("snapshot", m.mnt, "s1")
        a.write_text("third\n")
        snaps = [json.loads(x) for x in swfs("snapshots", m.mnt, "--json").stdout.splitlines()]
        assert [(s["name"], s["kind"], s["files"]) for s in snaps] == [("s1", "snapshot", 6)]
        assert "s1" in swfs("snapshots", m.mnt).stdout

        swfs("restore", m.mnt, "docs/a.txt@s1")
        assert a.read_text() == "second\n"
        swfs("restore", m.mnt, "docs/a.txt@baseline")
        assert a.read_text() == "alpha\nbeta\n"
        swfs("restore", m.mnt, "docs/a.txt@3")  # "third"
        assert a.read_text() == "third\n"

        bad = swfs("restore", m.mnt, "docs/a.txt@nope", check=False)
        assert bad.returncode == 1
        assert bad.stderr.strip().splitlines() == [
            "swfs: error: 'nope': no such snapshot or submission (see `swfs snapshots`)"
        ]
        bad = swfs("reset", m.mnt, "--to", "nope", check=False)
        assert bad.returncode == 1
        assert "no such snapshot" in bad.stderr
        assert "Traceback" not in bad.stderr

        # Re-baselining keeps the previous baseline as a snapshot, and
        # versions marks the version the present baseline holds.
        swfs("baseline", m.mnt)
        names = [
            json.loads(x)["name"] for x in swfs("snapshots", m.mnt, "--json").stdout.splitlines()
        ]
        former = [n for n in names if n.startswith("baseline-")]
        assert len(former) == 1
        lines = swfs("versions", m.mnt, "docs/a.txt").stdout.splitlines()
        marked = [line for line in lines if "<- the baseline" in line]
        assert len(marked) == 1
        assert marked[0].split()[0] == lines[-1].split()[0]  # the newest version
        js = [
            json.loads(x)
            for x in swfs("versions", m.mnt, "docs/a.txt", "--json").stdout.splitlines()
        ]
        assert [v["number"] for v in js if v["baseline"]] == [int(marked[0].split()[0])]
        swfs("reset", m.mnt, "--to", former[0])
        assert a.read_text() == "alpha\nbeta\n"

        assert "deleted" in swfs("snapshot", m.mnt, "--delete", "s1").stdout
        assert not (m.mnt / ".versions" / "@snapshots" / "s1").exists()
        gone = swfs("snapshot", m.mnt, "--delete", "s1", check=False)
        assert gone.returncode == 1
        assert "no such snapshot" in gone.stderr

        swfs("submit", m.mnt, "sub", "docs/a.txt")
        refused = swfs("snapshot", m.mnt, "--delete", "sub", check=False)
        assert refused.returncode == 1
        assert "submission" in refused.stderr
        assert "store size:" in swfs("status", m.mnt).stdout


def test_editor_temp_files_keep_no_history() -> None:
    with workspace(populate=populate) as m:
        tmp = m.mnt / "docs" / ".a.txt.tmp"
        tmp.write_text("draft\n")
        with open(tmp, "a") as f:  # a second version of the temp file
            f.write("more\n")
        os.replace(tmp, m.mnt / "docs" / "a.txt")
        lock = m.mnt / ".~lock.book.xlsx#"
        lock.write_text("lock\n")
        lock.unlink()
        for name in ("docs/.a.txt.tmp", ".~lock.book.xlsx#"):
            r = swfs("versions", m.mnt, name, check=False)
            assert r.returncode == 1, name
            assert "no recorded versions" in r.stderr
            assert not (m.mnt / ".versions" / name).exists()
        lines = swfs("versions", m.mnt, "docs/a.txt").stdout
        assert hash_bytes(b"draft\nmore\n")[:16] in lines
