"""``swfs mount --staged`` through real mounts: edits by openpyxl, shell
redirects and temp-then-rename saves are held in the store (SRC byte for
byte as it was), shown by the mount, ``.parsed`` and ``.review``; then
commit and discard, whole and per path; and a commit killed with SIGKILL
halfway, after which every file is old or new and a re-run finishes."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.mountutil import SWFS, daemon_env, lazy_unmount, needs_fuse, start_mount, swfs, workspace

openpyxl = pytest.importorskip("openpyxl")
xlsxwriter = pytest.importorskip("xlsxwriter")

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]


def tree(root: Path) -> dict[str, str]:
    """rel -> sha256 of every file (``dir/`` for directories), store left out."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if not d.startswith(".swfs")]
            rel_dir = ""
        for d in dirnames:
            out[os.path.join(rel_dir, d) + "/"] = "dir"
        for f in filenames:
            out[os.path.join(rel_dir, f)] = hashlib.sha256(
                Path(dirpath, f).read_bytes()
            ).hexdigest()
    return out


def mount_tree(mnt: Path) -> dict[str, str]:
    t = tree(mnt)
    return {k: v for k, v in t.items() if k.split("/", 1)[0] not in (".parsed", ".review")}


def poll(what: Callable[[], bool], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def populate(src: Path) -> None:
    (src / "notes.md").write_text("# Notes\n\nthe plan is draft one\n")
    (src / "log.txt").write_text("line one\n")
    (src / "old.txt").write_text("to be deleted\n")
    (src / "docs").mkdir()
    (src / "docs" / "a.txt").write_text("doc a\n")
    (src / "docs" / "b.txt").write_text("doc b\n")
    wb = xlsxwriter.Workbook(str(src / "book.xlsx"))
    ws = wb.add_worksheet("Budget")
    ws.write_row(0, 0, ["region", "status"])
    ws.write_row(1, 0, ["north", "target reached"])
    wb.close()


def staged_paths(target: Path) -> dict[str, str]:
    out = json.loads(swfs("staged", target, "--json").stdout)
    return {row["path"]: row["status"] for row in out["staged"]}


@pytest.mark.timeout(900)
def test_staged_edits_commit_and_discard() -> None:
    with workspace(["--staged"], populate=populate) as m:
        src, mnt = m.src, m.mnt
        before = tree(src)
        log_ino = os.stat(mnt / "log.txt").st_ino

        # A shell redirect (truncate + write) and an append.
        subprocess.run(["sh", "-c", f"echo 'line two' >> '{mnt}/log.txt'"], check=True)
        subprocess.run(["sh", "-c", f"printf 'redirected\\n' > '{mnt}/docs/a.txt'"], check=True)
        # A temp-then-rename save (vim, LibreOffice, python-docx-like).
        tmp = mnt / ".notes.md.swp"
        with open(tmp, "w") as f:
            f.write("# Notes\n\nthe plan is final\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, mnt / "notes.md")
        # openpyxl saving in place.
        wb = openpyxl.load_workbook(mnt / "book.xlsx")
        wb["Budget"]["B2"] = "target missed"
        wb.save(mnt / "book.xlsx")
        # Deletion, a new directory with a file, a hard link, mkdir/rmdir.
        os.unlink(mnt / "old.txt")
        (mnt / "out").mkdir()
        (mnt / "out" / "result.txt").write_text("result\n")
        os.link(mnt / "log.txt", mnt / "log-link.txt")
        (mnt / "scratch").mkdir()
        (mnt / "scratch").rmdir()
        # A directory SRC has: rename answers EXDEV and `mv` copies instead.
        with pytest.raises(OSError, match="cross-device") as exc:
            os.rename(mnt / "docs", mnt / "docs2")
        assert exc.value.errno == errno.EXDEV
        subprocess.run(["mv", str(mnt / "docs"), str(mnt / "docs2")], check=True)
        assert (mnt / "docs2" / "a.txt").read_text() == "redirected\n"
        assert not (mnt / "docs").exists()

        # The mount shows the staged state; SRC is byte-identical.
        assert tree(src) == before
        assert (mnt / "notes.md").read_text() == "# Notes\n\nthe plan is final\n"
        assert (mnt / "log.txt").read_text() == "line one\nline two\n"
        assert os.stat(mnt / "log.txt").st_ino == os.stat(mnt / "log-link.txt").st_ino == log_ino
        assert not (mnt / "old.txt").exists()
        assert sorted(os.listdir(mnt / "docs2")) == ["a.txt", "b.txt"]
        staged = staged_paths(mnt)
        assert staged["notes.md"] == "modified"
        assert staged["book.xlsx"] == "modified"
        assert staged["old.txt"] == "deleted"
        assert staged["out/result.txt"] == "added"
        assert staged["docs/a.txt"] == "deleted"
        assert staged["docs2/a.txt"] == "added"
        assert "scratch" not in staged
        status = swfs("status", mnt).stdout
        assert f"staged: {len(staged)} path(s)" in status

        # .parsed follows the staged bytes.
        swfs("sync", mnt, "--timeout", "300")
        sheet = (mnt / ".parsed" / "book.xlsx" / "sheet-Budget.md").read_text()
        assert "target missed" in sheet
        assert "target reached" not in sheet
        notes = (mnt / ".parsed" / "notes.md" / "content.txt").read_text()
        assert "the plan is final" in notes
        assert "draft one" not in notes

        # .review: staged vs SRC, and (as ever) vs the baseline.
        staged_md = (mnt / ".review" / "STAGED.md").read_text()
        assert "notes.md" in staged_md
        assert "old.txt" in staged_md
        staged_diff = (mnt / ".review" / "STAGED.diff").read_text()
        assert "-the plan is draft one" in staged_diff
        assert "+the plan is final" in staged_diff
        assert "target missed" in staged_diff
        summary = (mnt / ".review" / "SUMMARY.md").read_text()
        assert "| modified | notes.md |" in summary

        # Discard one path: the mount shows SRC's bytes again, the rest stays.
        swfs("discard", mnt, "docs2")
        swfs("discard", mnt, "docs")
        assert (mnt / "docs" / "a.txt").read_text() == "doc a\n"
        assert not (mnt / "docs2").exists()
        assert tree(src) == before

        # Commit one path, then the rest: SRC becomes what the mount showed.
        swfs("commit", mnt, "notes.md")
        assert (src / "notes.md").read_text() == "# Notes\n\nthe plan is final\n"
        assert (src / "log.txt").read_text() == "line one\n"
        assert "notes.md" not in staged_paths(mnt)
        shown = mount_tree(mnt)
        swfs("commit", mnt)
        assert tree(src) == shown
        assert mount_tree(mnt) == shown
        assert staged_paths(mnt) == {}
        assert os.stat(src / "log.txt").st_ino == os.stat(src / "log-link.txt").st_ino
        assert not list(src.rglob("*.swfs-commit"))

        # Discard everything: the mount is SRC again.
        committed = tree(src)
        (mnt / "notes.md").write_text("scribble\n")
        os.unlink(mnt / "log.txt")
        (mnt / "extra").mkdir()
        (mnt / "extra" / "x.txt").write_text("x\n")
        assert tree(src) == committed
        swfs("discard", mnt)
        poll(lambda: mount_tree(mnt) == committed)
        assert (mnt / "notes.md").read_text() == "# Notes\n\nthe plan is final\n"
        assert staged_paths(mnt) == {}


def test_copy_up_keeps_the_inode_number() -> None:
    with workspace(["--staged"], populate=populate) as m:
        mnt = m.mnt
        before = {n: os.stat(mnt / n).st_ino for n in ("notes.md", "docs", "docs/a.txt")}
        with open(mnt / "docs" / "a.txt", "a") as f:
            f.write("more\n")
        os.chmod(mnt / "notes.md", 0o600)
        after = {n: os.stat(mnt / n).st_ino for n in before}
        assert after == before
        assert {name: ino for name, ino in ((e.name, e.inode()) for e in os.scandir(mnt))}[
            "notes.md"
        ] == before["notes.md"]
        assert os.stat(m.src / "notes.md").st_mode & 0o777 != 0o600
        assert staged_paths(mnt)["notes.md"] == "modified"

        # Staged writes are versions as ever; the present one is the staged bytes.
        vdir = mnt / ".versions" / "docs" / "a.txt"
        poll(lambda: len(os.listdir(vdir)) >= 2)
        versions = sorted(os.listdir(vdir))
        assert (vdir / versions[0]).read_text() == "doc a\n"
        assert (vdir / versions[-1]).read_text() == "doc a\nmore\n"

        # A file open for writing is not committed from under its writer.
        with open(mnt / "log.txt", "a") as f:
            f.write("more\n")
            f.flush()
            proc = swfs("commit", mnt, "log.txt", check=False)
            assert proc.returncode != 0
            assert "log.txt: open for writing" in proc.stderr
        assert (m.src / "log.txt").read_text() == "line one\n"
        swfs("commit", mnt, "log.txt")
        assert (m.src / "log.txt").read_text() == "line one\nmore\n"
        # reset would write into SRC: refused, with what to do instead.
        proc = swfs("reset", mnt, check=False)
        assert proc.returncode != 0
        assert "swfs discard" in proc.stderr
        assert (m.src / "notes.md").read_text() == "# Notes\n\nthe plan is draft one\n"


def killed_commit(src: Path, after: int, done: Callable[[], int]) -> None:
    """``swfs commit SRC`` paused (test hook) after ``after`` files, then SIGKILL."""
    proc = subprocess.Popen(
        [SWFS, "commit", str(src)],
        env={**daemon_env(), "SWFS_TEST_COMMIT_PAUSE_AFTER": str(after)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll(lambda: done() >= after)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


@pytest.mark.timeout(900)
def test_commit_killed_halfway_then_finished() -> None:
    names = [f"f{i}.txt" for i in range(8)]

    def fill(src: Path) -> None:
        for n in names:
            (src / n).write_text(f"old {n}\n" * 1000)

    with workspace(["--staged"], populate=fill) as m:
        src, mnt = m.src, m.mnt
        for n in names:
            (mnt / n).write_text(f"new {n}\n" * 2000)
        old = {n: f"old {n}\n" * 1000 for n in names}
        new = {n: f"new {n}\n" * 2000 for n in names}
        m.stop()
        lazy_unmount(mnt)

        # A local commit (no daemon), stopped after 3 files and killed.
        killed_commit(src, 3, lambda: sum((src / n).read_text() == new[n] for n in names))
        states = {}
        for n in names:
            text = (src / n).read_text()
            assert text in (old[n], new[n]), f"{n} is torn"
            states[n] = "committed" if text == new[n] else "staged"
        assert sorted(states.values()).count("committed") == 3

        check = swfs("check", src, check=False)
        assert check.returncode != 0
        assert "a commit was interrupted: 3 of 8 path(s) committed" in check.stdout
        for n, state in states.items():
            assert f"staged: {n}: {state}" in check.stdout

        swfs("commit", src)
        assert {n: (src / n).read_text() for n in names} == new
        assert not list(src.glob(".*.swfs-commit"))
        assert swfs("check", src).returncode == 0
        assert staged_paths(src) == {}

        # Staged again, killed again: the next mount finishes the commit
        # before its daemon serves anything.
        m2 = start_mount(src, mnt, "--staged")
        try:
            for n in names:
                (mnt / n).write_text(f"third {n}\n")
        finally:
            m2.stop()
            with contextlib.suppress(Exception):
                lazy_unmount(mnt)
        killed_commit(src, 2, lambda: sum((src / n).read_text().startswith("third") for n in names))
        assert "a commit was interrupted: 2 of 8" in swfs("check", src, check=False).stdout
        m3 = start_mount(src, mnt, "--staged")
        try:
            assert {n: (src / n).read_text() for n in names} == {n: f"third {n}\n" for n in names}
            assert {n: (mnt / n).read_text() for n in names} == {n: f"third {n}\n" for n in names}
            assert staged_paths(mnt) == {}
        finally:
            m3.stop()
            with contextlib.suppress(Exception):
                lazy_unmount(mnt)
        assert swfs("check", src).returncode == 0


def test_plain_mount_refuses_staged_changes() -> None:
    with workspace(["--staged"], populate=populate) as m:
        (m.mnt / "notes.md").write_text("held\n")
        m.stop()
        lazy_unmount(m.mnt)
        proc = swfs("mount", m.src, m.mnt, check=False)
        assert proc.returncode != 0
        assert "staged change(s) not committed" in proc.stderr
        assert (m.src / "notes.md").read_text() == "# Notes\n\nthe plan is draft one\n"
