"""What the kernel may answer without asking the daemon, and when it may not.

The daemon runs with libfuse's debug log (``--debug``), which names every
request it receives, so these tests count the round trips a command costs.
"""

from __future__ import annotations

import errno
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from mountd import binding
from tests.conftest import MountFactory
from tests.mountutil import Mount, as_user, ensure_test_user, errno_of, wait_until

pytestmark = [pytest.mark.mount, pytest.mark.timeout(60)]


def requests(m: Mount, opcode: str) -> int:
    """How many ``opcode`` requests the daemon has received so far."""
    return m.log().count(f"opcode: {opcode} ")


def ls(path: Path) -> list[str]:
    out = subprocess.run(["ls", "-a", str(path)], capture_output=True, check=True, text=True)
    return sorted(out.stdout.split())


def lists(path: Path, names: list[str], bound: float = 30.0) -> None:
    """``path`` lists ``names`` once the change feed has told the daemon of a
    change behind the mount (the kernel keeps a listing until it is dropped:
    mountd.dirlist)."""
    deadline = time.monotonic() + bound
    while ls(path) != names:
        assert time.monotonic() < deadline, (ls(path), names)
        time.sleep(0.05)


def test_the_installed_pyfuse3_carries_the_cache_flags() -> None:
    # `make install` builds pyfuse3 with vendor/pyfuse3; the
    # daemon falls back to stock pyfuse3 silently, so check the build here.
    assert binding.FORK
    assert binding.DIR_CACHE
    assert binding.NOFLUSH


def test_a_listing_is_kept_until_the_directory_changes(mount_tree: MountFactory) -> None:
    m = mount_tree({"d/a": "1", "d/b": "2"}, args=["--debug"])
    d = m.mnt / "d"
    assert ls(d) == [".", "..", "a", "b"]
    asked = requests(m, "READDIRPLUS")
    assert asked > 0
    for _ in range(3):
        assert ls(d) == [".", "..", "a", "b"]
    assert requests(m, "READDIRPLUS") == asked  # the kernel's copy answered

    # Changes behind the mount: a listing after the change feed saw them is
    # the new one.
    (m.src / "d" / "c").write_text("3")
    lists(d, [".", "..", "a", "b", "c"])
    (m.src / "d" / "a").unlink()
    lists(d, [".", "..", "b", "c"])
    os.rename(m.src / "d" / "b", m.src / "d" / "b2")
    lists(d, [".", "..", "b2", "c"])
    # A name that now leads to another file is listed with that file's inode.
    os.unlink(m.src / "d" / "c")
    (m.src / "d" / "c").mkdir()
    deadline = time.monotonic() + 30
    while not (d / "c").is_dir():
        assert time.monotonic() < deadline, "d/c never became a directory"
        time.sleep(0.05)
    entries = {e.name: e.inode() for e in os.scandir(d)}
    assert entries["c"] == os.lstat(d / "c").st_ino

    # Changes through the mount.
    (d / "e").write_text("5")
    assert ls(d) == [".", "..", "b2", "c", "e"]
    os.rename(d / "e", d / "f")
    assert ls(d) == [".", "..", "b2", "c", "f"]
    # The change feed's echo of the changes behind the mount above may still
    # drop the kernel's copy once (it coalesces events for up to a second);
    # after that, a listing is answered from the kernel's copy again.
    deadline = time.monotonic() + 30
    while True:
        asked = requests(m, "READDIRPLUS")
        assert ls(d) == [".", "..", "b2", "c", "f"]
        if requests(m, "READDIRPLUS") == asked:
            break
        assert time.monotonic() < deadline, "the listing is never kept"
        time.sleep(0.1)


def test_a_directory_replaced_behind_the_mount_lists_its_own_entries(
    mount_tree: MountFactory,
) -> None:
    m = mount_tree({"d/old": "1"}, args=["--debug"])
    assert ls(m.mnt / "d") == [".", "..", "old"]
    assert ls(m.mnt / "d") == [".", "..", "old"]
    os.rename(m.src / "d", m.src / "d.old")
    (m.src / "d").mkdir()
    (m.src / "d" / "new").write_text("2")
    lists(m.mnt / "d", [".", "..", "new"])
    lists(m.mnt / "d.old", [".", "..", "old"])


def test_a_close_that_cannot_have_written_costs_no_flush(mount_tree: MountFactory) -> None:
    m = mount_tree({"f.txt": "hello\n"}, args=["--debug"])
    f = m.mnt / "f.txt"
    assert f.read_text() == "hello\n"
    flushes = requests(m, "FLUSH")
    for _ in range(3):
        assert f.read_text() == "hello\n"
    assert requests(m, "FLUSH") == flushes

    m.clear_calls()
    with open(f, "a") as out:
        out.write("more\n")
    assert requests(m, "FLUSH") == flushes + 1
    assert (m.src / "f.txt").read_text() == "hello\nmore\n"
    # The close's record is made off the reply path (queued).
    wait_until("the close's record", lambda: any(c[1] == "f.txt" for c in m.calls("record_write")))


def test_ls_l_asks_for_labels_once_not_per_entry(mount_tree: MountFactory) -> None:
    files = {f"d{d}/f{i}.txt": "x" for d in range(4) for i in range(50)}

    def setup(src: Path) -> None:
        os.setxattr(src / "d0" / "f0.txt", "security.swfs-test", b"label")

    m = mount_tree(files, args=["--debug"], setup=setup)
    for _ in range(2):  # the second listing is warm
        asked = requests(m, "GETXATTR")
        out = subprocess.run(["ls", "-lR", m.mnt], capture_output=True, check=True, text=True)
        assert out.stdout.count(".txt") == 200
    # Warm, the kernel holds the ACLs; a security.selinux request per entry
    # (200) would remain if the first answer did not tell ls to stop asking.
    assert requests(m, "GETXATTR") - asked < 20

    # A label the backing file has passes through; an absent one reads as
    # unsupported, any other absent attribute as absent.
    labelled = m.mnt / "d0" / "f0.txt"
    assert os.getxattr(labelled, "security.swfs-test") == b"label"
    assert errno_of(lambda: os.getxattr(labelled, "security.selinux")) == errno.EOPNOTSUPP
    assert errno_of(lambda: os.getxattr(labelled, "user.nothing")) == errno.ENODATA
    unit_dir = m.mnt / ".versions"
    assert errno_of(lambda: os.getxattr(unit_dir, "security.selinux")) == errno.EOPNOTSUPP


# -- POSIX ACLs

ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF


def access_acl(user_obj: int, users: dict[int, int], group_obj: int, other: int) -> bytes:
    """The ``system.posix_acl_access`` value (Linux xattr format, version 2)."""
    entries = [(ACL_USER_OBJ, user_obj, UNDEFINED_ID)]
    entries += [(ACL_USER, perm, uid) for uid, perm in sorted(users.items())]
    entries.append((ACL_GROUP_OBJ, group_obj, UNDEFINED_ID))
    if users:
        mask = group_obj
        for perm in users.values():
            mask |= perm
        entries.append((ACL_MASK, mask, UNDEFINED_ID))
    entries.append((ACL_OTHER, other, UNDEFINED_ID))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def test_acls_grant_and_deny_through_the_mount_as_they_do_natively(
    mount_tree: MountFactory,
) -> None:
    user = ensure_test_user()
    if user is None:
        pytest.skip("needs root to create the unprivileged test user")
    import pwd

    uid = pwd.getpwnam(user).pw_uid

    def setup(src: Path) -> None:
        for name in ("granted.txt", "plain.txt"):
            (src / name).write_text("secret\n")
            (src / name).chmod(0o600)
        (src / "denied.txt").write_text("secret\n")
        (src / "denied.txt").chmod(0o644)
        try:
            # The named user may read what the mode bits alone would deny...
            os.setxattr(
                src / "granted.txt", "system.posix_acl_access", access_acl(6, {uid: 4}, 0, 0)
            )
            # ... and may not read what the mode bits alone would allow.
            os.setxattr(
                src / "denied.txt", "system.posix_acl_access", access_acl(6, {uid: 0}, 4, 4)
            )
        except OSError as exc:
            pytest.skip(f"the backing file system has no POSIX ACLs: {exc}")

    m = mount_tree({}, setup=setup)
    cases = (("granted.txt", True), ("plain.txt", False), ("denied.txt", False))
    for name, readable in cases:
        native = as_user(user, "cat", str(m.src / name))
        mounted = as_user(user, "cat", str(m.mnt / name))
        assert (native.returncode == 0) is readable, native.stderr
        assert (mounted.returncode == 0) is readable, mounted.stderr
        if readable:
            assert mounted.stdout == b"secret\n"
    assert os.getxattr(m.mnt / "granted.txt", "system.posix_acl_access") == os.getxattr(
        m.src / "granted.txt", "system.posix_acl_access"
    )

    # Dropping the ACL through the mount takes the access away at once.
    os.removexattr(m.mnt / "granted.txt", "system.posix_acl_access")
    assert as_user(user, "cat", str(m.mnt / "granted.txt")).returncode != 0
