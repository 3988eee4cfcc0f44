"""The native tree through a real mount: byte-for-byte POSIX passthrough."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MountFactory
from tests.mountutil import as_user, ensure_test_user, errno_of, swfs

pytestmark = [pytest.mark.mount, pytest.mark.timeout(60)]

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(old: Path, new: Path, flags: int) -> None:
    if _libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def sh(cmd: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["sh", "-c", cmd], cwd=cwd, capture_output=True, check=True, text=True
    ).stdout


def test_read_write_append_truncate(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "hello\n"})
    a = m.mnt / "a.txt"
    assert sh(f"cat {a}") == "hello\n"
    sh(f"echo more >> {a}")
    assert (m.src / "a.txt").read_bytes() == b"hello\nmore\n"
    assert a.read_bytes() == b"hello\nmore\n"
    sh(f"truncate -s 3 {a}")
    assert (m.src / "a.txt").read_bytes() == b"hel"
    assert a.stat().st_size == 3
    sh(f"printf 'new' > {a}")
    assert (m.src / "a.txt").read_bytes() == b"new"

    blob = os.urandom(3 * 1024 * 1024 + 17)
    (m.mnt / "big.bin").write_bytes(blob)
    assert (m.src / "big.bin").read_bytes() == blob
    sh(f"cp {m.mnt}/big.bin {m.mnt}/copy.bin")
    assert (m.src / "copy.bin").read_bytes() == blob
    with open(m.mnt / "big.bin", "r+b") as f:
        f.seek(1000)
        f.write(b"XYZ")
    expect = blob[:1000] + b"XYZ" + blob[1003:]
    assert (m.src / "big.bin").read_bytes() == expect
    assert (m.mnt / "big.bin").read_bytes() == expect


def test_o_append_and_o_direct(mount_tree: MountFactory) -> None:
    m = mount_tree({"log.txt": "1\n"})
    fd = os.open(m.mnt / "log.txt", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"2\n")
    os.close(fd)
    assert (m.src / "log.txt").read_bytes() == b"1\n2\n"
    fd = os.open(m.mnt / "direct.bin", os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    try:
        os.write(fd, b"d" * 4096)
        assert os.pread(fd, 4096, 0) == b"d" * 4096
    finally:
        os.close(fd)
    fd = os.open(m.mnt / "log.txt", os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.read(fd, 4096) == b"1\n2\n"
    finally:
        os.close(fd)
    assert (m.src / "direct.bin").read_bytes() == b"d" * 4096
    assert m.proc.poll() is None


def test_rename_noreplace_and_exchange(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "A", "b.txt": "B"})
    with pytest.raises(OSError, match="exists") as exc:
        renameat2(m.mnt / "a.txt", m.mnt / "b.txt", RENAME_NOREPLACE)
    assert exc.value.errno == errno.EEXIST
    renameat2(m.mnt / "a.txt", m.mnt / "b.txt", RENAME_EXCHANGE)
    assert (m.src / "a.txt").read_text() == "B"
    assert (m.src / "b.txt").read_text() == "A"
    assert (m.mnt / "a.txt").read_text() == "B"
    renameat2(m.mnt / "a.txt", m.mnt / "c.txt", RENAME_NOREPLACE)
    assert not (m.src / "a.txt").exists()
    assert (m.mnt / "c.txt").read_text() == "B"
    sh(f"mv {m.mnt}/c.txt {m.mnt}/b.txt")
    assert (m.src / "b.txt").read_text() == "B"
    assert sorted(os.listdir(m.src)) == [".swfs", "b.txt"]


def test_directories_and_rename_of_a_tree(mount_tree: MountFactory) -> None:
    m = mount_tree({"d/e/f.txt": "deep"})
    assert (m.mnt / "d/e/f.txt").read_text() == "deep"
    sh(f"mv {m.mnt}/d {m.mnt}/d2")
    assert (m.mnt / "d2/e/f.txt").read_text() == "deep"
    assert (m.src / "d2/e/f.txt").read_text() == "deep"
    (m.mnt / "d2/new").mkdir()
    (m.mnt / "d2/new").rmdir()
    with pytest.raises(OSError, match="not empty"):
        (m.mnt / "d2").rmdir()
    sh(f"rm -r {m.mnt}/d2")
    assert not (m.src / "d2").exists()


def test_hard_links_share_an_inode(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "one\n"})
    os.link(m.mnt / "a.txt", m.mnt / "b.txt")
    sa, sb = (m.mnt / "a.txt").stat(), (m.mnt / "b.txt").stat()
    assert sa.st_ino == sb.st_ino
    assert sa.st_nlink == 2
    sh(f"echo two >> {m.mnt}/b.txt")
    assert (m.mnt / "a.txt").read_text() == "one\ntwo\n"
    (m.mnt / "b.txt").unlink()
    assert (m.mnt / "a.txt").stat().st_nlink == 1
    assert (m.mnt / "a.txt").read_text() == "one\ntwo\n"


def test_symlinks_are_not_followed(mount_tree: MountFactory) -> None:
    def setup(src: Path) -> None:
        outside = src.parent / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_text("secret outside\n")
        (src / "escape").symlink_to("../outside/secret.txt")
        (src / "escdir").symlink_to("../outside")

    m = mount_tree({"a.txt": "a"}, setup=setup)
    st = os.lstat(m.mnt / "escape")
    assert stat.S_ISLNK(st.st_mode)
    assert os.readlink(m.mnt / "escape") == "../outside/secret.txt"
    assert stat.S_ISLNK(os.lstat(m.mnt / "escdir").st_mode)
    os.symlink("a.txt", m.mnt / "link")
    assert os.readlink(m.src / "link") == "a.txt"
    assert (m.mnt / "link").read_text() == "a"
    # Nothing in the generated trees goes through the symlinks.
    out = subprocess.run(
        ["grep", "-rn", "secret", str(m.mnt / ".parsed"), str(m.mnt / ".versions")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.stdout == ""
    assert "escape" not in os.listdir(m.mnt / ".parsed")
    # An xattr call on the symlink must not act on its target.
    with pytest.raises(OSError, match=r"Operation not permitted|not supported|No data"):
        os.setxattr(m.mnt / "escape", "user.x", b"1", follow_symlinks=False)
    assert "user.x" not in os.listxattr(m.src.parent / "outside/secret.txt")


def test_mkfifo_and_mknod(mount_tree: MountFactory) -> None:
    m = mount_tree()
    os.mkfifo(m.mnt / "fifo", 0o640)
    st = os.lstat(m.src / "fifo")
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o640 & ~0o022 or stat.S_IMODE(st.st_mode) == 0o640


def test_xattrs_pass_through_and_sw_names(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "hello\n"})
    a = m.mnt / "a.txt"
    # Before any change of metadata (which makes the views stale until the
    # file is recorded again, as its change time moves).
    assert os.getxattr(a, "user.sw.freshness") == b"current"
    os.setxattr(a, "user.note", b"mine")
    assert os.getxattr(m.src / "a.txt", "user.note") == b"mine"
    assert os.getxattr(a, "user.note") == b"mine"
    names = os.listxattr(a)
    assert "user.note" in names
    # swfs's names answer by name but are not listed: copying tools must
    # not carry them onto plain copies (issue 36).
    assert not [n for n in names if n.startswith("user.sw.")]
    import blake3

    assert os.getxattr(a, "user.sw.hash").decode() == blake3.blake3(b"hello\n").hexdigest()
    # Setting or removing one (rsync -X from a copy that has them) is a no-op.
    os.setxattr(a, "user.sw.hash", b"x")
    os.removexattr(a, "user.sw.freshness")
    assert os.getxattr(a, "user.sw.hash").decode() == blake3.blake3(b"hello\n").hexdigest()
    assert os.getxattr(a, "user.sw.freshness") in (b"current", b"stale")
    assert not [n for n in os.listxattr(m.src / "a.txt") if n.startswith("user.sw.")]
    assert errno_of(lambda: os.getxattr(a, "user.nothing")) == errno.ENODATA
    os.removexattr(a, "user.note")
    assert "user.note" not in os.listxattr(m.src / "a.txt")
    assert os.getxattr(m.mnt, "user.sw.source").decode() == str(m.src)
    assert os.getxattr(m.mnt, "user.sw.store").decode() == str(m.src / ".swfs")


def test_store_hidden_and_reserved_names(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"})
    assert (m.src / ".swfs").is_dir()
    names = os.listdir(m.mnt)
    assert ".swfs" not in names
    # .versions works by name but stays out of the listing (and of `grep -r .`).
    assert {".parsed", ".review", "a.txt"} == set(names)
    assert (m.mnt / ".versions").is_dir()
    assert not (m.mnt / ".swfs").exists()
    for make in (lambda p: p.mkdir(), lambda p: p.write_text("x"), lambda p: os.mkfifo(p)):
        assert errno_of(functools.partial(make, m.mnt / ".swfs")) in (errno.EPERM, errno.EEXIST)
    for name in (".parsed", ".review", ".versions"):
        p = m.mnt / name
        assert errno_of(p.mkdir) == errno.EEXIST
        assert errno_of(functools.partial(os.rename, m.mnt / "a.txt", p)) in (
            errno.EEXIST,
            errno.EPERM,
            errno.EISDIR,
        )
        assert errno_of(p.rmdir) in (errno.EPERM, errno.EROFS, errno.EBUSY, errno.ENOTEMPTY)
    assert errno_of(lambda: os.rename(m.mnt / "a.txt", m.mnt / ".swfs")) in (
        errno.EPERM,
        errno.EEXIST,
    )
    # Renaming a directory onto a reserved name is refused by the daemon itself.
    (m.mnt / "d").mkdir()
    assert errno_of(lambda: os.rename(m.mnt / "d", m.mnt / ".review")) in (
        errno.EPERM,
        errno.EEXIST,
        errno.ENOTEMPTY,
    )
    assert (m.mnt / "d").is_dir()
    assert (m.src / "a.txt").read_text() == "a"


def test_create_mode_honours_the_umask(mount_tree: MountFactory) -> None:
    m = mount_tree()
    sh("umask 027; touch f; mkdir d; mkfifo p", cwd=m.mnt)
    assert stat.S_IMODE((m.src / "f").stat().st_mode) == 0o640
    assert stat.S_IMODE((m.src / "d").stat().st_mode) == 0o750
    assert stat.S_IMODE((m.src / "p").lstat().st_mode) == 0o640
    sh("umask 0; touch g; mkdir e", cwd=m.mnt)
    assert stat.S_IMODE((m.src / "g").stat().st_mode) == 0o666
    assert stat.S_IMODE((m.src / "e").stat().st_mode) == 0o777
    fd = os.open(m.mnt / "h", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    os.close(fd)
    assert stat.S_IMODE((m.src / "h").stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        os.open(m.mnt / "h", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)


def test_created_files_belong_to_the_caller(mount_tree: MountFactory) -> None:
    user = ensure_test_user()
    if user is None:
        pytest.skip("needs root to create a test user")
    m = mount_tree()
    (m.src / "shared").mkdir(mode=0o777)
    (m.src / "shared").chmod(0o777)
    r = as_user(
        user, "sh", "-c", f"umask 022; echo hi > {m.mnt}/shared/mine; mkdir {m.mnt}/shared/dir"
    )
    assert r.returncode == 0, r.stderr
    import pwd

    uid = pwd.getpwnam(user).pw_uid
    st = (m.src / "shared/mine").stat()
    assert st.st_uid == uid
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert (m.src / "shared/dir").stat().st_uid == uid
    # ... and the kernel checks permissions: the user cannot write root's file.
    (m.src / "shared/roots").write_text("r")
    (m.src / "shared/roots").chmod(0o644)
    r = as_user(user, "sh", "-c", f"echo x >> {m.mnt}/shared/roots")
    assert r.returncode != 0
    assert (m.src / "shared/roots").read_text() == "r"


def test_setattr_chmod_chown_utimens(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"})
    a = m.mnt / "a.txt"
    a.chmod(0o600)
    assert stat.S_IMODE((m.src / "a.txt").stat().st_mode) == 0o600
    os.chown(a, 1234, 4321)
    st = (m.src / "a.txt").stat()
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    os.utime(a, ns=(1_000_000_000_123, 2_000_000_000_456))
    st = (m.src / "a.txt").stat()
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)
    sh(f"touch -a {a}")  # UTIME_OMIT for mtime
    st = (m.src / "a.txt").stat()
    assert st.st_mtime_ns == 2_000_000_000_456
    assert st.st_atime_ns > 2_000_000_000_456
    sh(f"touch -m -d @5 {a}")
    assert (m.src / "a.txt").stat().st_mtime_ns == 5_000_000_000
    assert a.stat().st_mtime_ns == 5_000_000_000


def test_readdir_many_entries_and_ls(mount_tree: MountFactory) -> None:
    m = mount_tree({f"f{i:04d}.txt": str(i) for i in range(600)})
    assert sorted(os.listdir(m.mnt)) == sorted(
        [".parsed", ".review"] + [f"f{i:04d}.txt" for i in range(600)]
    )
    out = sh(f"ls -l {m.mnt} | grep -c 'f0'")
    assert out.strip() == "600"
    # Deleting while listing skips nothing and repeats nothing.
    with os.scandir(m.mnt) as it:
        seen = []
        for i, e in enumerate(it):
            seen.append(e.name)
            if i == 10:
                for j in range(300, 320):
                    os.unlink(m.mnt / f"f{j:04d}.txt")
    assert len(seen) == len(set(seen))


def test_paths_near_path_max(mount_tree: MountFactory) -> None:
    m = mount_tree()
    name = "d" * 200
    fd = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
    depth = 0
    try:
        while (depth + 1) * 201 < 4096 - len(str(m.mnt)) - 300:
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
            depth += 1
        wfd = os.open("leaf.txt", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
        os.write(wfd, b"deep")
        os.close(wfd)
    finally:
        os.close(fd)
    rel = "/".join([name] * depth) + "/leaf.txt"
    assert len(rel) > 3000
    assert (m.mnt / rel).read_bytes() == b"deep"
    assert os.path.getsize(m.mnt / rel) == 4


def test_statfs_is_the_backing_fs(mount_tree: MountFactory) -> None:
    m = mount_tree()
    a, b = os.statvfs(m.mnt), os.statvfs(m.src)
    assert a.f_namemax == b.f_namemax
    assert a.f_bsize == b.f_bsize
    assert a.f_blocks == b.f_blocks


def test_changes_behind_the_mount_are_seen(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "short\n"})
    assert (m.mnt / "a.txt").read_text() == "short\n"
    (m.src / "a.txt").write_text("a much longer text than before\n")
    assert (m.mnt / "a.txt").read_text() == "a much longer text than before\n"
    assert ["check_file", "a.txt"] in m.calls("check_file")


def test_deleted_behind_the_mount_disappears(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"})
    assert (m.mnt / "a.txt").exists()
    (m.src / "a.txt").unlink()
    assert "a.txt" not in os.listdir(m.mnt)
    assert errno_of((m.mnt / "a.txt").read_bytes) == errno.ENOENT
    deadline = time.monotonic() + 5
    while (m.mnt / "a.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (m.mnt / "a.txt").exists()


def test_directory_replaced_behind_the_mount_is_the_new_one(mount_tree: MountFactory) -> None:
    """The kernel holds directory d; behind the mount d is renamed away and a
    new d made.  Names through the mount are paths: they reach the new d, and
    a file made through the mount lands there, not in the old one."""
    m = mount_tree({"d/old.txt": "old"})
    assert os.listdir(m.mnt / "d") == ["old.txt"]
    assert (m.mnt / "d" / "old.txt").read_text() == "old"
    os.rename(m.src / "d", m.src / "d.old")
    (m.src / "d").mkdir()
    (m.src / "d" / "new.txt").write_text("new")
    assert (m.mnt / "d" / "new.txt").read_text() == "new"
    assert os.listdir(m.mnt / "d") == ["new.txt"]
    (m.mnt / "d" / "made.txt").write_text("through the mount")
    assert (m.src / "d" / "made.txt").read_text() == "through the mount"
    assert not (m.src / "d.old" / "made.txt").exists()
    assert sorted(os.listdir(m.mnt / "d")) == ["made.txt", "new.txt"]
    assert sorted(os.listdir(m.mnt / "d.old")) == ["old.txt"]


def test_python_tools_on_the_mount(mount_tree: MountFactory) -> None:
    m = mount_tree()
    code = (
        "import openpyxl,sys;"
        "p=sys.argv[1];"
        "wb=openpyxl.Workbook();wb.active['B12']=1200;wb.save(p);"
        "wb=openpyxl.load_workbook(p);wb.active['B12']=1350;wb.save(p);"
        "print(openpyxl.load_workbook(p).active['B12'].value)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(m.mnt / "book.xlsx")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1350"
    assert (m.src / "book.xlsx").read_bytes() == (m.mnt / "book.xlsx").read_bytes()


@pytest.mark.timeout(300)
def test_a_long_inputs_list_fits_an_xattr_and_copies_out(
    mount_tree: MountFactory, tmp_path: Path
) -> None:
    """A file written by a process that read hundreds of files: its
    user.sw.inputs stays under the kernel's 64 KiB limit (the first inputs,
    then {"more": N}), so getfattr, shutil.copy2 and rsync -X work."""
    import json
    import shutil

    m = mount_tree({f"in/input-{i:03d}.txt": f"line {i}\n" for i in range(600)})
    subprocess.run(["bash", "-c", "cat in/*.txt > out.txt"], cwd=m.mnt, check=True, timeout=120)
    swfs("sync", m.mnt, timeout=120)
    deadline = time.monotonic() + 60
    while True:
        try:
            raw = os.getxattr(m.mnt / "out.txt", "user.sw.inputs")
            break
        except OSError as exc:
            if exc.errno != errno.ENODATA or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    assert len(raw) <= 64 * 1024
    items = json.loads(raw)
    assert items[-1].get("more", 0) > 0, items[-1]
    assert len(items) > 100
    shutil.copy2(m.mnt / "out.txt", tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_bytes() == (m.src / "out.txt").read_bytes()
    assert not [n for n in os.listxattr(tmp_path / "copy.txt") if n.startswith("user.sw.")]
