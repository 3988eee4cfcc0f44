"""The engine side of a world (``swfs.history.world``) without FUSE: a snapshot
whose parses the cache lacks is parsed on demand without writing the store;
the baseline of then; names that do not exist."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
import trio

from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.history import snapshots as history
from swfs.history.world import World, open_world
from swfs.store.fsutil import hash_bytes
from swfs.workspace import WorkspaceError


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def src(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    (s / "docs").mkdir(parents=True)
    (s / "docs" / "a.txt").write_text("alpha at the snapshot\n")
    (s / "data.csv").write_text("region,revenue\nNorth,1200\n")
    return s


def test_missing_parses_are_made_on_demand_and_the_store_is_not_written(src: Path) -> None:
    with Engine.open(src) as ws:
        ws.scan()  # hashed, never parsed: the cache has no text of these hashes
        ws.history.set_baseline()
        history.take_snapshot(ws.workspace, "raw")
        (src / "docs" / "a.txt").write_text("alpha rewritten later\n")
        ws.scan()
        assert (
            ws.workspace.store.parse_status(hash_bytes(b"alpha at the snapshot\n"), "text@2")
            is None
        )
    store = src / ".swfs"
    data = store / "db" / "data.mdb"
    before = _digest(data)

    with open_world(src, store, "raw") as world:
        rel = RelPath("docs/a.txt")
        view = world.views.view_state(rel)
        assert view is not None
        assert view.freshness is Freshness.PENDING
        assert world.views.view_unit_names(view) == ["pending.md"]

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(world.run_background)
                with trio.fail_after(120):
                    await world.views.wait_view(rel, 120)
                nursery.cancel_scope.cancel()

        trio.run(main)
        view = world.views.view_state(rel)
        assert view is not None
        assert view.freshness is Freshness.CURRENT
        assert view.source_hash == hash_bytes(b"alpha at the snapshot\n")
        names = list(world.views.view_unit_names(view))
        assert names == ["content.txt"]
        unit = world.views.view_unit(view, names[0])
        assert unit is not None
        text = unit.content.decode()
        assert "alpha at the snapshot" in text
        assert "rewritten" not in text
        assert text.splitlines()[0].endswith(' world="raw" -->')
        # The world's own parse is its own: the review of then can use it.
        assert world.reviews.review() == []
        other = world.views.view_state(RelPath("data.csv"))
        assert other is not None
        assert other.freshness is Freshness.PENDING  # never asked for: never parsed
    assert _digest(data) == before  # not one byte of the store's database


def test_baseline_of_then_and_names(src: Path) -> None:
    with Engine.open(src) as ws:
        ws.scan()
        ws.history.set_baseline()
        (src / "data.csv").write_text("region,revenue\nNorth,1350\n")
        ws.scan()
        history.take_snapshot(ws.workspace, "edited")
        ws.history.set_baseline()  # re-baselined after the snapshot: the old one is kept
        (src / "new.txt").write_text("later\n")
        ws.scan()
    store = src / ".swfs"
    with open_world(src, store, "edited") as world:
        assert world.info.baseline.startswith("baseline-")
        entries = world.reviews.review()
        assert [(e.rel, e.status.value) for e in entries] == [("data.csv", "modified")]
        summary = world.reviews.review_summary().decode()
        assert f'baseline="{world.info.baseline}"' in summary.splitlines()[0]
        assert "kept when re-baselined" in summary
        assert "new.txt" not in summary
        state = world.file_state(RelPath("data.csv"))
        assert state is not None
        assert state.hash == hash_bytes(b"region,revenue\nNorth,1350\n")
        assert state.baseline_hash == hash_bytes(b"region,revenue\nNorth,1200\n")
        with pytest.raises(OSError, match="Read-only"):
            world.writes.unlink("data.csv")
    with open_world(src, store, "baseline") as world:
        assert world.reviews.review() == []
        assert set(world.records) == {"docs/a.txt", "data.csv"}
        fd = world.open_file("data.csv")
        try:
            assert os.pread(fd, 100, 0) == b"region,revenue\nNorth,1350\n"
        finally:
            os.close(fd)
    with pytest.raises(WorkspaceError, match="'nope': no such snapshot or submission"):
        World(src, store, "nope")


def test_baseline_bytes_never_copied_come_from_src_while_unchanged(src: Path) -> None:
    with Engine.open(src) as ws:
        ws.scan()
        ws.history.set_baseline()  # no snapshot: the baseline's bytes are in SRC only
    with open_world(src, src / ".swfs", "baseline") as world:
        assert not world.blobs.has(hash_bytes(b"alpha at the snapshot\n"))
        fd = world.open_file("docs/a.txt")
        try:
            assert os.pread(fd, 100, 0) == b"alpha at the snapshot\n"
        finally:
            os.close(fd)
        (src / "docs" / "a.txt").write_text("changed behind everyone's back\n")
        with pytest.raises(OSError, match="not kept") as exc:
            world.open_file("docs/a.txt")
        assert exc.value.errno == errno.EIO
