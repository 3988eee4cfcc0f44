"""The command line as an engineer uses it day to day: what `diff`,
`versions`, `restore`, `status` and `prompt` say in the cases a trial hit,
and one hash notation from the header line to the CLI."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import blake3
import pytest

from tests import docgen, mountutil

SWFS = str(Path(sys.executable).with_name("swfs"))


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SWFS, *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )


def ok(*args: str | Path) -> str:
    out = run(*args)
    assert out.returncode == 0, (args, out.returncode, out.stderr)
    return out.stdout


def b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def body(diff: str) -> list[str]:
    """The lines of one file's diff after its git-style header."""
    lines = diff.splitlines()
    header = ("diff --git ", "new file mode", "deleted file mode", "rename ", "index ")
    return [line for line in lines if not line.startswith(header)]


PLAN = "".join(f"step {i}: do the thing number {i}\n" for i in range(1, 13))


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "docs").mkdir()
    (root / "docs" / "plan.md").write_text(PLAN)
    (root / "docs" / "other.md").write_text("an unrelated note\nwith two lines\n")
    (root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (root / "report.pdf").write_bytes(docgen.pdf_bytes(2))
    ok("index", root)
    return root


# -- the CLI itself


def test_version() -> None:
    out = run("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"swfs {importlib.metadata.version('swfs')}\n"


def test_commands_on_a_plain_folder_create_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    commands = [
        ("status",),
        ("status", "--json"),
        ("sync",),
        ("show", "a.txt"),
        ("diff",),
        ("diff", "a.txt", "--json"),
        ("versions", "a.txt"),
        ("restore", "a.txt@1"),
        ("baseline",),
        ("snapshot", "s1"),
        ("log",),
        ("check",),
    ]
    for cmd, *rest in commands:
        out = run(cmd, folder, *rest)
        assert out.returncode != 0, (cmd, out.stdout)
        assert "not an swfs workspace" in out.stderr, (cmd, out.stderr)
        assert out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.stderr
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert not (folder / ".swfs").exists()
    # `index` is what makes a workspace.
    ok("index", folder)
    assert (folder / ".swfs").is_dir()
    assert "1 files" in ok("status", folder)


def test_versions_prints_a_header_row(ws: Path) -> None:
    (ws / "a.txt").write_text("ALPHA\n")
    lines = ok("versions", ws, "a.txt").splitlines()
    assert lines[0].split() == ["N", "HASH", "RECORDED", "(UTC)", "CAUSE", "BYTES"]
    old, new = b3(b"alpha\nbeta\ngamma\n"), b3(b"ALPHA\n")
    assert lines[1].split()[:2] == ["1", f"b3:{old[:16]}"]
    assert lines[2].split()[:2] == ["2", f"b3:{new[:16]}"]
    assert len(lines) == 3
    # --json stays one object a line, with full hashes, and no header.
    rows = [json.loads(line) for line in ok("versions", ws, "a.txt", "--json").splitlines()]
    assert [r["hash"] for r in rows] == [old, new]


# -- diff: paths, exit codes, JSON


def test_diff_of_a_path_that_does_not_exist_is_an_error(ws: Path) -> None:
    out = run("diff", ws, "nonexistent")
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == "swfs: error: nonexistent: no such file in the workspace or its baseline\n"
    # Under --exit-code, 1 means "changes": trouble is 2, as for diff(1).
    assert run("diff", ws, "nonexistent", "--exit-code").returncode == 2
    assert run("diff", ws, "docs/nonexistent", "--exit-code", "--json").returncode == 2
    # Paths that exist (a file, a directory) or existed (a deleted file) are fine.
    assert ok("diff", ws, "a.txt") == "a.txt: unchanged since the baseline\n"
    assert ok("diff", ws, "docs") == "docs: unchanged since the baseline\n"
    (ws / "docs" / "other.md").unlink()
    out = ok("diff", ws, "docs/other.md")
    assert out.startswith("diff --git a/docs/other.md b/docs/other.md\ndeleted file mode")
    assert "-an unrelated note" in ok("diff", ws, "docs")


def test_diff_exit_code_and_json(ws: Path) -> None:
    quiet = run("diff", ws, "--exit-code")
    assert (quiet.returncode, quiet.stdout) == (0, "")
    doc = json.loads(ok("diff", ws, "--json"))
    assert doc["changes"] == []
    assert isinstance(doc["baseline_at"], float)

    (ws / "a.txt").write_text("alpha\nBETA\ngamma\n")
    changed = run("diff", ws, "--exit-code")
    assert changed.returncode == 1, changed.stderr
    assert "+BETA" in changed.stdout
    assert run("diff", ws, "a.txt", "--exit-code", "--summary").returncode == 1
    assert run("diff", ws, "img.png", "--exit-code").returncode == 0

    out = run("diff", ws, "--json", "--exit-code")
    assert out.returncode == 1
    (change,) = json.loads(out.stdout)["changes"]
    assert change["path"] == "a.txt"
    assert change["status"] == "modified"
    assert change["old_path"] is None
    assert change["baseline_hash"] == b3(b"alpha\nbeta\ngamma\n")
    assert change["current_hash"] == b3(b"alpha\nBETA\ngamma\n")
    assert "-beta\n+BETA\n" in change["diff"]
    (summary,) = json.loads(ok("diff", ws, "--json", "--summary"))["changes"]
    assert "diff" not in summary
    assert summary["current_hash"] == change["current_hash"]


# -- what the review says


def test_a_new_text_file_diff_starts_from_dev_null(ws: Path) -> None:
    (ws / "new.txt").write_text("first\nsecond\n")
    h = b3(b"first\nsecond\n")
    assert ok("diff", ws, "new.txt").splitlines() == [
        "diff --git a/new.txt b/new.txt",
        "new file mode 100644",
        f"index 0000000000000000..{h[:16]}",
        "--- /dev/null",
        "+++ b/new.txt",
        "@@ -0,0 +1,2 @@",
        "+first",
        "+second",
    ]
    # And a deleted one ends at /dev/null.
    (ws / "a.txt").unlink()
    lines = ok("diff", ws, "a.txt").splitlines()
    assert lines[3:5] == ["--- a/a.txt", "+++ /dev/null"]


def test_a_moved_and_modified_file_is_a_rename_with_its_diff(ws: Path) -> None:
    (ws / "archive").mkdir()
    (ws / "archive" / "plan-2026.md").write_text(PLAN.replace("step 5:", "step five:"))
    (ws / "docs" / "plan.md").unlink()
    # A deleted file and an added file that share nothing stay two changes.
    (ws / "docs" / "other.md").unlink()
    (ws / "docs" / "fresh.md").write_text("a brand new note\n")
    diff = ok("diff", ws)
    assert "rename from docs/plan.md\nrename to archive/plan-2026.md\n" in diff
    assert "--- a/docs/plan.md\n+++ b/archive/plan-2026.md\n" in diff
    assert "-step 5: do the thing number 5\n+step five: do the thing number 5\n" in diff
    assert "+step 1:" not in diff  # not a whole-file add
    assert "diff --git a/docs/other.md b/docs/other.md\ndeleted file mode" in diff
    assert "diff --git a/docs/fresh.md b/docs/fresh.md\nnew file mode" in diff
    summary = ok("diff", ws, "--summary")
    assert "| renamed | docs/plan.md -> archive/plan-2026.md |" in summary
    assert "| deleted | docs/other.md |" in summary
    assert "| added | docs/fresh.md |" in summary
    assert "| deleted | docs/plan.md |" not in summary
    # Asked for by either name, it is the one rename.
    assert ok("diff", ws, "docs/plan.md") == ok("diff", ws, "archive/plan-2026.md")


def test_a_moved_and_modified_workbook_is_a_rename_with_its_cell_changes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    rows: list[list[object]] = [["region", "revenue"]] + [[f"R{i}", i * 100] for i in range(1, 11)]
    docgen.simple_xlsx(root, rows)
    ok("index", root)
    other = tmp_path / "other"
    other.mkdir()
    rows[3][1] = 333
    (root / "reports").mkdir()
    shutil.move(docgen.simple_xlsx(other, rows), root / "reports" / "q3.xlsx")
    (root / "simple.xlsx").unlink()
    lines = ok("diff", root).splitlines()
    assert lines[:3] == [
        "diff --git a/simple.xlsx b/reports/q3.xlsx",
        "rename from simple.xlsx",
        "rename to reports/q3.xlsx",
    ]
    assert body(ok("diff", root)) == ["Sheet!B4: 300 -> 333"]


def test_an_unchanged_moved_file_shows_no_content_change(ws: Path) -> None:
    (ws / "moved").mkdir()
    for name in ("report.pdf", "img.png", "a.txt"):
        os.rename(ws / name, ws / "moved" / name)
    diff = ok("diff", ws)
    for name in ("report.pdf", "img.png", "a.txt"):
        assert f"rename from {name}\nrename to moved/{name}\n" in diff
    assert "differs" not in diff
    assert "Binary files" not in diff
    assert "@@" not in diff
    assert "---" not in diff
    assert body(diff) == []


def test_line_ending_only_rewrites_are_one_line(ws: Path) -> None:
    (ws / "a.txt").write_bytes(b"alpha\r\nbeta\r\ngamma\r\n")
    assert body(ok("diff", ws, "a.txt")) == [
        "(line endings only: LF -> CRLF, 3 lines; no other change)"
    ]
    (ws / "a.txt").write_bytes(b"alpha\r\nbeta\ngamma\r\n")
    assert body(ok("diff", ws, "a.txt")) == [
        "(line endings only: LF -> mixed CRLF/LF, 2 lines; no other change)"
    ]
    # The same for a small CSV (its cells are not compared: nothing changed).
    (ws / "data.csv").write_bytes(b"id,name\n1,Ann\n2,Bo\n")
    ok("baseline", ws)
    (ws / "data.csv").write_bytes(b"id,name\r\n1,Ann\r\n2,Bo\r\n")
    assert body(ok("diff", ws, "data.csv")) == [
        "(line endings only: LF -> CRLF, 3 lines; no other change)"
    ]
    # A real change beside the line endings is a real diff.
    (ws / "a.txt").write_bytes(b"alpha\r\nBETA\r\ngamma\r\n")
    diff = ok("diff", ws, "a.txt")
    assert "\n-beta\n" in diff
    assert "\n+BETA" in diff
    assert "line endings only" not in diff


def test_a_failed_parse_says_so_and_why(ws: Path, tmp_path: Path) -> None:
    secret = docgen.encrypted_pdf(tmp_path)
    shutil.copy(secret, ws / "report.pdf")
    shutil.copy(secret, ws / "added.pdf")
    assert "2 failed" in ok("sync", ws)
    diff = ok("diff", ws, "report.pdf")
    assert diff.startswith("Binary files a/report.pdf and b/report.pdf differ (")
    assert "the current version could not be parsed (pdf@" in diff
    assert "encrypted" in diff
    assert "swfs sync" not in diff
    added = ok("diff", ws, "added.pdf")
    assert "could not be parsed" in added
    assert "encrypted" in added
    assert "swfs sync" not in added


# -- restore


def test_restore_of_an_untracked_path_says_so(ws: Path) -> None:
    (ws / "later.txt").write_text("made after the last scan\n")
    os.symlink("a.txt", ws / "link.txt")
    cases = {
        "later.txt@1": "later.txt: untracked: swfs has recorded no version of it",
        "link.txt@1": "link.txt: untracked: not a regular file",
        "nothere.txt@1": "nothere.txt: no such file in the workspace, and no recorded versions",
        "docs@1": "docs: is a directory",
    }
    for spec, message in cases.items():
        out = run("restore", ws, spec)
        assert out.returncode == 1, spec
        assert out.stderr.startswith(f"swfs: error: {message}"), out.stderr
        assert out.stderr.count("\n") == 1
    assert (ws / "later.txt").read_text() == "made after the last scan\n"
    # A tracked file restores as before (the snapshot keeps its first bytes).
    ok("snapshot", ws, "s1")
    (ws / "a.txt").write_text("changed\n")
    assert "a.txt: restored version 1 as version 3" in ok("restore", ws, "a.txt@1")
    assert (ws / "a.txt").read_text() == "alpha\nbeta\ngamma\n"


# -- prompt


def test_prompt_names_its_swfs_and_what_an_agent_meets() -> None:
    text = ok("prompt")
    assert f"\n  {SWFS}\n" in text
    assert os.path.isabs(SWFS)
    for words in (
        ".parsed/",
        ".review/",
        ".versions/<path>/NNNN-<hash16>",
        ".versions/@snapshots/<name>/<path>",
        "error.md",
        "pending.md",
        "unsupported",
        "getfattr",
        "daemon.log",
        "swfs sync .",
        "first 16 hex digits",
    ):
        assert words in text, words
    assert text.count("\n## ") >= 5
    assert len(text.splitlines()) < 80


# -- one hash notation, through a real mount


@mountutil.needs_fuse
@pytest.mark.mount
def test_one_hash_notation_from_header_to_cli() -> None:
    with mountutil.workspace(populate=lambda src: (src / "notes.txt").write_text("one\n")) as m:
        _check_one_notation(m.mnt)


def _check_one_notation(mnt: Path) -> None:
    swfs = mountutil.swfs
    (mnt / "notes.txt").write_text("two\n")
    swfs("sync", mnt)
    full = os.getxattr(mnt / "notes.txt", "user.sw.hash").decode()
    assert full == b3(b"two\n")
    short = full[:16]
    old = b3(b"one\n")
    header = (mnt / ".parsed/notes.txt/content.txt").read_text().splitlines()[0]
    assert f'hash="b3:{short}"' in header
    assert f'current="b3:{short}"' in header
    assert sorted(os.listdir(mnt / ".versions/notes.txt")) == [
        f"0001-{old[:16]}.txt",
        f"0002-{short}.txt",
    ]
    summary = (mnt / ".review/SUMMARY.md").read_text()
    assert f"| modified | notes.txt | b3:{old[:16]} | b3:{short} |" in summary
    assert f"index {old[:16]}..{short}\n" in (mnt / ".review/notes.txt.diff").read_text()
    assert f"b3:{short}" in swfs("versions", mnt, "notes.txt").stdout
    # A path may be given under the mount point as well as relative to it.
    assert (
        swfs("versions", mnt, mnt / "notes.txt").stdout == swfs("versions", mnt, "notes.txt").stdout
    )
    # `swfs diff MNT nonexistent`, as the trial ran it, through the mount.
    missing = swfs("diff", mnt, "nonexistent", check=False)
    assert missing.returncode == 1
    assert "nonexistent: no such file" in missing.stderr
    assert swfs("diff", mnt, "--exit-code", check=False).returncode == 1
    (change,) = json.loads(swfs("diff", mnt, "--json").stdout)["changes"]
    assert change["current_hash"] == full
    assert os.getxattr(mnt / ".review/notes.txt.diff", "user.sw.current_hash").decode() == full
