"""``swfs mount --staged`` where it used to differ from the plain mount:
``renameat2(RENAME_EXCHANGE)`` (it answered EINVAL), the access journal's
line ranges and the tab's excerpts of a staged edit (they were taken from
SRC's bytes), and a hard link that SRC has (a copy-up split it: a write
through one name left the other with SRC's bytes, and the commit left them
two files)."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mountutil import (
    errno_of,
    lazy_unmount,
    needs_fuse,
    start_mount,
    swfs,
    wait_until,
    workspace,
)

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]

RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(old: Path, new: Path, flags: int) -> None:
    if _libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def staged_paths(target: Path) -> dict[str, str]:
    out = json.loads(swfs("staged", target, "--json").stdout)
    return {row["path"]: row["status"] for row in out["staged"]}


def test_rename_exchange_in_a_staged_mount() -> None:
    def populate(src: Path) -> None:
        for name in ("a", "b", "c"):
            (src / f"{name}.txt").write_text(f"{name} from SRC\n")
        (src / "docs").mkdir()
        (src / "docs" / "inner.txt").write_text("inner\n")

    with workspace(["--staged"], populate=populate) as m:
        mnt, src = m.mnt, m.src
        ino_a, ino_b = os.stat(mnt / "a.txt").st_ino, os.stat(mnt / "b.txt").st_ino
        # Both staged (written through the mount first), then exchanged.
        (mnt / "a.txt").write_text("a staged\n")
        (mnt / "b.txt").write_text("b staged\n")
        renameat2(mnt / "a.txt", mnt / "b.txt", RENAME_EXCHANGE)
        assert (mnt / "a.txt").read_text() == "b staged\n"
        assert (mnt / "b.txt").read_text() == "a staged\n"
        # The names swapped their files, inode numbers included, as on a plain mount.
        assert (os.stat(mnt / "a.txt").st_ino, os.stat(mnt / "b.txt").st_ino) == (ino_b, ino_a)
        # One staged, one not: c.txt is still SRC's until the exchange copies it up.
        renameat2(mnt / "a.txt", mnt / "c.txt", RENAME_EXCHANGE)
        assert (mnt / "a.txt").read_text() == "c from SRC\n"
        assert (mnt / "c.txt").read_text() == "b staged\n"
        # A new file (only in the layer) with a file of SRC.
        (mnt / "new.txt").write_text("new\n")
        renameat2(mnt / "new.txt", mnt / "a.txt", RENAME_EXCHANGE)
        assert (mnt / "a.txt").read_text() == "new\n"
        assert (mnt / "new.txt").read_text() == "c from SRC\n"
        # What the plain mount refuses too, and a directory SRC has (as overlayfs).
        assert errno_of(lambda: renameat2(mnt / "a.txt", mnt / "nope", RENAME_EXCHANGE)) == (
            errno.ENOENT
        )
        assert errno_of(lambda: renameat2(mnt / "docs", mnt / "b.txt", RENAME_EXCHANGE)) == (
            errno.EXDEV
        )
        assert (mnt / "docs" / "inner.txt").read_text() == "inner\n"
        # SRC is untouched until the commit; the engine follows the names.
        for name in ("a", "b", "c"):
            assert (src / f"{name}.txt").read_text() == f"{name} from SRC\n"
        assert not (src / "new.txt").exists()
        swfs("sync", mnt)
        assert "b staged" in (mnt / ".parsed" / "c.txt" / "content.txt").read_text()
        assert "c from SRC" in (mnt / ".parsed" / "new.txt" / "content.txt").read_text()
        assert staged_paths(mnt) == {
            "a.txt": "modified",
            "b.txt": "modified",
            "c.txt": "modified",
            "new.txt": "added",
        }
        swfs("commit", mnt)
        got = {n: (src / n).read_text() for n in ("a.txt", "b.txt", "c.txt", "new.txt")}
        assert got == {
            "a.txt": "new\n",
            "b.txt": "a staged\n",
            "c.txt": "b staged\n",
            "new.txt": "c from SRC\n",
        }


def test_tab_excerpts_show_the_staged_bytes() -> None:
    def populate(src: Path) -> None:
        (src / "notes.txt").write_text("src line 1\nsrc line 2\n")

    staged = "".join(f"staged line {i}\n" for i in range(1, 11))
    with workspace(["--staged"], populate=populate) as m:
        src, mnt = m.src, m.mnt
        (mnt / "notes.txt").write_text(staged)
        # Mounted again (the layer stays in the store): the kernel has none
        # of the file's pages, so cat's reads reach the daemon and its journal.
        m.stop()
        lazy_unmount(mnt)
        m2 = start_mount(src, mnt, "--staged")
        try:
            swfs("sync", mnt)
            swfs("tab", "new", mnt)
            subprocess.run(["cat", "notes.txt"], cwd=mnt, capture_output=True, check=True)
            assert (src / "notes.txt").read_text() == "src line 1\nsrc line 2\n"

            def reads() -> str:
                return (mnt / ".tab" / "reads.md").read_text(encoding="utf-8")

            wait_until("the read in reads.md", lambda: "## notes.txt" in reads())
            text = reads()
            # The lines of the staged file that cat read: all ten, not SRC's two.
            assert "## notes.txt#lines=1-10\nby cat[" in text, text
            block = text.split("## notes.txt", 1)[1].split("\n## ", 1)[0]
            assert "staged line 1" in block
            assert "src line" not in block
            events = [
                json.loads(line)
                for line in swfs("log", mnt, "--json", "--kind", "read").stdout.splitlines()
            ]
            assert [e.get("lines") for e in events if e.get("path") == "notes.txt"][-1] == [1, 10]
        finally:
            m2.stop()
            lazy_unmount(mnt)


def test_a_hard_link_of_src_stays_one_file() -> None:
    def populate(src: Path) -> None:
        (src / "a.txt").write_text("shared v1\n")
        (src / "sub").mkdir()
        os.link(src / "a.txt", src / "sub" / "b.txt")
        (src / "alone.txt").write_text("alone\n")

    with workspace(["--staged"], populate=populate) as m:
        mnt, src = m.mnt, m.src
        src_ino = os.stat(src / "a.txt").st_ino
        # A write through one name is seen through the other, in the mount
        # and in .parsed (the engine reads the staged bytes of both names).
        with open(mnt / "a.txt", "r+") as f:
            f.write("shared v2")
        assert (mnt / "sub" / "b.txt").read_text() == "shared v2\n"
        a, b = os.stat(mnt / "a.txt"), os.stat(mnt / "sub" / "b.txt")
        assert a.st_ino == b.st_ino
        assert a.st_nlink == 2
        swfs("sync", mnt)
        wait_until(
            ".parsed of the other name",
            lambda: "shared v2" in (mnt / ".parsed" / "sub" / "b.txt" / "content.txt").read_text(),
        )
        assert os.getxattr(mnt / "a.txt", "user.sw.hash") == os.getxattr(
            mnt / "sub" / "b.txt", "user.sw.hash"
        )
        # And the other way round.
        with open(mnt / "sub" / "b.txt", "a") as f:
            f.write("appended through b\n")
        assert (mnt / "a.txt").read_text() == "shared v2\nappended through b\n"
        # SRC keeps its one file with the old bytes until the commit.
        assert (src / "a.txt").read_text() == "shared v1\n"
        assert os.stat(src / "sub" / "b.txt").st_ino == src_ino
        assert staged_paths(mnt) == {"a.txt": "modified", "sub/b.txt": "modified"}
        swfs("commit", mnt)
        sa, sb = os.stat(src / "a.txt"), os.stat(src / "sub" / "b.txt")
        assert (sa.st_ino, sa.st_nlink) == (sb.st_ino, 2)
        assert (src / "sub" / "b.txt").read_text() == "shared v2\nappended through b\n"
        assert (src / "alone.txt").read_text() == "alone\n"
        assert staged_paths(mnt) == {}
