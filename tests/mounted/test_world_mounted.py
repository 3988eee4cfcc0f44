"""Read-only worlds through real mounts (``swfs mount --at SNAPSHOT``): a
snapshot taken on a live mount of a docx / xlsx / text tree, then changed
and partly deleted, mounted beside the live mount as it was."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from mountd.launch import mounted_swfs
from swfs.store.fsutil import hash_bytes
from tests.mountutil import Mount, errno_of, lazy_unmount, needs_fuse, start_mount, swfs, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(600), needs_fuse]

GENERATED = {".parsed", ".review", ".versions", ".render", ".search", ".tab"}


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) below ``root``, without the
    generated trees and the store."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d not in GENERATED | {".swfs"}]
        rel_dir = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel_dir, d))] = None
        for f in filenames:
            out[os.path.normpath(os.path.join(rel_dir, f))] = Path(dirpath, f).read_bytes()
    return out


def write_docx(path: Path, *paragraphs: str) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Quarterly report", level=1)
    for p in paragraphs:
        d.add_paragraph(p)
    d.save(str(path))


def write_xlsx(path: Path, revenue: int) -> None:
    import xlsxwriter

    wb = xlsxwriter.Workbook(str(path))
    ws = wb.add_worksheet("Budget")
    ws.write_row(0, 0, ["Region", "Revenue"])
    ws.write_row(1, 0, ["North", revenue])
    ws.write_formula(2, 1, "=B2*2", None, revenue * 2)
    wb.close()


def populate(src: Path) -> None:
    (src / "sub" / "deep").mkdir(parents=True)
    write_docx(src / "report.docx", "Revenue in the NORTHWIND region rose by a third.")
    write_xlsx(src / "budget.xlsx", 1200)
    (src / "notes.txt").write_text("first draft of the notes\n")
    (src / "old.txt").write_text("a file deleted after the snapshot\n")
    (src / "sub" / "deep" / "leaf.txt").write_text("deep leaf\n")


def world(m: Mount, name: str, mnt_name: str) -> Mount:
    mnt = m.root / mnt_name
    mnt.mkdir(exist_ok=True)
    mnt.chmod(0o755)
    return start_mount(m.src, mnt, "--at", name)


def unit(root: Path, rel: str, name: str) -> str:
    return (root / ".parsed" / rel / name).read_text()


def sheet_unit(root: Path) -> str:
    names = os.listdir(root / ".parsed" / "budget.xlsx")
    assert names == ["sheet-Budget.md"], names
    return unit(root, "budget.xlsx", names[0])


def test_world_shows_the_snapshot_its_views_and_refuses_writes() -> None:
    import openpyxl

    with workspace(populate=populate) as m:
        # A change before the snapshot: the world's .review shows it.
        (m.mnt / "notes.txt").write_text("second draft of the notes\n")
        swfs("sync", m.mnt)
        swfs("snapshot", m.mnt, "before")
        at_snapshot = tree(m.mnt)
        # After the snapshot: every kind of file changes, one goes, one comes.
        write_docx(m.mnt / "report.docx", "Revenue was OVERHAULED entirely.")
        wb = openpyxl.load_workbook(m.mnt / "budget.xlsx")
        wb["Budget"]["B2"] = 1350
        wb.save(m.mnt / "budget.xlsx")
        (m.mnt / "notes.txt").write_text("third draft, after the snapshot\n")
        (m.mnt / "old.txt").unlink()
        (m.mnt / "new.txt").write_text("added after the snapshot\n")
        swfs("sync", m.mnt)
        assert "OVERHAULED" in unit(m.mnt, "report.docx", "section-001.md")  # live: moved on

        w = world(m, "before", "w-before")
        try:
            # Native bytes are the snapshot's, byte for byte.
            assert tree(w.mnt) == at_snapshot
            assert not (w.mnt / "new.txt").exists()
            assert (w.mnt / "old.txt").read_bytes() == b"a file deleted after the snapshot\n"
            st = os.stat(w.mnt / "notes.txt")
            assert st.st_size == len(at_snapshot["notes.txt"] or b"")
            live = os.stat(m.src / "notes.txt")  # rewritten in place: same mode and owner
            assert (st.st_mode, st.st_uid, st.st_gid) == (live.st_mode, live.st_uid, live.st_gid)

            # .parsed shows the old text, not the new, and names the world.
            doc = unit(w.mnt, "report.docx", "section-001.md")
            assert "NORTHWIND" in doc
            assert "OVERHAULED" not in doc
            head = doc.splitlines()[0]
            old_hash = hash_bytes(at_snapshot["report.docx"] or b"")
            assert f'hash="b3:{old_hash[:16]}"' in head
            assert 'freshness="current"' in head
            assert 'world="before"' in head
            sheet = sheet_unit(w.mnt)
            assert "1200" in sheet
            assert "1350" not in sheet
            assert "B3" in sheet
            assert "2400" in sheet
            notes = unit(w.mnt, "notes.txt", "content.txt")
            assert "second draft" in notes
            assert "third draft" not in notes
            assert "first draft" not in notes
            assert "old.txt" in os.listdir(w.mnt / ".parsed")
            assert "new.txt" not in os.listdir(w.mnt / ".parsed")

            # .review: the state of then against the baseline of then.
            summary = (w.mnt / ".review" / "SUMMARY.md").read_text()
            assert summary.startswith('<!-- swfs world="before" kind="snapshot"')
            assert 'baseline="baseline"' in summary.splitlines()[0]
            assert "| modified | notes.txt |" in summary
            assert "1 changed path(s)" in summary
            for later in ("new.txt", "old.txt", "report.docx", "budget.xlsx"):
                assert later not in summary.split("\n", 2)[2], later
            diff = (w.mnt / ".review" / "notes.txt.diff").read_text()
            assert "-first draft of the notes" in diff
            assert "+second draft of the notes" in diff
            assert "third draft" not in (w.mnt / ".review" / "ALL.diff").read_text()
            live_summary = (m.mnt / ".review" / "SUMMARY.md").read_text()
            assert "new.txt" in live_summary
            assert "old.txt" in live_summary
            # .versions is not part of a world.
            assert errno_of(lambda: os.stat(w.mnt / ".versions")) == errno.ENOENT

            # xattrs say the world's name and the snapshot's hashes.
            assert os.getxattr(w.mnt, "user.sw.world") == b"before"
            assert os.getxattr(w.mnt / "report.docx", "user.sw.world") == b"before"
            assert os.getxattr(w.mnt / "report.docx", "user.sw.hash").decode() == old_hash
            assert os.getxattr(w.mnt / "old.txt", "user.sw.hash").decode() == hash_bytes(
                b"a file deleted after the snapshot\n"
            )

            # Every write is EROFS, and nothing changed anywhere.
            refused: list[Callable[[], object]] = [
                lambda: open(w.mnt / "notes.txt", "w").close(),
                lambda: open(w.mnt / "notes.txt", "a").close(),
                lambda: open(w.mnt / "fresh.txt", "x").close(),
                lambda: (w.mnt / "old.txt").unlink(),
                lambda: os.rename(w.mnt / "notes.txt", w.mnt / "renamed.txt"),
                lambda: os.mkdir(w.mnt / "newdir"),
                lambda: os.rmdir(w.mnt / "sub" / "deep"),
                lambda: os.truncate(w.mnt / "notes.txt", 0),
                lambda: os.chmod(w.mnt / "notes.txt", 0o600),
                lambda: os.utime(w.mnt / "notes.txt", (0, 0)),
                lambda: os.symlink("notes.txt", w.mnt / "link"),
                lambda: os.link(w.mnt / "notes.txt", w.mnt / "hard"),
                lambda: os.setxattr(w.mnt / "notes.txt", "user.mine", b"x"),
                lambda: open(w.mnt / ".parsed" / "notes.txt" / "content.txt", "w").close(),
            ]
            for i, fn in enumerate(refused):
                assert errno_of(fn) == errno.EROFS, i
            shell = subprocess.run(
                ["sh", "-c", f"echo x > '{w.mnt}/notes.txt'"], capture_output=True, text=True
            )
            assert shell.returncode != 0
            assert "Read-only file system" in shell.stderr
            assert tree(w.mnt) == at_snapshot

            # status on the world says which; the live mount keeps working.
            out = swfs("status", w.mnt).stdout
            assert out.startswith("world of before (snapshot"), out
            info = json.loads(swfs("status", w.mnt, "--json").stdout)
            assert info["world"] == "before"
            assert info["read_only"]
            assert info["files"] == 5
            refusal = swfs("snapshot", w.mnt, "again", check=False)
            assert refusal.returncode == 1
            assert "read-only world of before" in refusal.stderr
            (m.mnt / "during.txt").write_text("written while a world is mounted\n")
            swfs("sync", m.mnt)
            assert "written while" in unit(m.mnt, "during.txt", "content.txt")
            assert not (w.mnt / "during.txt").exists()
            assert "world" not in swfs("status", m.mnt).stdout.split("\n", 1)[0]
        finally:
            w.stop()
        assert not mounted_swfs(w.mnt)
        assert w.proc.returncode == 0, w.log()
        # The live mount after the world is gone, and SRC untouched by it.
        (m.mnt / "after.txt").write_text("after the world\n")
        assert (m.src / "after.txt").read_text() == "after the world\n"
        assert (m.src / "notes.txt").read_text() == "third draft, after the snapshot\n"
        assert not (m.src / "old.txt").exists()
        swfs("sync", m.mnt)
        assert "third draft" in unit(m.mnt, "notes.txt", "content.txt")


def test_two_worlds_beside_the_live_mount_and_an_unknown_name() -> None:
    with workspace(populate=populate) as m:
        swfs("snapshot", m.mnt, "one")
        (m.mnt / "notes.txt").write_text("version two\n")
        (m.mnt / "sub" / "two.txt").write_text("only in two\n")
        swfs("sync", m.mnt)
        swfs("submit", m.mnt, "two", "notes.txt")
        (m.mnt / "notes.txt").write_text("version three, live\n")
        swfs("sync", m.mnt)

        bad = m.root / "w-bad"
        bad.mkdir()
        proc = swfs("mount", "--at", "no-such-snapshot", m.src, bad, check=False)
        assert proc.returncode == 1
        assert proc.stderr.strip() == (
            "swfs: error: 'no-such-snapshot': no such snapshot or submission "
            "(`swfs snapshots` and `swfs submissions` list them; `baseline` is one too)"
        )
        assert "Traceback" not in proc.stderr
        assert not mounted_swfs(bad)

        worlds: list[Mount] = []
        try:
            worlds.append(world(m, "one", "w-one"))
            worlds.append(world(m, "two", "w-two"))  # a submission's name
            worlds.append(world(m, "baseline", "w-base"))
            one, two, base = worlds
            assert (one.mnt / "notes.txt").read_text() == "first draft of the notes\n"
            assert (two.mnt / "notes.txt").read_text() == "version two\n"
            assert (base.mnt / "notes.txt").read_text() == "first draft of the notes\n"
            assert (m.mnt / "notes.txt").read_text() == "version three, live\n"
            assert not (one.mnt / "sub" / "two.txt").exists()
            assert (two.mnt / "sub" / "two.txt").read_text() == "only in two\n"
            assert "version two" in unit(two.mnt, "notes.txt", "content.txt")
            assert "first draft" in unit(one.mnt, "notes.txt", "content.txt")
            assert "| added | sub/two.txt |" in (two.mnt / ".review" / "SUMMARY.md").read_text()
            base_summary = (base.mnt / ".review" / "SUMMARY.md").read_text()
            assert "0 changed path(s)" in base_summary
            assert os.getxattr(two.mnt, "user.sw.world") == b"two"

            # One world goes; the other and the live mount stay.
            one.stop()
            assert not mounted_swfs(one.mnt)
            assert one.proc.returncode == 0
            assert (two.mnt / "notes.txt").read_text() == "version two\n"
            (m.mnt / "notes.txt").write_text("version four, live\n")
            assert (m.src / "notes.txt").read_text() == "version four, live\n"
            assert (two.mnt / "notes.txt").read_text() == "version two\n"
            swfs("sync", m.mnt)
            assert "version four" in unit(m.mnt, "notes.txt", "content.txt")
            # umount works as for any mount.
            swfs("umount", two.mnt)
            two.proc.wait(60)
            assert not mounted_swfs(two.mnt)
            assert two.proc.returncode == 0
        finally:
            for w in worlds:
                w.stop()
                lazy_unmount(w.mnt)
        assert (m.mnt / "notes.txt").read_text() == "version four, live\n"
