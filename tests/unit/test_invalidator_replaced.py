"""A file replaced behind the mount by one that got its freed inode number."""

from __future__ import annotations

import os
from pathlib import Path

from mountd.invalidator import _replaced, told
from mountd.nodes import Inode, Node, Tree


def test_a_new_type_under_a_reused_inode_number_is_a_replacement(tmp_path: Path) -> None:
    f = tmp_path / "c"
    f.write_text("3")
    st = os.lstat(f)
    node = Node(Inode(st.st_ino), Tree.NATIVE, (st.st_dev, st.st_ino))
    node.told = told(st)
    assert not _replaced(node, st)
    assert _replaced(node, None)
    # What ext4 often does: the directory made in the file's place gets its
    # number.  Same (dev, ino), another type: the kernel's inode is not it.
    f.unlink()
    f.mkdir()
    now = os.lstat(f)
    fake = os.stat_result((now.st_mode, st.st_ino, st.st_dev, *tuple(now)[3:10]))
    assert _replaced(node, fake)
    node.told = None  # never told anything: only the identity counts
    assert not _replaced(node, fake)
