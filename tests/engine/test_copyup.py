"""What a change through a staged mount does to the layer
(``swfs.history.copyup``), without FUSE: the identity a copy keeps, removals
that white SRC's names out, and what a rename needs first or is refused."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from swfs.history import copyup
from swfs.history.staging import LOWER, Staging


@pytest.fixture
def st(tmp_path: Path) -> Iterator[Staging]:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "a.txt").write_text("a\n")
    (src / "d" / "x.txt").write_text("x\n")
    layer = Staging.activate(src, tmp_path / "store")
    try:
        yield layer
    finally:
        layer.close()


def test_a_copy_keeps_showing_its_src_identity_and_a_new_node_has_none(st: Staging) -> None:
    before = st.lstat_in(LOWER, "a.txt")
    st.copy_up("a.txt")
    shown = copyup.lstat(st, "a.txt")
    assert (shown.st_dev, shown.st_ino) == (before.st_dev, before.st_ino)
    assert copyup.made(st, os.lstat(st.upath("a.txt"))) is not None
    again = copyup.lstat(st, "a.txt")
    assert (again.st_dev, again.st_ino) != (before.st_dev, before.st_ino)


def test_removals_white_src_names_out(st: Staging) -> None:
    assert copyup.unlink(st, "a.txt")
    assert not copyup.exists(st, "a.txt")
    assert (Path(st.src) / "a.txt").exists()  # SRC is never changed
    with pytest.raises(IsADirectoryError):
        copyup.unlink(st, "d")
    with pytest.raises(OSError, match=re.escape(os.strerror(errno.ENOTEMPTY))):
        copyup.rmdir(st, "d")
    copyup.rmdir(st, "empty")
    assert not copyup.exists(st, "empty")


def test_what_a_rename_needs_first_or_refuses(st: Staging) -> None:
    assert copyup.rename_steps(st, "a.txt", "d/b.txt", 0) == [
        ("copy_up", "a.txt"),
        ("copy_up", "d"),
    ]
    # A replaced SRC file is copied up (its bytes become a version).
    assert copyup.rename_steps(st, "a.txt", "d/x.txt", 0)[-1] == ("copy_up", "d/x.txt")
    for old, new, flags, code in [
        ("d", "e", 0, errno.EXDEV),  # a folder SRC has, as overlayfs without redirect_dir
        ("a.txt", "d/x.txt", copyup.RENAME_NOREPLACE, errno.EEXIST),
        ("a.txt", "empty", 0, errno.EISDIR),
        ("a.txt", "nothing", copyup.RENAME_EXCHANGE, errno.ENOENT),
        ("a.txt", "d", copyup.RENAME_EXCHANGE, errno.EXDEV),
    ]:
        with pytest.raises(OSError, match=re.escape(os.strerror(code))):
            copyup.rename_steps(st, old, new, flags)
    assert copyup.rename_steps(st, "a.txt", "d/x.txt", copyup.RENAME_EXCHANGE) == [
        ("copy_up", "a.txt"),
        ("copy_up", "d/x.txt"),
    ]
