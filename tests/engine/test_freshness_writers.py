"""Freshness with open writers on the engine, without FUSE (issue 37): from a
session's first write until its record, and from a change behind the mount
until its record, no view, header, state, count or search hit of the file
says current; a read of such a view waits for the record and the re-parse
(``wait_view``), or serves the prior view marked stale."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swfs.api import Freshness, RelPath, WriteSession
from swfs.engine import Engine
from swfs.find.search import Caller
from swfs.store.fsutil import hash_file
from swfs.workspace import Config

REL = RelPath("notes.txt")
OLD = b"the quarterly figures, first draft\n"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "ws"
    src.mkdir()
    (src / REL).write_bytes(OLD)
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        eng.search_index.catch_up()
        yield eng


def header(engine: Engine) -> str:
    view = engine.views.view_state(REL)
    assert view is not None
    unit = engine.views.view_unit(view, "content.txt")
    assert unit is not None
    return unit.content.decode().partition("\n")[0]


def opened(engine: Engine) -> WriteSession:
    path = engine.workspace.abspath(REL)
    return engine.workspace.writes.begin_write(
        REL, lambda: os.open(path, os.O_RDWR), truncate=False
    )


def claims_current(engine: Engine) -> list[str]:
    """Every place that says current for ``REL`` now."""
    out = []
    if engine.workspace.freshness(REL) is Freshness.CURRENT:
        out.append("freshness")
    state = engine.workspace.file_state(REL)
    if state is not None and state.freshness is Freshness.CURRENT:
        out.append("file_state")
    if 'freshness="current"' in header(engine):
        out.append("header")
    if engine.views.counts()["current"]:
        out.append("counts")
    for hit in engine.search_index.search("quarterly", Caller(0)).hits:
        if str(hit.freshness) == "current":
            out.append("search hit")
    return out


def test_a_writer_with_unrecorded_changes_makes_every_claim_stale(engine: Engine) -> None:
    old = hash_file(engine.workspace.abspath(REL))
    every = ["freshness", "file_state", "header", "counts", "search hit"]
    assert claims_current(engine) == every
    session = opened(engine)
    assert engine.workspace.settled(REL)
    assert claims_current(engine) == every  # open, nothing written yet
    session.write(0, b"THE")
    assert not engine.workspace.settled(REL)
    assert claims_current(engine) == []
    head = header(engine)
    assert f'hash="b3:{old[:16]}" freshness="stale" current="unrecorded"' in head
    view = engine.views.view_state(REL)
    assert view is not None
    assert (view.source_hash, view.current_hash) == (old, None)
    session.release()  # records the new version
    new = hash_file(engine.workspace.abspath(REL))
    assert engine.workspace.settled(REL)
    assert engine.workspace.file_state(REL).hash == new  # type: ignore[union-attr]
    assert engine.workspace.freshness(REL) is Freshness.STALE  # until its parse lands
    trio.run(engine.drain)
    assert engine.workspace.freshness(REL) is Freshness.CURRENT
    assert f'hash="b3:{new[:16]}" freshness="current" current="b3:{new[:16]}"' in header(engine)


def test_a_change_behind_the_mount_is_stale_until_recorded(engine: Engine) -> None:
    with open(engine.workspace.abspath(REL), "ab") as f:
        f.write(b"appended behind the mount\n")
    assert not engine.workspace.settled(REL)
    assert claims_current(engine) == []
    assert engine.views.unsettled() == [REL]


def test_a_read_waits_for_the_writers_record_then_the_parse(engine: Engine) -> None:
    session = opened(engine)
    session.write(0, b"THE")
    seen: list[Freshness | None] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run_background)
            # The writer keeps the file open: the read gives up after its bound.
            await engine.views.wait_view(REL, 0.3)
            seen.append(engine.workspace.freshness(REL))

            async def close_soon() -> None:
                await trio.sleep(0.05)
                await trio.to_thread.run_sync(session.release)

            nursery.start_soon(close_soon)
            await engine.views.wait_view(REL, 60)  # the record, then the re-parse
            seen.append(engine.workspace.freshness(REL))
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert seen == [Freshness.STALE, Freshness.CURRENT]
    assert 'freshness="current"' in header(engine)


def test_a_read_records_a_change_behind_the_mount(engine: Engine) -> None:
    with open(engine.workspace.abspath(REL), "ab") as f:
        f.write(b"appended behind the mount\n")
    new = hash_file(engine.workspace.abspath(REL))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run_background)
            await engine.views.wait_view(REL, 60)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert engine.workspace.freshness(REL) is Freshness.CURRENT
    assert f'current="b3:{new[:16]}"' in header(engine)


def test_renders_name_no_current_content_while_a_writer_holds_changes(engine: Engine) -> None:
    from swfs.find.render import Renderer

    renderer = Renderer(engine.workspace, engine.history)
    old = hash_file(engine.workspace.abspath(REL))
    assert renderer.current_hash(REL) == old
    session = opened(engine)
    session.write(0, b"THE")
    assert renderer.current_hash(REL) is None  # a page of it is stale at best
    assert renderer.older_hashes(REL, None)[0] == old  # the prior image's content
    session.release()
    assert renderer.current_hash(REL) == hash_file(engine.workspace.abspath(REL))
