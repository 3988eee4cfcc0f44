"""Whether a folder of ``.review`` still lists a diff after a change, known
without computing the change set (``ReviewTree.dir_stays``): the
invalidator asks it of every folder the kernel holds after every event, and
the change set is a pass over every file of the store (a burst of creates
under a folder the kernel held once cost a pass per create)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from mountd.options import MountOptions
from mountd.synthetic import Generation, ParsedTree, ReviewTree, VersionsTree
from swfs.engine import Engine
from swfs.workspace import Config


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    (src / "d" / "e" / "a.txt").write_text("alpha\n")
    (src / "d" / "b.txt").write_text("bee\n")
    (src / "other").mkdir()
    (src / "other" / "c.txt").write_text("sea\n")
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        yield e


def _listed(tree: ReviewTree, folder: str) -> bool:
    head, _, name = folder.rpartition("/")
    return name in trio.run(tree.children, head)


def _record(engine: Engine, rel: str) -> None:
    engine.workspace.check_file(rel)  # type: ignore[arg-type]


def test_dir_stays_agrees_with_the_listing_and_never_computes_it(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = ReviewTree(engine, Generation(), MountOptions())
    src = engine.src
    assert not _listed(tree, "d")  # nothing changed yet

    (src / "d" / "b.txt").write_text("changed\n")
    (src / "d" / "e" / "new.txt").write_text("new\n")
    _record(engine, "d/b.txt")
    _record(engine, "d/e/new.txt")
    tree = ReviewTree(engine, Generation(), MountOptions())
    assert _listed(tree, "d")
    assert _listed(tree, "d/e")

    asked: list[str] = []
    real = engine.reviews.review

    def counted() -> Any:
        asked.append("review")
        return real()

    monkeypatch.setattr(engine.reviews, "review", counted)
    # Modified and added files keep their folders (and every folder above).
    assert tree.dir_stays("d", {"d/b.txt"})
    assert tree.dir_stays("d/e", {"d/e/new.txt"})
    assert tree.dir_stays("d", {"d/e/new.txt", "other/c.txt"})
    # A folder above none of the changed files is not asked about.
    assert tree.dir_stays("other", {"d/b.txt"})
    assert asked == []

    # Back to the baseline's bytes: no diff at that path any more; only the
    # listing can tell whether another file keeps the folder.
    (src / "d" / "b.txt").write_text("bee\n")
    _record(engine, "d/b.txt")
    assert not tree.dir_stays("d", {"d/b.txt"})
    # Deleted: listed as a deletion, or paired into a rename elsewhere.
    os.unlink(src / "d" / "e" / "a.txt")
    _record(engine, "d/e/a.txt")
    assert not tree.dir_stays("d/e", {"d/e/a.txt"})
    # A folder name that is a prefix of another's is not above its files.
    assert tree.dir_stays("d/e", {"d/ee/x.txt"})
    assert asked == []


def test_parsed_and_versions_folders_stay_without_their_index(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder of an edited file's view (``.parsed/<rel>``) and of its
    versions (``.versions/<rel>``) stay, known from its record, without the
    index of every parsed or versioned path; a deleted file's folders are
    left to the index."""
    gen = Generation()
    parsed = ParsedTree(engine, gen, MountOptions())
    versions = VersionsTree(engine, gen, MountOptions())
    src = engine.src
    (src / "d" / "b.txt").write_text("edited\n")
    _record(engine, "d/b.txt")
    trio.run(engine.drain)
    assert "b.txt" in trio.run(parsed.children, "d")
    assert "b.txt" in trio.run(versions.children, "d")

    asked: list[str] = []

    def no_index() -> Any:
        asked.append("index")
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr(engine.views, "parsed_paths", no_index)
    monkeypatch.setattr(engine.history, "versioned_paths", no_index)
    for tree in (parsed, versions):
        assert tree.dir_stays("d/b.txt", {"d/b.txt"})
        assert tree.dir_stays("d", {"d/b.txt"})
        assert not tree.dir_stays("d/e", {"d/b.txt"})  # nothing below it changed
    (src / "other" / "c.bin").write_bytes(b"\0\1")  # no parser: no view
    _record(engine, "other/c.bin")
    assert not parsed.dir_stays("other/c.bin", {"other/c.bin"})
    os.unlink(src / "d" / "e" / "a.txt")
    _record(engine, "d/e/a.txt")
    assert not parsed.dir_stays("d/e/a.txt", {"d/e/a.txt"})
    assert not versions.dir_stays("@snapshots", {"d/b.txt"})
    assert asked == []
