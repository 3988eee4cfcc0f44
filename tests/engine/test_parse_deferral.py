"""A changed file's parse waits for a pause in the changes (a burst of
writes does not compete with its parses), and whoever waits for a view
never waits for that pause: a reader's wait and ``swfs sync`` start it at
once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.views import scheduler
from swfs.workspace import Config


async def poll_until(cond: Callable[[], bool], bound: float) -> None:
    """Until ``cond()`` holds, at most ``bound`` seconds (the caller asserts)."""
    with trio.move_on_after(bound):
        while True:
            if cond():
                return
            await trio.sleep(0.01)


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    # A pause no test waits for: whatever is parsed was started by a waiter.
    monkeypatch.setattr(scheduler, "QUIET", 3600.0)
    monkeypatch.setattr(scheduler, "MAX_DELAY", 7200.0)
    src = tmp_path / "ws"
    src.mkdir()
    (src / "a.txt").write_text("first\n")
    (src / "b.txt").write_text("first\n")
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        yield eng


def _deferred(eng: Engine, rel: str) -> bool:
    return f"  deferred {rel}" in eng.queue_report()


def _freshness(eng: Engine, rel: str) -> Freshness | None:
    rec = eng.workspace.store.get_file(rel)
    return None if rec is None else eng.views.freshness_now(rel, rec)


def _change(eng: Engine, rel: str, text: str) -> None:
    (eng.src / rel).write_text(text)
    eng.workspace.check_file(RelPath(rel), force=True)


def test_a_change_waits_a_reader_does_not(engine: Engine) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run_background)
            await trio.to_thread.run_sync(_change, engine, "a.txt", "second\n")
            await trio.to_thread.run_sync(_change, engine, "a.txt", "third\n")
            await poll_until(lambda: _deferred(engine, "a.txt"), 30)
            assert _deferred(engine, "a.txt")  # waits for the pause, once
            assert _freshness(engine, "a.txt") is Freshness.STALE
            # A reader waits: parsed now, not after the pause.
            await engine.views.wait_view(RelPath("a.txt"), 60)
            assert _freshness(engine, "a.txt") is Freshness.CURRENT
            assert not _deferred(engine, "a.txt")
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_sync_does_not_wait_for_the_pause(engine: Engine) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run_background)
            for rel in ("a.txt", "b.txt"):
                await trio.to_thread.run_sync(_change, engine, rel, f"{rel} changed\n")
            await poll_until(lambda: _deferred(engine, "b.txt"), 30)
            assert _deferred(engine, "a.txt")
            assert _deferred(engine, "b.txt")
            assert await engine.wait_all_current(60)  # swfs sync
            assert engine.views.counts()["current"] == 2
            nursery.cancel_scope.cancel()

    trio.run(main)
