"""The product end to end: `swfs mount` of a real workspace with the real
engine, driven by real tools (grep, cat, cp, python with openpyxl) and by the
CLI against the mount point."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openpyxl
import pymupdf
import pytest

from swfs.samples import build_sample_workspace
from swfs.store.fsutil import hash_file
from tests.mountutil import (
    Mount,
    as_user,
    ensure_test_user,
    errno_of,
    lazy_unmount,
    mounted_swfs,
    start_mount,
    swfs,
    workdir,
)

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None,
        reason="needs /dev/fuse and fusermount3",
    ),
]


@pytest.fixture
def ws() -> Iterator[Mount]:
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    build_sample_workspace(src)
    m = start_mount(src, mnt)
    try:
        swfs("sync", mnt)
        yield m
    finally:
        m.stop()
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


def header(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.readline()


def test_grep_finds_evidence_with_its_locator(ws: Mount) -> None:
    out = subprocess.run(
        ["grep", "-rn", "Churn in the EMEA", ".parsed"],
        cwd=ws.mnt,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.startswith(".parsed/reports/q3-report.pdf/page-0007.md:")
    assert out.count("\n") == 1
    out = subprocess.run(
        ["grep", "-rn", "Sheet1!B12", ".parsed"],
        cwd=ws.mnt,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".parsed/budget.xlsx/sheet-Sheet1.md:" in out
    assert "Sheet1!B12 = 1200" in out
    out = subprocess.run(
        ["grep", "-rln", "40 enterprise customers", ".parsed"],
        cwd=ws.mnt,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == [".parsed/deck/pitch.pptx/slide-002.md"]
    # Names with spaces and non-ASCII letters.
    assert (ws.mnt / ".parsed" / "notes" / "meeting memo.docx" / "section-002.md").is_file()
    cafe = ws.mnt / ".parsed" / "notes" / "café.txt" / "content.txt"
    assert 'freshness="current"' in header(cafe)
    # getattr reports the size a read returns: cat and cp agree with stat.
    data = subprocess.run(["cat", str(cafe)], capture_output=True, check=True).stdout
    assert len(data) == cafe.stat().st_size
    shutil.copy(cafe, ws.root / "copied.txt")
    assert (ws.root / "copied.txt").read_bytes() == data


def test_openpyxl_edit_in_place_goes_current_with_review_and_versions(ws: Mount) -> None:
    book = ws.mnt / "budget.xlsx"
    original = hash_file(ws.src / "budget.xlsx")
    wb = openpyxl.load_workbook(book)
    wb["Sheet1"]["B12"] = 1350
    wb.save(book)
    new = hash_file(ws.src / "budget.xlsx")
    # The write was recorded at close: the file's hash is the new one at once.
    assert os.getxattr(book, "user.sw.hash").decode() == new
    unit = ws.mnt / ".parsed" / "budget.xlsx" / "sheet-Sheet1.md"
    first = header(unit)
    # Never a view that claims to be current but describes the old bytes.
    if 'freshness="current"' in first:
        assert f'hash="b3:{new[:16]}"' in first
    else:
        assert 'freshness="stale"' in first
        assert f'hash="b3:{original[:16]}"' in first
    swfs("sync", ws.mnt)
    assert os.getxattr(book, "user.sw.freshness") == b"current"
    text = unit.read_text()
    assert 'freshness="current"' in text.splitlines()[0]
    assert "Sheet1!B12 = 1350" in text
    diff = (ws.mnt / ".review" / "budget.xlsx.diff").read_text()
    assert "Sheet1!B12: 1200 -> 1350" in diff
    assert "budget.xlsx" in (ws.mnt / ".review" / "SUMMARY.md").read_text()
    assert "Sheet1!B12: 1200 -> 1350" in (ws.mnt / ".review" / "ALL.diff").read_text()
    versions = sorted(os.listdir(ws.mnt / ".versions" / "budget.xlsx"))
    assert versions == [f"0001-{original[:16]}.xlsx", f"0002-{new[:16]}.xlsx"]
    old = ws.mnt / ".versions" / "budget.xlsx" / versions[0]
    assert hash_file(old) == original
    assert os.getxattr(old, "user.sw.hash").decode() == original
    assert os.getxattr(old, "user.sw.cause") == b"baseline"


def test_stale_view_is_served_marked_then_turns_current(ws: Mount) -> None:
    """A read of a stale view waits (--stale-wait, 2 s) for the re-parse; past
    that bound it gets the prior view, marked stale."""
    go = ws.src / "notes.gated.go"  # the gated test parser finishes once this exists
    go.write_text("")
    gated = ws.mnt / "notes.gated"
    gated.write_text("first version\n")
    swfs("sync", ws.mnt)
    unit = ws.mnt / ".parsed" / "notes.gated" / "content.txt"
    assert "first version" in unit.read_text()
    go.unlink()
    gated.write_text("second version\n")
    text = unit.read_text()  # the re-parse waits for the test: the prior view, marked
    assert 'freshness="stale"' in text.splitlines()[0]
    assert "first version" in text
    assert os.getxattr(gated, "user.sw.freshness") == b"stale"
    assert os.getxattr(unit, "user.sw.freshness") == b"stale"
    go.write_text("")
    swfs("sync", ws.mnt)
    text = unit.read_text()
    assert 'freshness="current"' in text.splitlines()[0]
    assert "second version" in text


def test_units_that_a_rewrite_removes_are_gone_at_once(ws: Mount) -> None:
    """The kernel caches generated names and attributes like native ones (60 s),
    so a rewrite that drops units must drop them from its caches too."""
    folder = ws.mnt / ".parsed" / "reports" / "q3-report.pdf"
    seventh = folder / "page-0007.md"
    assert "Churn in the EMEA" in seventh.read_text()
    assert seventh.stat().st_size > 0  # name and attributes now in the kernel's caches
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "A two-page rewrite.")
    doc.new_page().insert_text((72, 72), "Its second page.")
    doc.save(ws.mnt / "reports" / "q3-report.pdf")
    doc.close()
    swfs("sync", ws.mnt)
    assert sorted(os.listdir(folder)) == ["page-0001.md", "page-0002.md"]
    assert errno_of(seventh.stat) == errno.ENOENT
    assert errno_of(seventh.read_text) == errno.ENOENT
    first = (folder / "page-0001.md").read_text()
    assert 'freshness="current"' in first.splitlines()[0]
    assert "A two-page rewrite." in first


def test_editor_save_through_the_mount_is_one_version(ws: Mount) -> None:
    target = ws.mnt / "README.md"
    before = len(os.listdir(ws.mnt / ".versions" / "README.md"))
    tmp = ws.mnt / ".README.md.tmp"
    tmp.write_text("# Rewritten by an editor\n")
    os.replace(tmp, target)
    after = os.listdir(ws.mnt / ".versions" / "README.md")
    assert len(after) == before + 1
    assert not (ws.mnt / ".versions" / ".README.md.tmp").exists()
    summary = (ws.mnt / ".review" / "SUMMARY.md").read_text()
    assert "| modified | README.md |" in summary
    assert ".README.md.tmp" not in summary
    swfs("sync", ws.mnt)
    assert (
        "Rewritten by an editor" in (ws.mnt / ".parsed" / "README.md" / "content.txt").read_text()
    )


def test_synthetic_trees_are_read_only(ws: Mount) -> None:
    for path in (
        ws.mnt / ".parsed" / "README.md" / "content.txt",
        ws.mnt / ".review" / "SUMMARY.md",
        ws.mnt / ".parsed" / "new.txt",
    ):
        assert errno_of(lambda p=path: p.open("w").close()) == errno.EROFS, path
    assert errno_of((ws.mnt / ".versions" / "x").mkdir) == errno.EROFS
    assert errno_of((ws.mnt / ".parsed").mkdir) in (errno.EEXIST, errno.EROFS, errno.EPERM)
    assert errno_of(lambda: os.unlink(ws.mnt / ".review" / "SUMMARY.md")) == errno.EROFS


def test_parallel_readers_while_reparsing(ws: Mount) -> None:
    errors: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            proc = subprocess.run(
                ["grep", "-rc", "swfs", str(ws.mnt / ".parsed")],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode not in (0, 1) or proc.stderr:
                errors.append(proc.stderr)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(15):
            (ws.mnt / "data" / "sales.csv").write_text(f"month,region,amount\n2024-{i},X,{i}\n")
            (ws.mnt / "notes" / "café.txt").write_text(f"edit {i}\n")
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert errors == []
    swfs("sync", ws.mnt)
    assert "edit 14" in (ws.mnt / ".parsed" / "notes" / "café.txt" / "content.txt").read_text()


def test_cli_against_the_mount_point(ws: Mount) -> None:
    status = json.loads(swfs("status", ws.mnt, "--json").stdout)
    for key in ("files", "current", "stale", "pending", "failed", "unsupported"):
        assert key in status
    assert status["mounted"] is True
    assert status["files"] == status["current"] == 8
    readme = ws.mnt / "README.md"
    original = readme.read_bytes()
    readme.write_text("changed\n")
    assert "README.md" in swfs("diff", ws.mnt, "--summary").stdout
    swfs("restore", ws.mnt, "README.md@1")
    assert readme.read_bytes() == original
    assert "restore" in swfs("versions", ws.mnt, "README.md").stdout
    swfs("baseline", ws.mnt)
    assert (ws.mnt / ".review" / "SUMMARY.md").read_text().count("| modified |") == 0
    swfs("snapshot", ws.mnt, "s1")
    snap = ws.mnt / ".versions" / "@snapshots" / "s1" / "budget.xlsx"
    assert snap.read_bytes() == (ws.mnt / "budget.xlsx").read_bytes()
    assert "restore" in swfs("log", ws.mnt).stdout
    swfs("check", ws.mnt)


def test_unprivileged_user_sees_only_what_they_may_read(ws: Mount) -> None:
    user = ensure_test_user()
    if user is None:
        pytest.skip("cannot create an unprivileged user here")
    os.chmod(ws.root, 0o755)
    secret = ws.mnt / "secret.txt"
    secret.write_text("payroll figures\n")
    os.chmod(secret, 0o600)
    (ws.mnt / "public.txt").write_text("public figures\n")
    swfs("sync", ws.mnt)
    assert as_user(user, "cat", str(ws.mnt / "public.txt")).returncode == 0
    assert as_user(user, "cat", str(secret)).returncode != 0
    parsed_secret = ws.mnt / ".parsed" / "secret.txt" / "content.txt"
    parsed_public = ws.mnt / ".parsed" / "public.txt" / "content.txt"
    assert as_user(user, "cat", str(parsed_public)).returncode == 0
    denied = as_user(user, "cat", str(parsed_secret))
    assert denied.returncode != 0
    assert b"payroll" not in denied.stdout
    versions = ws.mnt / ".versions" / "secret.txt"
    for name in os.listdir(versions):
        assert as_user(user, "cat", str(versions / name)).returncode != 0
    grep = as_user(user, "grep", "-r", "payroll", str(ws.mnt / ".parsed"))
    assert b"payroll" not in grep.stdout
    # The review as a whole speaks of the secret file: closed to the user,
    # while the public file's own diff stays readable.
    assert "payroll" in (ws.mnt / ".review" / "ALL.diff").read_text()
    for name in ("ALL.diff", "SUMMARY.md", "secret.txt.diff"):
        out = as_user(user, "cat", str(ws.mnt / ".review" / name))
        assert out.returncode != 0, name
        assert b"payroll" not in out.stdout
    assert as_user(user, "cat", str(ws.mnt / ".review" / "public.txt.diff")).returncode == 0


def test_killed_daemon_leaves_a_store_that_remounts_and_checks_clean(ws: Mount) -> None:
    for i in range(20):
        (ws.mnt / "notes" / f"n{i}.txt").write_text(f"note {i}\n")
        (ws.mnt / "README.md").write_text(f"readme {i}\n")
    closed = (ws.mnt / "README.md").read_bytes()
    versions_before = sorted(os.listdir(ws.mnt / ".versions" / "README.md"))
    os.kill(ws.proc.pid, signal.SIGKILL)
    ws.proc.wait(10)
    lazy_unmount(ws.mnt)
    assert (ws.src / "README.md").read_bytes() == closed
    m = start_mount(ws.src, ws.mnt)
    try:
        swfs("sync", ws.mnt)
        swfs("check", ws.mnt)
        after = sorted(os.listdir(ws.mnt / ".versions" / "README.md"))
        assert after[: len(versions_before)] == versions_before
        for name in versions_before:
            (ws.mnt / ".versions" / "README.md" / name).read_bytes()
        assert (ws.mnt / "notes" / "n19.txt").read_text() == "note 19\n"
    finally:
        m.stop()


def test_second_mount_of_the_same_workspace_is_refused(ws: Mount) -> None:
    other = ws.root / "mnt2"
    other.mkdir()
    out = swfs("mount", ws.src, other, check=False)
    assert out.returncode == 1
    assert "already served by another swfs daemon" in out.stderr
    assert not mounted_swfs(other)
    assert (ws.mnt / "README.md").read_bytes() == (ws.src / "README.md").read_bytes()


@pytest.mark.timeout(300)
def test_umount_returns_once_the_daemon_has_closed_its_store(ws: Mount) -> None:
    """`swfs umount` then at once a new mount of the same workspace (here
    `--staged`, as a harness does between tasks) must work: umount waits for
    the daemon to exit, so its store lock is free."""
    (ws.mnt / "README.md").write_text("changed before the umount\n")
    swfs("umount", ws.mnt)
    assert ws.proc.poll() is not None  # exited, not still closing its store
    m = start_mount(ws.src, ws.mnt, "--staged")
    try:
        swfs("umount", m.mnt)
        assert m.proc.poll() is not None
    finally:
        m.stop()
