"""Renames in the review, on the engine without FUSE: moved files are paired
with their old path by content, each with the one it resembles most."""

from __future__ import annotations

from pathlib import Path

import trio

from swfs.api import ChangeStatus
from swfs.engine import Engine
from swfs.review import changes as review
from swfs.workspace import Config


def note(topic: str, n: int = 15) -> str:
    return "".join(f"{topic} line {i}: something specific about {topic} {i}\n" for i in range(n))


def settle(eng: Engine) -> None:
    eng.scan()
    trio.run(eng.drain)


def test_each_moved_file_pairs_with_the_one_it_resembles(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    (src / "old").mkdir(parents=True)
    (src / "old" / "alpha.md").write_text(note("alpha"))
    (src / "old" / "beta.md").write_text(note("beta"))
    (src / "old" / "gamma.md").write_text(note("gamma"))
    (src / "old" / "pic.bin").write_bytes(bytes(range(256)) * 8)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        settle(eng)
        eng.history.set_baseline()
        (src / "new").mkdir()
        # Moved and edited, under names that do not give the pairing away.
        (src / "new" / "one.md").write_text(note("beta").replace("line 3:", "line three:"))
        (src / "new" / "two.md").write_text(note("alpha") + "one more line\n")
        for name in ("alpha.md", "beta.md"):
            (src / "old" / name).unlink()
        # Deleted, and something else of the same type added: not a rename.
        (src / "old" / "gamma.md").unlink()
        (src / "new" / "three.md").write_text(note("delta"))
        # A binary moved and changed is never paired by guess.
        (src / "old" / "pic.bin").unlink()
        (src / "new" / "pic.bin").write_bytes(bytes(range(256)) * 8 + b"x")
        settle(eng)
        got = {(e.status, e.old_rel, e.rel) for e in review.changes(eng.workspace)}
    assert got == {
        (ChangeStatus.RENAMED, "old/beta.md", "new/one.md"),
        (ChangeStatus.RENAMED, "old/alpha.md", "new/two.md"),
        (ChangeStatus.DELETED, None, "old/gamma.md"),
        (ChangeStatus.ADDED, None, "new/three.md"),
        (ChangeStatus.DELETED, None, "old/pic.bin"),
        (ChangeStatus.ADDED, None, "new/pic.bin"),
    }


def test_too_different_files_stay_a_delete_and_an_add(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "a.md").write_text(note("alpha", 10))
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        settle(eng)
        eng.history.set_baseline()
        # Fewer than half the lines survive the move.
        kept = note("alpha", 10).splitlines(keepends=True)[:4]
        (src / "b.md").write_text("".join(kept) + note("other", 8))
        (src / "a.md").unlink()
        settle(eng)
        statuses = sorted(e.status for e in review.changes(eng.workspace))
    assert statuses == [ChangeStatus.ADDED, ChangeStatus.DELETED]
