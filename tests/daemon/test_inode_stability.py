"""Inode numbers through the mount stay what they were, as on the backing file
system: across a rename over an existing entry (pjdfstest rename/09.t and
rename/10.t), and after the kernel has forgotten the node and looks it up
again.  And chown(f, -1, -1) moves the change time, as ext4 does."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

TYPES = ("regular", "dir", "fifo", "socket", "symlink")


@pytest.fixture(scope="module")
def mounted() -> Iterator[Mount]:
    with workspace() as m:
        yield m


def make(path: Path, kind: str) -> None:
    if kind == "regular":
        path.write_bytes(b"x\n")
    elif kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
    elif kind == "symlink":
        path.symlink_to("target-of-" + path.name)
    else:  # pragma: no cover - a typo in the test
        raise AssertionError(kind)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()


def forget_all() -> None:
    """Have the kernel drop every unused dentry and inode (FUSE FORGET)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("2\n")


_serial = iter(range(10**6))


@pytest.fixture
def dirs(mounted: Mount) -> tuple[Path, Path]:
    base = mounted.mnt / f"t{next(_serial)}"
    base.mkdir()
    (base / "from").mkdir()
    (base / "to").mkdir()
    return base / "from", base / "to"


@pytest.mark.parametrize("kind", TYPES)
def test_a_rename_over_an_entry_keeps_the_inode_number(dirs: tuple[Path, Path], kind: str) -> None:
    a_dir, b_dir = dirs
    a, b = a_dir / "n2", b_dir / "n3"
    make(a, kind)
    ino = os.lstat(a).st_ino
    for over in ("none", *TYPES):
        if over != "none":
            if kind == "dir" and over != "dir":
                continue  # rename(dir, non-dir) is ENOTDIR
            if kind != "dir" and over == "dir":
                continue  # rename(non-dir, dir) is EISDIR
            make(b, over)
        os.rename(a, b)
        assert not os.path.lexists(a)
        assert os.lstat(b).st_ino == ino, f"{kind} over {over}"
        os.rename(b, a)
        assert os.lstat(a).st_ino == ino, f"{kind} over {over}, back"
        assert not os.path.lexists(b)


def test_the_inode_number_survives_the_kernel_forgetting_it(
    mounted: Mount, dirs: tuple[Path, Path]
) -> None:
    if os.geteuid() != 0:
        pytest.skip("dropping the kernel's caches needs root")
    a_dir, b_dir = dirs
    a, b = a_dir / "file", b_dir / "file"
    make(a, "regular")
    make(b, "fifo")
    ino = os.lstat(a).st_ino
    d_ino = os.lstat(a_dir).st_ino
    os.rename(a, b)
    forget_all()
    assert os.lstat(b).st_ino == ino
    assert os.lstat(a_dir).st_ino == d_ino
    # Renamed behind the mount while the kernel holds nothing of it.
    forget_all()
    rel = b.relative_to(mounted.mnt)
    os.rename(mounted.src / rel, mounted.src / rel.parent / "moved")
    forget_all()
    assert os.lstat(b_dir / "moved").st_ino == ino
    # The number is the backing file's own, so it never depends on the
    # daemon's memory of the node.
    assert ino == os.lstat(mounted.src / rel.parent / "moved").st_ino


def test_hard_links_share_one_number(dirs: tuple[Path, Path]) -> None:
    a_dir, b_dir = dirs
    (a_dir / "f").write_text("one\n")
    os.link(a_dir / "f", b_dir / "g")
    assert os.lstat(a_dir / "f").st_ino == os.lstat(b_dir / "g").st_ino
    assert os.lstat(a_dir / "f").st_nlink == 2


def test_generated_trees_do_not_collide_with_native_numbers(mounted: Mount) -> None:
    (mounted.mnt / "notes.txt").write_text("some text\n")
    generated = {".parsed", ".review", ".versions"}
    native = {
        os.lstat(os.path.join(d, n)).st_ino
        for d, dirs, files in os.walk(mounted.mnt)
        if os.path.relpath(d, mounted.mnt).split(os.sep)[0] not in generated
        for n in dirs + files
        if not (d == str(mounted.mnt) and n in generated)
    }
    assert native
    synthetic = {os.lstat(mounted.mnt / name).st_ino for name in generated}
    synthetic.add(os.lstat(mounted.mnt / ".parsed" / "notes.txt").st_ino)
    assert not native & synthetic


def _after_a_clock_tick(ns: int) -> None:
    """Until the clock file times are taken from has moved past ``ns`` (it
    ticks coarsely: two calls within a tick get the same time)."""
    deadline = time.monotonic() + 10
    while time.time_ns() <= ns + 20_000_000:
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.parametrize("kind", ["regular", "dir", "fifo", "symlink"])
def test_chown_to_the_same_owner_updates_ctime(dirs: tuple[Path, Path], kind: str) -> None:
    path = dirs[0] / "c"
    make(path, kind)
    before = os.lstat(path)
    _after_a_clock_tick(before.st_ctime_ns)
    os.chown(path, -1, -1, follow_symlinks=False)
    after = os.lstat(path)
    assert after.st_ctime_ns > before.st_ctime_ns
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)


def test_a_directory_made_again_under_a_removed_ones_number_works(
    dirs: tuple[Path, Path],
) -> None:
    """A directory removed while a process sits in it lives on in the kernel;
    the backing file system may give the next new directory its inode number.
    That new directory must not be taken for the removed one (mkdir inside it
    failed with ENOENT, as in a dead directory)."""
    base = dirs[0]
    here = os.getcwd()
    reused = 0
    try:
        for _ in range(50):
            d = base / "d"
            d.mkdir()
            os.chdir(d)  # pins the kernel's inode; the daemon holds nothing of it
            ino = os.stat(".").st_ino
            d.rmdir()
            d.mkdir()
            reused += os.stat(d).st_ino == ino
            (d / "e").mkdir()
            (d / "e" / "f").write_text("x")
            assert (d / "e" / "f").read_text() == "x"
            os.chdir(here)
            (d / "e" / "f").unlink()
            (d / "e").rmdir()
            d.rmdir()
    finally:
        os.chdir(here)
    if not reused:
        pytest.skip("the backing file system never reused an inode number here")
