"""A ``--staged`` mount at paths near PATH_MAX below its root, with SRC's own
path long too: files and folders made, read, stat'ed, renamed and removed at
that depth, then ``swfs staged``, ``swfs commit PATH`` (of another path and
of the deep one) and ``swfs discard``, SRC checked byte for byte after each.
The paths are walked one component at a time through descriptors (an
absolute path string of them would be too long)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd.launch import mounted_swfs
from tests import deeppaths as dp
from tests.mountutil import (
    Mount,
    errno_of,
    lazy_unmount,
    needs_fuse,
    start_mount,
    swfs,
    wait_until,
    workdir,
)

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]

SKIP = frozenset({".swfs"})
# The generated trees of the mount root.
GENERATED = frozenset({".parsed", ".review", ".versions", ".search", ".render", ".tab"})
# Folders of SRC's, 3,700 bytes below the root; files in them.
SRC_DIRS = dp.deep_dirs(3700)
SRC_FILE = "/".join(SRC_DIRS) + "/from-src.txt"


def populate(src: Path) -> None:
    (src / "other.txt").write_text("other\n")
    dp.makedirs(src, SRC_DIRS)
    dp.write(src, SRC_FILE, b"from src\n")
    dp.write(src, "/".join(SRC_DIRS) + "/gone.txt", b"to be removed\n")


@contextlib.contextmanager
def deep_staged_workspace() -> Iterator[Mount]:
    """SRC (its own path about 1,200 bytes long) filled by ``populate``,
    mounted ``--staged``; always unmounted, its daemon reaped.  The store
    sits beside it (its control socket's path must stay short)."""
    root = workdir()
    src, mnt, store = dp.long_root(root, 1200) / "src", root / "mnt", root / "store"
    src.mkdir()
    mnt.mkdir()
    store.mkdir()
    src.chmod(0o755)
    populate(src)
    m: Mount | None = None
    try:
        m = start_mount(src, mnt, "--staged", "--store", str(store))
        swfs("sync", mnt, "--timeout", "300")
        yield m
    finally:
        if m is not None:
            m.stop()
        lazy_unmount(mnt)
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


def staged(mnt: Path) -> dict[str, str]:
    out = json.loads(swfs("staged", mnt, "--json").stdout)
    return {row["path"]: row["status"] for row in out["staged"]}


def create(root: Path, rel: str, data: bytes) -> None:
    """O_CREAT | O_EXCL, as ``creat`` of a new name does."""
    parent, name = dp.split(rel)
    with dp.opened(root, parent, os.O_PATH | os.O_DIRECTORY) as pfd:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=pfd)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def test_deep_paths_on_a_staged_mount_stage_commit_and_discard() -> None:
    with deep_staged_workspace() as m:
        src, mnt = m.src, m.mnt
        before = dp.tree(src, SKIP)
        deep = "/".join(SRC_DIRS)
        assert dp.read(mnt, SRC_FILE) == b"from src\n"

        # A file of SRC's written at depth (copied up), one removed.
        dp.write(mnt, SRC_FILE, b"changed\n")
        with dp.opened(mnt, deep, os.O_PATH | os.O_DIRECTORY) as dfd:
            os.unlink("gone.txt", dir_fd=dfd)
            assert errno_of(lambda: os.stat("gone.txt", dir_fd=dfd)) == errno.ENOENT
        # New folders and files up to 4,095 bytes below the mount root.
        new_dir = f"{deep}/{'n' * (4095 - len(deep) - 2 - 200)}"  # then a 200-byte name
        dp.makedirs(mnt, new_dir.split("/"))
        longest = f"{new_dir}/{'f' * (4095 - len(new_dir) - 1)}"
        assert len(longest.encode()) == 4095
        create(mnt, longest, b"longest\n")
        assert dp.lstat(mnt, longest).st_size == len(b"longest\n")
        assert dp.read(mnt, longest) == b"longest\n"
        # As one path from the root: 4,095 bytes resolve, one more is too
        # long (PATH_MAX counts the NUL), as on any file system.
        with dp.opened(mnt, "", os.O_PATH | os.O_DIRECTORY) as rfd:
            assert os.stat(longest, dir_fd=rfd).st_size == len(b"longest\n")
            flags = os.O_WRONLY | os.O_CREAT
            assert errno_of(lambda: os.open(longest + "x", flags, dir_fd=rfd)) == errno.ENAMETOOLONG
        # Removed, then made again under the same name (once EISDIR).
        with dp.opened(mnt, new_dir, os.O_PATH | os.O_DIRECTORY) as dfd:
            name = dp.split(longest)[1]
            os.unlink(name, dir_fd=dfd)
            assert errno_of(lambda: os.stat(name, dir_fd=dfd)) == errno.ENOENT
        create(mnt, longest, b"again\n")
        # Renamed at depth, and a folder made and removed there.
        moved = f"{new_dir}/{'m' * (4095 - len(new_dir) - 1)}"
        with dp.opened(mnt, new_dir, os.O_PATH | os.O_DIRECTORY) as dfd:
            os.rename(dp.split(longest)[1], dp.split(moved)[1], src_dir_fd=dfd, dst_dir_fd=dfd)
            assert errno_of(lambda: os.stat(dp.split(longest)[1], dir_fd=dfd)) == errno.ENOENT
            os.mkdir("scratch", dir_fd=dfd)
            os.rmdir("scratch", dir_fd=dfd)
        assert dp.read(mnt, moved) == b"again\n"
        assert stat.S_ISREG(dp.lstat(mnt, moved).st_mode)
        (mnt / "other.txt").write_text("other, staged\n")

        # SRC untouched; the staged list names every change.
        assert dp.tree(src, SKIP) == before
        assert staged(mnt) == {
            "other.txt": "modified",
            SRC_FILE: "modified",
            f"{deep}/gone.txt": "deleted",
            new_dir: "added",
            moved: "added",
        }

        # Commit another path, then the deep one, each alone.
        swfs("commit", mnt, "other.txt")
        expected = dict(before)
        expected["other.txt"] = b"other, staged\n"
        assert dp.tree(src, SKIP) == expected
        swfs("commit", mnt, SRC_FILE)
        expected[SRC_FILE] = b"changed\n"
        assert dp.tree(src, SKIP) == expected
        assert set(staged(mnt)) == {f"{deep}/gone.txt", new_dir, moved}

        # Discard the rest: SRC as it was, the mount shows SRC again.
        swfs("discard", mnt)
        assert staged(mnt) == {}
        assert dp.tree(src, SKIP) == expected
        wait_until("the mount to show SRC", lambda: dp.tree(mnt, GENERATED) == expected, 120)
        assert dp.read(mnt, f"{deep}/gone.txt") == b"to be removed\n"


def test_deep_paths_made_and_removed_leave_nothing_staged() -> None:
    """pjdfstest's way: deep folders and files made, then all removed; the
    layer holds nothing afterwards, and a commit of a deep deletion removes
    it from SRC."""
    with deep_staged_workspace() as m:
        src, mnt = m.src, m.mnt
        before = dp.tree(src, SKIP)
        parts = dp.deep_dirs(4095 - 1 - 255, comp="x" * 255)
        dp.makedirs(mnt, parts)
        rel = "/".join(parts) + "/" + "y" * 255
        assert len(rel.encode()) == 4095
        create(mnt, rel, b"y\n")
        assert dp.read(mnt, rel) == b"y\n"
        with dp.opened(mnt, "/".join(parts), os.O_PATH | os.O_DIRECTORY) as dfd:
            os.unlink("y" * 255, dir_fd=dfd)
        for i in range(len(parts), 0, -1):
            with dp.opened(mnt, "/".join(parts[: i - 1]), os.O_PATH | os.O_DIRECTORY) as pfd:
                os.rmdir(parts[i - 1], dir_fd=pfd)
        assert staged(mnt) == {}
        assert dp.listdir(mnt.parent / "store" / "staged" / "upper", "") == []
        assert dp.tree(src, SKIP) == before

        # A deep file of SRC's removed through the mount, committed.
        with dp.opened(mnt, "/".join(SRC_DIRS), os.O_PATH | os.O_DIRECTORY) as dfd:
            os.unlink("from-src.txt", dir_fd=dfd)
        assert staged(mnt) == {SRC_FILE: "deleted"}
        swfs("commit", mnt)
        expected = dict(before)
        del expected[SRC_FILE]
        assert dp.tree(src, SKIP) == expected
        assert staged(mnt) == {}
