"""The parse scheduler as an owned object: started and stopped like the
daemon's other background work, every worker busy on a burst, a failing
parse confined to its file, a path that changed meanwhile parsed again."""

from __future__ import annotations

import trio
import trio.testing

from swfs.engine import ParseQueue
from swfs.views.scheduler import ParseScheduler


def test_workers_share_a_burst_survive_a_bug_and_stop() -> None:
    queue = ParseQueue()
    active = peak = 0
    seen: list[str] = []
    gate = trio.Event()
    changed_once = {"again.txt"}

    async def parse_one(rel: str) -> bool:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            await gate.wait()
            seen.append(rel)
            if rel == "bug.txt":
                raise KeyError("a bug in one parse")
            if rel in changed_once:
                changed_once.discard(rel)
                return True  # changed while parsing: parse it again
            return False
        finally:
            active -= 1

    async def main() -> None:
        scheduler = ParseScheduler(queue, parse_one, workers=3)
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            await trio.testing.wait_all_tasks_blocked()  # every worker waits for work
            for rel in ("a.txt", "bug.txt", "again.txt", "b.txt", "c.txt"):
                queue.submit(rel)
            await trio.testing.wait_all_tasks_blocked()
            assert active == 3  # one burst wakes every idle worker
            gate.set()
            await trio.testing.wait_all_tasks_blocked()
            assert queue.idle()
            scheduler.stop()
        # run() returned after stop(): the nursery closed without a cancel of its own.

    trio.run(main)
    assert peak == 3
    assert sorted(seen) == ["a.txt", "again.txt", "again.txt", "b.txt", "bug.txt", "c.txt"]


def _run_deferred(scenario) -> list[str]:  # type: ignore[no-untyped-def]
    """Run ``scenario(queue, clock, taken)`` on a manual clock with one
    worker that records what it takes; returns what it took."""
    queue = ParseQueue(quiet=0.5, max_delay=5.0)
    clock = trio.testing.MockClock()
    taken: list[str] = []

    async def worker() -> None:
        while True:
            rel = await queue.take()
            taken.append(rel)
            queue.finish(rel, again=False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker)
            await trio.testing.wait_all_tasks_blocked()
            await scenario(queue, clock, taken)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    return taken


async def _at(clock: trio.testing.MockClock, secs: float) -> None:
    clock.jump(secs)
    await trio.testing.wait_all_tasks_blocked()


def test_changed_files_wait_for_a_pause_and_are_parsed_once() -> None:
    async def scenario(queue, clock, taken):  # type: ignore[no-untyped-def]
        for rel in ("a", "b", "a"):
            queue.submit(rel, later=True)
        await _at(clock, 0.4)
        assert taken == []
        assert not queue.idle()
        assert queue.progress("a") == ("queued", 0.0)
        queue.submit("c", later=True)  # still changing: the pause starts again
        queue.submit("a", later=True)
        await _at(clock, 0.4)
        assert taken == []
        await _at(clock, 0.2)  # 0.6 s without a change
        assert taken == ["a", "b", "c"]  # each once, however often it changed
        assert queue.idle()

    _run_deferred(scenario)


def test_a_burst_that_never_pauses_is_parsed_within_the_maximum_delay() -> None:
    async def scenario(queue, clock, taken):  # type: ignore[no-untyped-def]
        for i in range(48):  # a change every 0.1 s for 4.8 s
            queue.submit(f"f{i}", later=True)
            await _at(clock, 0.1)
        assert taken == []
        for i in range(48, 60):  # on past the maximum delay
            queue.submit(f"f{i}", later=True)
            await _at(clock, 0.1)
        assert taken[:50] == [f"f{i}" for i in range(50)]  # released at 5 s
        assert queue.idle() is False  # the later ones wait for the next pause
        await _at(clock, 0.5)
        assert taken == [f"f{i}" for i in range(60)]

    _run_deferred(scenario)


def test_a_reader_and_a_sync_never_wait_for_the_pause() -> None:
    async def scenario(queue, clock, taken):  # type: ignore[no-untyped-def]
        for rel in ("a", "b", "c"):
            queue.submit(rel, later=True)
        queue.submit("b", front=True)  # a reader waits on b: at once
        await trio.testing.wait_all_tasks_blocked()
        assert taken == ["b"]
        queue.submit("d")  # not a change (the start's needs_parse): at once
        await trio.testing.wait_all_tasks_blocked()
        assert taken == ["b", "d"]
        queue.hurry()  # swfs sync, a search: the deferred ones start now
        await trio.testing.wait_all_tasks_blocked()
        assert taken == ["b", "d", "a", "c"]
        assert queue.idle()

    _run_deferred(scenario)


def test_a_file_changed_while_parsed_waits_for_the_pause_again() -> None:
    queue = ParseQueue(quiet=0.5, max_delay=5.0)

    async def main() -> None:
        queue.submit("a")
        assert await queue.take() == "a"
        queue.submit("a", later=True)  # written while being parsed
        queue.finish("a", again=False)
        assert queue.progress("a") == ("queued", 0.0)
        with trio.move_on_after(0.4):
            await queue.take()
            raise AssertionError("taken before the pause")
        assert await queue.take() == "a"
        queue.finish("a", again=True)  # the parse itself asks again: at once
        with trio.fail_after(0.01):
            assert await queue.take() == "a"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
