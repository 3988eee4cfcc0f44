"""A hard link that SRC has, in the staged layer without FUSE: the copy-up of
one name links the workspace's other names of that inode to the copy, so
they stay one file in the layer and, committed together, one inode in SRC;
a name the workspace never recorded keeps SRC's inode."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.history import staging


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("shared v1\n")
    os.link(src / "a.txt", src / "sub" / "b.txt")
    (src / "solo.txt").write_text("solo\n")
    staging.Staging.activate(src, src / ".swfs")
    with Engine.open(src, src / ".swfs") as engine:
        engine.scan()
        assert engine.staging is not None
        engine.staging.other_names = engine.workspace.other_names  # as the staged mount sets it
        yield engine


def test_copy_up_keeps_src_hard_links_one_file(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    src_ino = os.stat(ws.src / "a.txt").st_ino
    assert st.copy_up("a.txt") == ["sub/b.txt"]
    a, b = os.lstat(st.upath("a.txt")), os.lstat(st.upath("sub/b.txt"))
    assert a.st_ino == b.st_ino
    assert a.st_nlink == 2
    assert st.identity(a) == (a.st_dev, src_ino)  # both keep showing SRC's inode number
    assert st.copy_up("sub/b.txt") == []  # already there
    # A write through one name is the other's bytes too; SRC is untouched.
    with open(st.upath("a.txt"), "w") as f:
        f.write("shared v2\n")
    assert Path(ws.workspace.abspath("sub/b.txt")).read_text() == "shared v2\n"
    assert (ws.src / "sub" / "b.txt").read_text() == "shared v1\n"
    assert {c.path: c.status for c in st.changes()} == {
        "a.txt": "modified",
        "sub/b.txt": "modified",
    }
    st.commit()
    sa, sb = os.stat(ws.src / "a.txt"), os.stat(ws.src / "sub" / "b.txt")
    assert (sa.st_ino, sa.st_nlink) == (sb.st_ino, 2)
    assert (ws.src / "sub" / "b.txt").read_text() == "shared v2\n"
    assert st.changes() == []


def test_single_files_and_unrecorded_names(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    # A name made behind the workspace's back (never scanned) is not known.
    os.link(ws.src / "solo.txt", ws.src / "unrecorded.txt")
    assert st.copy_up("solo.txt") == []
    assert not os.path.lexists(st.upath("unrecorded.txt"))
    assert (ws.src / "unrecorded.txt").read_text() == "solo\n"
    # Without the workspace's names, one name at a time (the old behaviour).
    st.other_names = None
    assert st.copy_up("a.txt") == []
    assert not os.path.lexists(st.upath("sub/b.txt"))
