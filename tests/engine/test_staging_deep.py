"""The staged layer at paths near PATH_MAX below SRC, SRC's own path long
too (swfs.staging walks with descriptors, never with path strings): copy-up,
listing, whiteouts, commit and discard; names of NAME_MAX bytes; symlinks in
SRC never followed."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.history import staging
from tests import deeppaths as dp

# 4,095 bytes below SRC: the longest path the kernel passes.
DEEP = dp.deep_dirs(4095 - 1 - 255)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Engine]:
    src = dp.long_root(tmp_path, 1500) / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    deep = dp.makedirs(src, DEEP)
    dp.write(src, f"{deep}/{'f' * 255}", b"deep bytes\n")
    dp.write(src, f"{deep}/old.txt", b"old\n")
    staging.Staging.activate(src, src / ".swfs")
    with Engine.open(src, src / ".swfs") as engine:
        engine.scan()
        yield engine


def layer(ws: Engine) -> staging.Staging:
    st = ws.staging
    assert st is not None
    return st


def test_a_deep_file_is_found_copied_up_and_committed(ws: Engine) -> None:
    st = layer(ws)
    deep = "/".join(DEEP)
    rel = f"{deep}/{'f' * 255}"
    assert len(rel.encode()) == 4095
    assert len(os.fsencode(st.upath(rel))) > 4096  # no path string would do
    assert st.in_lower(rel)
    assert not st.in_upper(rel)
    assert "f" * 255 in st.names(deep)
    st.copy_up(rel)
    assert st.in_upper(rel)
    assert dp.read(Path(st.upper), rel) == b"deep bytes\n"
    dp.write(Path(st.upper), rel, b"staged bytes\n")
    assert {c.path: c.status for c in st.changes()} == {rel: "modified"}
    assert dp.read(ws.src, rel) == b"deep bytes\n"  # SRC untouched until the commit
    assert staging.commit_ws(ws.workspace, [rel])["committed"] == [rel]
    assert dp.read(ws.src, rel) == b"staged bytes\n"
    assert st.changes() == []
    assert not st.in_upper(DEEP[0])  # the layer's copies of the folders pruned
    assert not [n for n in dp.listdir(ws.src, deep) if n.endswith(staging.TMP_SUFFIX)]


def test_deep_additions_and_deletions_listed_discarded_and_committed(ws: Engine) -> None:
    st = layer(ws)
    deep = "/".join(DEEP)
    before = dp.tree(ws.src, frozenset({".swfs"}))
    # What a mount does: a new deep folder and file in the layer, a whiteout
    # for SRC's deep file that was removed.
    st.copy_up(deep)
    new_dir = f"{deep}/n"
    new = f"{new_dir}/{'g' * (4095 - len(new_dir) - 1)}"
    dp.makedirs(Path(st.upper), new_dir.split("/"))
    dp.write(Path(st.upper), new, b"new\n")
    st.whiteout(f"{deep}/old.txt")
    listed = staging.list_staged(ws.workspace)
    assert {r["path"]: r["status"] for r in listed["staged"]} == {
        new_dir: "added",
        new: "added",
        f"{deep}/old.txt": "deleted",
    }
    assert sorted(st.names(deep)) == sorted(["f" * 255, "n"])
    assert sorted(r for r, _ in staging.walk(st, frozenset({".swfs"}))) == sorted(
        ["a.txt", f"{deep}/{'f' * 255}", new]
    )
    staging.discard_ws(ws.workspace)
    assert st.changes() == []
    assert st.whiteouts == set()
    assert dp.tree(ws.src, frozenset({".swfs"})) == before
    assert not st.in_upper(DEEP[0])
    # Again, committed this time: SRC byte for byte what the layer showed.
    st.copy_up(deep)
    dp.makedirs(Path(st.upper), new_dir.split("/"))
    dp.write(Path(st.upper), new, b"new\n")
    st.whiteout(f"{deep}/old.txt")
    staging.commit_ws(ws.workspace)
    after = dict(before)
    del after[f"{deep}/old.txt"]
    after[new_dir] = "dir"
    after[new] = b"new\n"
    assert dp.tree(ws.src, frozenset({".swfs"})) == after
    assert st.changes() == []
    assert st.whiteouts == set()


def test_names_of_name_max_bytes_commit_through_short_temp_names(ws: Engine) -> None:
    st = layer(ws)
    name = "€" * 85  # 255 bytes: a temp name beside it cannot add to it
    st.copy_up("")
    (Path(st.upper) / name).write_bytes(b"euro\n")
    st.copy_up("a.txt")
    os.rename(Path(st.upper) / "a.txt", Path(st.upper) / ("a" * 255))
    st.whiteout("a.txt")
    staging.commit_ws(ws.workspace)
    assert (ws.src / name).read_bytes() == b"euro\n"
    assert (ws.src / ("a" * 255)).read_text() == "a\n"
    assert not (ws.src / "a.txt").exists()
    assert not [n for n in os.listdir(ws.src) if n.endswith(staging.TMP_SUFFIX)]


def test_a_symlink_in_src_is_never_followed(ws: Engine, tmp_path: Path) -> None:
    st = layer(ws)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    os.symlink(outside, ws.src / "link")
    assert st.in_lower("link")
    assert not st.in_lower("link/secret.txt")
    assert st.names("link") == {}
    with pytest.raises(FileNotFoundError) as exc:
        st.copy_up("link/secret.txt")
    assert exc.value.errno == errno.ENOENT
    st.copy_up("link")
    assert os.path.islink(st.upath("link"))
    assert not st.in_upper("link/secret.txt")
    assert (outside / "secret.txt").read_text() == "secret\n"


def test_deep_folders_replaced_in_the_layer_are_replaced_in_src(ws: Engine) -> None:
    """A folder of SRC's removed and made again (opaque), and one replaced by
    a file, at depth: the commit removes what SRC held below them."""
    st = layer(ws)
    deep = "/".join(DEEP[:-1])
    for name in ("again", "to-file"):
        dp.makedirs(ws.src, [*DEEP[:-1], name, "sub"])
        dp.write(ws.src, f"{deep}/{name}/sub/old.txt", b"old\n")
        dp.write(ws.src, f"{deep}/{name}/top.txt", b"top\n")
    before = dp.tree(ws.src, frozenset({".swfs"}))
    st.copy_up(deep)
    for name in ("again", "to-file"):
        for rel in (f"{name}/sub/old.txt", f"{name}/sub", f"{name}/top.txt", name):
            st.whiteout(f"{deep}/{rel}")
    dp.makedirs(Path(st.upper), [*DEEP[:-1], "again"])
    dp.write(Path(st.upper), f"{deep}/again/new.txt", b"new\n")
    dp.write(Path(st.upper), f"{deep}/to-file", b"a file now\n")
    assert sorted(st.names(f"{deep}/again")) == ["new.txt"]
    staging.commit_ws(ws.workspace)
    after = {k: v for k, v in before.items() if not k.startswith(f"{deep}/again/")}
    after = {k: v for k, v in after.items() if not k.startswith(f"{deep}/to-file/")}
    after[f"{deep}/again/new.txt"] = b"new\n"
    after[f"{deep}/to-file"] = b"a file now\n"
    assert dp.tree(ws.src, frozenset({".swfs"})) == after
    assert st.changes() == []
    assert st.whiteouts == set()
