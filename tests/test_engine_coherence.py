"""The engine's coherence without FUSE: parse workers run in parallel, a
write never goes ahead without its history, hard links share freshness,
and ``swfs check`` finds views that claim to be current when they are not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from swfs.engine import Engine, ParseQueue
from swfs.parsework import WorkerLimits
from swfs.workspace import Config


async def poll_until(cond: Callable[[], bool], bound: float) -> None:
    """Until ``cond()`` holds, at most ``bound`` seconds (the caller asserts)."""
    with trio.move_on_after(bound):
        while True:
            if cond():
                return
            await trio.sleep(0.01)


# -- the parse queue wakes every idle worker -----------------------------------------


def test_a_burst_of_jobs_after_idle_runs_on_every_worker() -> None:
    """Workers that went idle must all wake for a burst of jobs: 4 workers and
    8 jobs run 4 at a time, not one at a time."""
    queue = ParseQueue()
    active = 0
    peak = 0
    done: list[str] = []
    gate = [trio.Event()]

    async def worker() -> None:
        nonlocal active, peak
        while True:
            rel = await queue.take()
            active += 1
            peak = max(peak, active)
            await gate[0].wait()
            active -= 1
            done.append(rel)
            queue.finish(rel, again=False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(worker)
            await trio.testing.wait_all_tasks_blocked()  # every worker idle
            for i in range(8):
                queue.submit(f"f{i}.txt")
            await trio.testing.wait_all_tasks_blocked()
            assert active == 4, f"{active} of 4 workers took a job"
            gate[0].set()
            gate[0] = trio.Event()
            await trio.testing.wait_all_tasks_blocked()
            assert active == 4  # the second half runs side by side too
            gate[0].set()
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(done) == sorted(f"f{i}.txt" for i in range(8))
            assert queue.idle()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert peak == 4


def test_the_queue_keeps_coalescing_and_its_front_lane() -> None:
    queue = ParseQueue()
    for rel in ("a", "b", "c", "a", "b"):
        queue.submit(rel)
    queue.submit("c", front=True)

    async def main() -> list[str]:
        return [await queue.take() for _ in range(3)]

    assert trio.run(main) == ["c", "a", "b"]
    progress = queue.progress("c")
    assert progress is not None
    assert progress[0] == "parsing"
    queue.submit("a")  # written while being parsed: parsed again afterwards
    queue.finish("a", again=False)
    assert queue.progress("a") == ("queued", 0.0)
    assert queue.progress("zzz") is None


def test_engine_reparses_in_parallel_once_workers_went_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    config = Config(limits=WorkerLimits(workers=4), rescan_interval=0)
    active = 0
    peak = 0
    gate = trio.Event()
    real = Engine._parse_one

    async def counting(self: Engine, pool: object, rel: str) -> bool:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            await gate.wait()
            return await real(self, pool, rel)  # type: ignore[arg-type]
        finally:
            active -= 1

    with Engine.open(src, tmp_path / "store", config=config) as eng:
        eng.scan()
        monkeypatch.setattr(Engine, "_parse_one", counting)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(eng.run_background)
                queue = eng.queue
                assert queue is not None
                await poll_until(queue.idle, 30)  # the workers go idle first
                for i in range(8):
                    (src / f"f{i}.txt").write_text(f"file {i}\n")
                await trio.to_thread.run_sync(eng.scan)  # requests 8 parses
                await poll_until(lambda: active >= 4, 30)
                assert active == 4
                gate.set()
                await poll_until(queue.idle, 60)
                nursery.cancel_scope.cancel()

        trio.run(main)
        assert peak == 4
        assert eng.counts()["current"] == 8
