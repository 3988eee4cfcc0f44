"""The engine hooks the daemon calls for what users do to native files."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import MountFactory
from tests.mountutil import Mount

pytestmark = [pytest.mark.mount, pytest.mark.timeout(60)]

HOOKS = (
    "preserve",
    "preserve_inode",
    "keep_held",
    "record_write",
    "record_rename",
    "record_unlink",
)


def hooks(m: Mount) -> list[list[str]]:
    # keep_held's second argument is the store's link, a name of its own
    return [c[:2] if c[0] == "keep_held" else c for c in m.calls(*HOOKS)]


def settled_hooks(m: Mount, expected: list[list[str]]) -> list[list[str]]:
    """The hook calls once they are ``expected`` (or after a generous bound):
    a change of names, and a close, is recorded after its reply
    (swfs.history.recorder)."""
    deadline = time.monotonic() + 30
    while hooks(m) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return hooks(m)


def test_editor_save_is_write_then_rename(mount_tree: MountFactory) -> None:
    m = mount_tree({"doc.txt": "v1\n"})
    m.clear_calls()
    code = (
        "import os,sys;d=sys.argv[1];"
        "f=open(os.path.join(d,'.doc.txt.tmp'),'w');f.write('v2\\n');f.flush();"
        "os.fsync(f.fileno());f.close();"
        "os.rename(os.path.join(d,'.doc.txt.tmp'),os.path.join(d,'doc.txt'))"
    )
    subprocess.run([sys.executable, "-c", code, str(m.mnt)], check=True)
    assert (m.src / "doc.txt").read_text() == "v2\n"
    # fsync records the written temp file once; release has nothing new to
    # record.  The replaced file is held by a link and kept after the rename.
    expected = [
        ["record_write", ".doc.txt.tmp"],
        ["keep_held", "doc.txt"],
        ["record_rename", ".doc.txt.tmp", "doc.txt"],
    ]
    assert settled_hooks(m, expected) == expected


def test_editor_save_without_fsync(mount_tree: MountFactory) -> None:
    m = mount_tree({"doc.txt": "v1\n"})
    m.clear_calls()
    (m.mnt / "doc.txt~").write_text("v2\n")
    os.replace(m.mnt / "doc.txt~", m.mnt / "doc.txt")
    # Read at once: reading history waits for the queued records.
    names = os.listdir(m.mnt / ".versions/doc.txt")
    assert len(names) == 2
    expected = [
        ["record_write", "doc.txt~"],
        ["keep_held", "doc.txt"],
        ["record_rename", "doc.txt~", "doc.txt"],
    ]
    assert settled_hooks(m, expected) == expected
    names = os.listdir(m.mnt / ".versions/doc.txt")
    assert len(names) == 2


def test_in_place_write_preserves_once(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "0123456789"})
    m.clear_calls()
    with open(m.mnt / "a.txt", "r+b", buffering=0) as f:
        f.write(b"AB")
        f.seek(5)
        f.write(b"CD")
    assert settled_hooks(m, [["preserve", "a.txt"], ["record_write", "a.txt"]]) == [
        ["preserve", "a.txt"],
        ["record_write", "a.txt"],
    ]
    assert (m.src / "a.txt").read_bytes() == b"AB234CD789"


def test_read_only_open_calls_no_hook(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "x"})
    m.clear_calls()
    assert (m.mnt / "a.txt").read_text() == "x"
    with open(m.mnt / "a.txt", "r+b"):
        pass
    assert hooks(m) == []


def test_truncating_open_and_truncate(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "old\n", "b.txt": "bbb\n"})
    m.clear_calls()
    subprocess.run(["sh", "-c", f"echo new > {m.mnt}/a.txt"], check=True)
    assert settled_hooks(m, [["preserve", "a.txt"], ["record_write", "a.txt"]]) == [
        ["preserve", "a.txt"],
        ["record_write", "a.txt"],
    ]
    m.clear_calls()
    subprocess.run(["truncate", "-s", "1", str(m.mnt / "b.txt")], check=True)
    assert settled_hooks(m, [["preserve", "b.txt"], ["record_write", "b.txt"]]) == [
        ["preserve", "b.txt"],
        ["record_write", "b.txt"],
    ]
    assert (m.src / "b.txt").read_bytes() == b"b"


def test_new_file_is_recorded_not_preserved(mount_tree: MountFactory) -> None:
    m = mount_tree()
    subprocess.run(["cp", "/etc/hostname", str(m.mnt / "copy")], check=True)
    assert settled_hooks(m, [["record_write", "copy"]]) == [["record_write", "copy"]]


def test_unlink_and_rename_over(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a", "b.txt": "b", "c.txt": "c"})
    m.clear_calls()
    subprocess.run(["rm", str(m.mnt / "a.txt")], check=True)
    subprocess.run(["mv", str(m.mnt / "b.txt"), str(m.mnt / "c.txt")], check=True)
    subprocess.run(["mv", str(m.mnt / "c.txt"), str(m.mnt / "d.txt")], check=True)
    expected = [
        ["keep_held", "a.txt"],
        ["record_unlink", "a.txt"],
        ["keep_held", "c.txt"],
        ["record_rename", "b.txt", "c.txt"],
        ["record_rename", "c.txt", "d.txt"],
    ]
    assert settled_hooks(m, expected) == expected


def test_directory_rename_is_one_record(mount_tree: MountFactory) -> None:
    m = mount_tree({"dir/x.txt": "x", "dir/sub/y.txt": "y"})
    m.clear_calls()
    subprocess.run(["mv", str(m.mnt / "dir"), str(m.mnt / "moved")], check=True)
    expected = [["record_rename", "dir", "moved"]]
    assert settled_hooks(m, expected) == expected
    with open(m.mnt / "moved/sub/y.txt", "a") as f:
        f.write("more")
    expected += [["preserve", "moved/sub/y.txt"], ["record_write", "moved/sub/y.txt"]]
    assert settled_hooks(m, expected) == expected


def test_write_to_a_file_renamed_while_open(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"})
    m.clear_calls()
    with open(m.mnt / "a.txt", "ab", buffering=0) as f:
        os.rename(m.mnt / "a.txt", m.mnt / "b.txt")
        f.write(b"!")
    expected = [
        ["record_rename", "a.txt", "b.txt"],
        ["preserve", "b.txt"],
        ["record_write", "b.txt"],
    ]
    assert settled_hooks(m, expected) == expected


def test_truncating_open_alone_is_recorded_on_release(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "old\n"})
    m.clear_calls()
    subprocess.run(["sh", "-c", f": > {m.mnt}/a.txt"], check=True)
    deadline = time.monotonic() + 10
    while len(hooks(m)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # release reaches the daemon after close() returned
    assert settled_hooks(m, [["preserve", "a.txt"], ["record_write", "a.txt"]]) == [
        ["preserve", "a.txt"],
        ["record_write", "a.txt"],
    ]


def test_two_writers_each_preserve_after_a_record(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "0123456789"})
    fa = os.open(m.mnt / "a.txt", os.O_WRONLY)
    fb = os.open(m.mnt / "a.txt", os.O_WRONLY)
    try:
        m.clear_calls()
        os.pwrite(fa, b"A", 0)
        os.fsync(fa)  # records a version: its bytes must be kept before B overwrites them
        os.pwrite(fb, b"B", 1)
        os.fsync(fb)
    finally:
        os.close(fa)
        os.close(fb)
    # A late notice for A's record (its parse landing, say) must not make
    # B's write keep the same bytes a second time (swfs.writesession._Kept).
    calls = hooks(m)
    assert calls == [
        ["preserve", "a.txt"],
        ["record_write", "a.txt"],
        ["preserve", "a.txt"],
        ["record_write", "a.txt"],
    ], calls


def test_truncated_temp_is_recorded_before_its_rename(mount_tree: MountFactory) -> None:
    m = mount_tree({"doc.txt": "v1\n"})
    fd = os.open(m.mnt / "tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        m.clear_calls()
        os.rename(m.mnt / "tmp", m.mnt / "doc.txt")  # while the creator still holds it
    finally:
        os.close(fd)
    expected = [
        ["record_write", "tmp"],
        ["keep_held", "doc.txt"],
        ["record_rename", "tmp", "doc.txt"],
    ]
    deadline = time.monotonic() + 30
    while hooks(m)[:3] != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    assert hooks(m)[:3] == expected
