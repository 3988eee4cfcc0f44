"""POSIX corners, each checked against the same operation on a plain
directory of the backing filesystem (a sibling of SRC, not SRC): NAME_MAX,
PATH_MAX, sticky directories, setuid/setgid clearing, ctime updates,
permissions of a non-owner, hard links across directories, FIFOs."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, errno_of, needs_fuse, run_as, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120), needs_fuse]


@pytest.fixture(scope="module")
def mounted() -> Iterator[Mount]:
    with workspace() as m:
        (m.root / "native").mkdir()
        os.chmod(m.root / "native", 0o755)
        yield m


_serial = iter(range(10**6))


@pytest.fixture
def pair(mounted: Mount) -> tuple[Path, Path]:
    """A fresh directory in the mount and its twin on the backing filesystem."""
    n = f"t{next(_serial)}"
    a, b = mounted.mnt / n, mounted.root / "native" / n
    a.mkdir()
    b.mkdir()
    os.chmod(a, 0o755)
    os.chmod(b, 0o755)
    return a, b


@pytest.fixture
def ids() -> tuple[int, int]:
    got = unprivileged_ids()
    if got is None:
        pytest.skip("cannot create an unprivileged user here")
    return got


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def both(pair: tuple[Path, Path], fn: Callable[[Path], object]) -> tuple[int, int]:
    return errno_of(lambda: fn(pair[0])), errno_of(lambda: fn(pair[1]))


def test_name_max(pair: tuple[Path, Path]) -> None:
    ok, long = "n" * 255, "n" * 256
    for make in (
        lambda d, n: (d / n).write_bytes(b"x"),
        lambda d, n: (d / f"{n}").mkdir() if not (d / n).exists() else None,
        lambda d, n: os.symlink("target", d / ("s" + n[1:])),
    ):
        assert both(pair, lambda d, make=make: make(d, ok)) == (0, 0)
        assert both(pair, lambda d, make=make: make(d, long)) == (
            errno.ENAMETOOLONG,
            errno.ENAMETOOLONG,
        )
    # Multi-byte: 85 three-byte characters are 255 bytes; one more is too long.
    euro = "€" * 85
    assert both(pair, lambda d: (d / euro).write_bytes(b"y")) == (0, 0)
    assert both(pair, lambda d: (d / (euro + "x")).write_bytes(b"y")) == (
        errno.ENAMETOOLONG,
        errno.ENAMETOOLONG,
    )
    assert both(pair, lambda d: os.rename(d / euro, d / long)) == (
        errno.ENAMETOOLONG,
        errno.ENAMETOOLONG,
    )
    assert sorted(os.listdir(pair[0])) == sorted(os.listdir(pair[1]))


def test_path_max_relative_to_a_directory_fd(pair: tuple[Path, Path]) -> None:
    """Paths of 4095 bytes resolve; 4096 (PATH_MAX counts the NUL) do not."""
    comp = "p" * 200
    depth = 20  # 20 * 201 = 4020 bytes of directories
    results = []
    for base in pair:
        fd = bfd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        try:
            rel = "/".join([comp] * depth)
            cur = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            for _ in range(depth):
                os.mkdir(comp, dir_fd=cur)
                nxt = os.open(comp, os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
                os.close(cur)
                cur = nxt
            os.close(cur)
            fits = rel + "/" + "f" * (4095 - len(rel) - 1)
            over = rel + "/" + "f" * (4096 - len(rel) - 1)
            assert len(fits.encode()) == 4095
            got = []
            for path in (fits, over):
                got.append(
                    errno_of(
                        lambda path=path, bfd=bfd: os.close(
                            os.open(path, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=bfd)
                        )
                    )
                )
                got.append(errno_of(lambda path=path, bfd=bfd: os.stat(path, dir_fd=bfd)))
            results.append(got)
        finally:
            os.close(fd)
    assert results[0] == results[1] == [0, 0, errno.ENAMETOOLONG, errno.ENAMETOOLONG]


def test_sticky_directory(pair: tuple[Path, Path], ids: tuple[int, int]) -> None:
    for d in pair:
        os.chmod(d, 0o1777)
        (d / "roots").write_text("root's file\n")
        os.chmod(d / "roots", 0o666)
    for d in pair:
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o1777
        # Writable by all, yet a non-owner may neither unlink nor rename it away.
        assert run_as(ids, lambda d=d: os.unlink(d / "roots")) == errno.EPERM, d
        assert run_as(ids, lambda d=d: os.rename(d / "roots", d / "stolen")) == errno.EPERM, d
        assert run_as(ids, lambda d=d: (d / "mine").write_text("x")) == 0, d
        assert run_as(ids, lambda d=d: os.unlink(d / "mine")) == 0, d
        assert (d / "roots").read_text() == "root's file\n"


def test_setuid_setgid_cleared_on_write_by_non_owner(
    pair: tuple[Path, Path], ids: tuple[int, int]
) -> None:
    modes = []
    for d in pair:
        f = d / "tool"
        f.write_bytes(b"#!/bin/sh\n")
        os.chmod(f, 0o6777)
        assert run_as(ids, lambda f=f: append(f, b"echo hi\n")) == 0
        modes.append(stat.S_IMODE(os.stat(f).st_mode))
        assert f.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert modes[0] == modes[1], [oct(m) for m in modes]
    assert not modes[0] & (stat.S_ISUID | stat.S_ISGID)


def test_setuid_setgid_cleared_on_truncating_open(
    pair: tuple[Path, Path], ids: tuple[int, int], mounted: Mount
) -> None:
    """An O_TRUNC open by another user clears the set-id bits, as natively,
    and stat shows it as soon as the file is closed."""
    modes = []
    for d in pair:
        f = d / "tool"
        f.write_bytes(b"#!/bin/sh\n")
        os.chmod(f, 0o6777)
        assert run_as(ids, lambda f=f: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))) == 0
        modes.append(stat.S_IMODE(os.stat(f).st_mode))
        assert f.read_bytes() == b""
    backing = stat.S_IMODE(os.stat(mounted.src / pair[0].name / "tool").st_mode)
    assert modes[0] == modes[1] == backing, [oct(m) for m in (*modes, backing)]
    assert not modes[0] & (stat.S_ISUID | stat.S_ISGID)


def test_setuid_setgid_cleared_on_chown(pair: tuple[Path, Path], ids: tuple[int, int]) -> None:
    modes = []
    for d in pair:
        f = d / "tool"
        f.write_bytes(b"#!/bin/sh\n")
        os.chmod(f, 0o6755)
        os.chown(f, ids[0], ids[1])
        st_ = os.stat(f)
        assert (st_.st_uid, st_.st_gid) == ids
        modes.append(stat.S_IMODE(st_.st_mode))
    assert modes[0] == modes[1], [oct(m) for m in modes]
    assert not modes[0] & stat.S_ISUID


def test_ctime_moves_on_chmod_link_rename_write(pair: tuple[Path, Path]) -> None:
    for d in pair:
        (d / "f").write_text("one\n")
    steps: list[tuple[str, str, str, Callable[[Path], object]]] = [
        ("chmod", "f", "f", lambda d: os.chmod(d / "f", 0o600)),
        ("link", "f", "g", lambda d: os.link(d / "f", d / "g")),
        ("rename", "f", "h", lambda d: os.rename(d / "f", d / "h")),
        ("write", "h", "g", lambda d: append(d / "h", b"two\n")),
        ("truncate", "h", "h", lambda d: os.truncate(d / "h", 1)),
        ("utime", "g", "h", lambda d: os.utime(d / "h", (1, 1))),
        ("chown", "h", "h", lambda d: os.chown(d / "h", 0, 0)),
        ("setxattr", "h", "h", lambda d: os.setxattr(d / "h", "user.x", b"1")),
    ]
    for what, name_before, name_after, fn in steps:
        before = [os.stat(d / name_before).st_ctime_ns for d in pair]
        time.sleep(0.03)  # > the coarse clock's tick
        for d in pair:
            fn(d)
        after = [os.stat(d / name_after).st_ctime_ns for d in pair]
        moved = [a > b for a, b in zip(after, before, strict=True)]
        assert moved == [True, True], f"{what}: ctime moved (mount, native) = {moved}"


def test_non_owner_permissions(pair: tuple[Path, Path], ids: tuple[int, int]) -> None:
    for d in pair:
        (d / "private").write_text("secret\n")
        os.chmod(d / "private", 0o600)
        (d / "readonly").write_text("public\n")
        os.chmod(d / "readonly", 0o644)
        (d / "closed").mkdir()
        os.chmod(d / "closed", 0o700)
        (d / "closed" / "inside").write_text("x")
    checks: list[Callable[[Path], object]] = [
        lambda d: (d / "private").read_bytes(),
        lambda d: append(d / "readonly", b""),
        lambda d: os.truncate(d / "readonly", 0),
        lambda d: os.listdir(d / "closed"),
        lambda d: os.stat(d / "closed" / "inside"),
        lambda d: (d / "new").write_text("x"),  # d is 0755 root
        lambda d: os.chmod(d / "readonly", 0o666),
        lambda d: os.utime(d / "readonly", (1, 1)),
        lambda d: os.setxattr(d / "readonly", "user.k", b"v"),
        lambda d: os.unlink(d / "readonly"),
        lambda d: (d / "readonly").read_bytes(),
    ]
    got = [[run_as(ids, lambda fn=fn, d=d: fn(d)) for fn in checks] for d in pair]
    assert got[0] == got[1]
    assert got[0] == [
        errno.EACCES,
        errno.EACCES,
        errno.EACCES,
        errno.EACCES,
        errno.EACCES,
        errno.EACCES,
        errno.EPERM,
        errno.EPERM,
        errno.EACCES,
        errno.EACCES,
        0,
    ]


def test_hard_links_across_directories(pair: tuple[Path, Path]) -> None:
    m = pair[0]
    (m / "a").mkdir()
    (m / "b").mkdir()
    (m / "a" / "f").write_text("v1\n")
    os.link(m / "a" / "f", m / "b" / "g")
    assert os.stat(m / "a" / "f").st_nlink == 2
    assert os.stat(m / "a" / "f").st_ino == os.stat(m / "b" / "g").st_ino
    append(m / "b" / "g", b"v2\n")
    assert (m / "a" / "f").read_text() == "v1\nv2\n"
    os.unlink(m / "a" / "f")
    assert (m / "b" / "g").read_text() == "v1\nv2\n"
    assert os.stat(m / "b" / "g").st_nlink == 1
    os.rename(m / "b" / "g", m / "a" / "back")
    assert (m / "a" / "back").read_text() == "v1\nv2\n"


def test_mkfifo_works_and_is_never_hashed(pair: tuple[Path, Path], mounted: Mount) -> None:
    m = pair[0]
    os.mkfifo(m / "pipe", 0o644)
    assert stat.S_ISFIFO(os.stat(m / "pipe").st_mode)
    assert stat.S_ISFIFO(os.stat(pair[1].parent.parent / "src" / m.name / "pipe").st_mode)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append((m / "pipe").read_bytes()))
    reader.start()
    (m / "pipe").write_bytes(b"through the fifo\n")
    reader.join(10)
    assert got == [b"through the fifo\n"]
    time.sleep(2.5)  # two rescans: a scanner that opened the FIFO would hang here
    assert mounted.alive()
    swfs("sync", mounted.mnt, timeout=30)
    swfs("status", mounted.mnt, timeout=30)
    assert not (mounted.mnt / ".versions" / m.name / "pipe").exists()
    assert (mounted.mnt / "keep-alive").write_text("ok\n") == 3


def test_hard_links_stay_one_file_through_history_keeping(pair: tuple[Path, Path]) -> None:
    """Versions are kept by hard link and copy-before-write: the user's own
    hard links must still be one file, with native link counts."""

    def scenario(d: Path) -> list[object]:
        (d / "b").write_bytes(b"bee one\n")
        os.link(d / "b", d / "c")
        os.link(d / "b", d / "e")
        (d / "a").write_bytes(b"replacement\n")
        os.rename(d / "a", d / "b")  # b's old inode lives on as c and e
        with open(d / "c", "r+b") as f:  # in place
            f.write(b"SEE")
        append(d / "e", b"more\n")
        os.unlink(d / "c")
        with open(d / "e", "r+b") as f:
            f.write(b"E")
        return [
            (d / "e").read_bytes(),
            (d / "b").read_bytes(),
            os.stat(d / "e").st_nlink,
            os.stat(d / "b").st_nlink,
        ]

    assert scenario(pair[0]) == scenario(pair[1])


def test_background_reads_keep_the_access_time_a_user_set(
    pair: tuple[Path, Path], mounted: Mount
) -> None:
    """A write queues a parse and a read queues the journal's line count; both
    read the file later, in the background.  An access time set in between
    (utimens, ``touch -a``) must stay what the user set, as natively."""
    a, _ = pair
    old = 1_000_000_001_000_000_123  # long before mtime: relatime would move it
    written, read = a / "written.txt", a / "read.txt"
    read.write_text("one\ntwo\nthree\n")
    swfs("sync", mounted.mnt, timeout=60)
    assert read.read_text().startswith("one")
    os.utime(read, ns=(old, os.stat(read).st_mtime_ns))
    written.write_text("alpha\nbeta\n")
    os.utime(written, ns=(old, os.stat(written).st_mtime_ns))
    swfs("sync", mounted.mnt, timeout=60)
    rel = f"{a.name}/read.txt"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the read's event, lines counted, is stored
        events = swfs("log", mounted.mnt, "--json", "--kind", "read").stdout
        if any(rel in line and '"lines"' in line for line in events.splitlines()):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no read event of {rel} with its lines")
    for f in (written, read):
        assert os.stat(f).st_atime_ns == old, f
        assert os.stat(mounted.src / f.relative_to(mounted.mnt)).st_atime_ns == old, f
