"""The pyfuse3 fork (vendor/pyfuse3): what it adds to pyfuse3 3.5.0, through
a tiny Operations subclass mounted for real (tests/pyfuse3fork/tinyfs.py),
each request that reaches it logged."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyfuse3
import pytest

from tests.conftest import fuse_available
from tests.mountutil import REPO, lazy_unmount, wait_until, workdir

FORK = hasattr(pyfuse3, "immediate_available")  # the one probe of this file: is it the fork?

pytestmark = [
    pytest.mark.skipif(not FORK, reason="stock pyfuse3 installed, not vendor/pyfuse3"),
    pytest.mark.timeout(300),
]
needs_fuse = pytest.mark.skipif(fuse_available() is not None, reason="no FUSE here")

BACKING = b"backing file bytes\n"


def test_fork_declares_its_additions() -> None:
    fi = pyfuse3.FileInfo(fh=3, cache_readdir=True, noflush=True, backing_id=5)
    assert (fi.fh, fi.cache_readdir, fi.noflush, fi.backing_id) == (3, True, True, 5)
    fi.cache_readdir = False
    fi.noflush = False
    assert not fi.cache_readdir
    assert not fi.noflush
    assert pyfuse3.FileInfo().backing_id == 0
    for probe in ("immediate_available", "fallocate_available", "lseek_available"):
        assert getattr(pyfuse3, probe)() is True, probe
    assert pyfuse3.passthrough_available() in (True, False)
    assert pyfuse3.passthrough_active() is False  # nothing mounted in this process
    with pytest.raises(OSError, match="not active") as exc:
        pyfuse3.backing_open(0)  # no session: refused, not a crash
    assert exc.value.errno == errno.EOPNOTSUPP
    assert "+swfs" in pyfuse3.__version__


def test_the_installed_build_is_the_fork_in_the_repository() -> None:
    """``make install`` rebuilds the fork when its files change; a version
    bumped there and not installed is a stale build (run ``make install``)."""
    import tomllib

    project = tomllib.loads((REPO / "vendor" / "pyfuse3" / "pyproject.toml").read_text())
    assert pyfuse3.__version__ == project["project"]["version"]


@dataclass
class Tiny:
    mnt: Path
    log: Path

    def calls(self, name: str) -> list[list[object]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [c for c in map(json.loads, lines) if c[0] == name]


@pytest.fixture
def tiny() -> Iterator[Tiny]:
    d = workdir()
    mnt, log, backing = d / "mnt", d / "calls.jsonl", d / "backing"
    mnt.mkdir()
    backing.write_bytes(BACKING)
    with (d / "daemon.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.pyfuse3fork.tinyfs", str(mnt), str(log), str(backing)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError((d / "daemon.log").read_text())
            return os.path.ismount(mnt)

        wait_until("the tiny mount", up, timeout=120)
        yield Tiny(mnt, log)
    finally:
        if proc.poll() is None:
            proc.terminate()
        lazy_unmount(mnt)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        if not os.path.ismount(mnt):
            subprocess.run(["rm", "-rf", str(d)], check=False)


def read_closed(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read()


@needs_fuse
def test_opendir_fileinfo_and_cache_readdir(tiny: Tiny) -> None:
    """opendir returns a FileInfo; with cache_readdir and keep_cache the
    kernel lists ``d`` from its cache the second time (no READDIR), while
    the root (keep_cache only) is read afresh at every listing."""
    for _ in range(3):
        assert sorted(os.listdir(tiny.mnt / "d")) == ["a", "b"]
        assert sorted(os.listdir(tiny.mnt)) == ["d", "noflush", "plain", "pt"]
    dir_ino = pyfuse3.ROOT_INODE + 1
    in_d = [c for c in tiny.calls("readdir") if c[1] == dir_ino]
    in_root = [c for c in tiny.calls("readdir") if c[1] == pyfuse3.ROOT_INODE]
    assert len([c for c in tiny.calls("opendir") if c[1] == dir_ino]) == 3
    assert len([c for c in in_d if c[2] == 0]) == 1, in_d  # filled once, then kept
    assert len([c for c in in_root if c[2] == 0]) == 3, in_root


@needs_fuse
def test_noflush_skips_the_flush_of_a_reader(tiny: Tiny) -> None:
    plain = pyfuse3.ROOT_INODE + 2
    noflush = pyfuse3.ROOT_INODE + 3
    assert read_closed(tiny.mnt / "plain") == b"hello\n"
    assert read_closed(tiny.mnt / "noflush") == b"hello\n"
    wait_until("both releases", lambda: len(tiny.calls("release")) >= 2)
    opens = {c[1]: c[2] for c in tiny.calls("open")}
    assert opens == {plain: False, noflush: True}
    flushed = [c[1] for c in tiny.calls("flush")]
    assert flushed == [plain]  # the plain reader's close flushed, the noflush one did not


@needs_fuse
def test_a_handler_answers_at_once_or_hands_back_an_awaitable(tiny: Tiny) -> None:
    """A plain handler's reply is answered at once, its awaitable awaited,
    its FUSEError answered with its errno; the mount stays up."""
    plain = tiny.mnt / "plain"
    for _ in range(2):
        assert os.getxattr(plain, "user.now") == b"now"
        assert os.getxattr(plain, "user.later") == b"later"
        with pytest.raises(OSError, match="No data available") as exc:
            os.getxattr(plain, "user.absent")
        assert exc.value.errno == errno.ENODATA
    ino = pyfuse3.ROOT_INODE + 2
    assert (
        tiny.calls("getxattr") == [["getxattr", ino, "at once"], ["getxattr", ino, "awaited"]] * 2
    )


@needs_fuse
def test_setxattr_flags_ask_a_getxattr_that_answers_at_once_or_later(tiny: Tiny) -> None:
    """XATTR_CREATE and XATTR_REPLACE make the binding ask getxattr first,
    whether that handler answers at once or hands back an awaitable (a plain
    reply once crashed the session loop: 'bytes can't be used in await')."""
    plain = tiny.mnt / "plain"
    os.setxattr(plain, "user.now", b"1", os.XATTR_REPLACE)  # exists, answered at once
    os.setxattr(plain, "user.later", b"2", os.XATTR_REPLACE)  # exists, awaited
    with pytest.raises(FileExistsError) as exc:
        os.setxattr(plain, "user.now", b"3", os.XATTR_CREATE)
    assert exc.value.errno == errno.EEXIST
    with pytest.raises(FileExistsError) as exc:
        os.setxattr(plain, "user.later", b"4", os.XATTR_CREATE)
    assert exc.value.errno == errno.EEXIST
    os.setxattr(plain, "user.absent", b"5", os.XATTR_CREATE)
    with pytest.raises(OSError, match="No data available") as exc:
        os.setxattr(plain, "user.absent", b"6", os.XATTR_REPLACE)
    assert exc.value.errno == errno.ENODATA
    ino = pyfuse3.ROOT_INODE + 2
    assert tiny.calls("setxattr") == [
        ["setxattr", ino, "user.now", "1"],
        ["setxattr", ino, "user.later", "2"],
        ["setxattr", ino, "user.absent", "5"],
    ]
    assert os.getxattr(plain, "user.now") == b"now"  # the mount is still up


@needs_fuse
def test_fallocate_lseek_tmpfile_reach_the_operations(tiny: Tiny) -> None:
    fd = os.open(tiny.mnt / "plain", os.O_RDWR)
    try:
        os.posix_fallocate(fd, 4096, 8192)
        assert os.lseek(fd, 100, os.SEEK_DATA) == 107  # our answer, not the kernel's
    finally:
        os.close(fd)
    fh = pyfuse3.ROOT_INODE + 2
    assert tiny.calls("fallocate") == [["fallocate", fh, 0, 4096, 8192]]
    assert tiny.calls("lseek") == [["lseek", fh, 100, os.SEEK_DATA]]
    if not pyfuse3.tmpfile_available():
        pytest.skip("built against a libfuse without tmpfile (< 3.17)")
    fd = os.open(tiny.mnt, os.O_TMPFILE | os.O_RDWR, 0o600)
    os.close(fd)
    assert tiny.calls("tmpfile") == [["tmpfile", pyfuse3.ROOT_INODE, True]]


@needs_fuse
def test_passthrough_reads_the_backing_file(tiny: Tiny) -> None:
    """An open whose reply carries a backing_id is read by the kernel from
    the backing file: its bytes, and no READ reaches the daemon (whose READ
    would answer b"D"s)."""
    if not pyfuse3.passthrough_available():
        pytest.skip("built against a libfuse without passthrough (< 3.17)")
    got = read_closed(tiny.mnt / "pt")
    pt = pyfuse3.ROOT_INODE + 4
    (opened,) = [c for c in tiny.calls("open") if c[1] == pt]
    if opened[3] == 0:
        pytest.skip("the kernel did not offer FUSE passthrough (needs Linux 6.9 and root)")
    assert got == BACKING
    assert not [c for c in tiny.calls("read") if c[1] == pt]
