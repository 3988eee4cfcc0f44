"""The router without a kernel: which provider answers below which name, what
the root reserves and lists, and what a change to a file may touch."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from mountd.nodes import Tree
from mountd.options import MountOptions
from mountd.router import Router
from mountd.synthetic import Entry, Generation, SyntheticTree, TreeDefaults, make_trees
from swfs.engine import Engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha\n")
    with Engine.open(src) as e:
        yield e


def router(engine: Engine, options: MountOptions) -> Router:
    return Router(dict(make_trees(engine, Generation(), options)))


def test_names_and_root_listing(engine: Engine) -> None:
    hidden = router(engine, MountOptions())
    assert hidden.names == {".parsed", ".review", ".versions"}
    assert hidden.listed() == [".parsed", ".review"]  # .versions works by name only
    assert hidden.top(".versions") is Tree.VERSIONS
    assert hidden.top("a.txt") is None
    assert router(engine, MountOptions(versions="visible")).listed() == [
        ".parsed",
        ".review",
        ".versions",
    ]


def test_what_a_change_to_a_file_touches(engine: Engine) -> None:
    r = router(engine, MountOptions())
    assert sorted(r.below("d/a.txt")) == [
        (Tree.PARSED, "d/a.txt"),
        (Tree.REVIEW, ""),  # SUMMARY.md and ALL.diff speak of every file
        (Tree.VERSIONS, "d/a.txt"),
    ]


class _Bare(TreeDefaults):
    """A provider with only what a tree must answer: the defaults apply."""

    tree = Tree.PARSED

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        return None

    async def children(self, path: str) -> list[str]:
        return []

    async def xattrs(self, path: str) -> Mapping[str, str]:
        return {}


def test_a_bare_provider_is_listed_and_scoped_per_file() -> None:
    bare: SyntheticTree = _Bare()
    r = Router({Tree.PARSED: bare})
    assert r.provider(Tree.PARSED) is bare
    assert r.listed() == [".parsed"]
    assert list(r.below("x.pdf")) == [(Tree.PARSED, "x.pdf")]
