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
