"""The parse workers as one owned object.

``ParseScheduler`` runs ``workers`` tasks that take paths from a
``ParseQueue`` (coalesced per path, with a front lane for files a
reader waits on) and parse them one at a time each.  It is background work
like the daemon's others: ``nursery.start(scheduler.run)`` starts it once
every worker waits for work, ``stop()`` ends it.  A bug in one parse is
logged and never stops the other files from being parsed.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger(__name__)


class ParseQueue:
    """Paths waiting for a parse, coalesced, with a front lane for readers."""

    def __init__(self) -> None:
        self._front: OrderedDict[str, None] = OrderedDict()
        self._back: OrderedDict[str, None] = OrderedDict()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        # One parked task per idle worker; each submit wakes one of them.  (A
        # shared Event that every idle worker replaced woke only the last.)
        self._idle = trio.lowlevel.ParkingLot()
        self._started: dict[str, float] = {}  # path -> when a worker took it
        self._done: dict[str, trio.Event] = {}

    def __len__(self) -> int:
        return len(self._front) + len(self._back) + len(self._busy)

    def submit(self, rel: str, *, front: bool = False) -> None:
        if rel in self._busy:
            self._again.add(rel)
            return
        if front:
            self._back.pop(rel, None)
            self._front[rel] = None
            self._front.move_to_end(rel)
        elif rel not in self._front:
            self._back[rel] = None
        self._idle.unpark()

    async def take(self) -> str:
        while not (self._front or self._back):
            await self._idle.park()
        lane = self._front if self._front else self._back
        rel, _ = lane.popitem(last=False)
        self._busy.add(rel)
        self._started[rel] = time.monotonic()
        if self._front or self._back:
            self._idle.unpark()  # more work than this worker: pass the wake-up on
        return rel

    def finish(self, rel: str, *, again: bool) -> None:
        self._busy.discard(rel)
        self._started.pop(rel, None)
        if again or rel in self._again:
            self._again.discard(rel)
            self.submit(rel)
        event = self._done.pop(rel, None)
        if event is not None:
            event.set()

    def event(self, rel: str) -> trio.Event:
        if rel not in self._done:
            self._done[rel] = trio.Event()
        return self._done[rel]

    def wake(self, rel: str) -> None:
        """Wake who waits for ``rel``'s parse (``event``): it made progress
        (a range of a long document is in, swfs.ranged) without ending."""
        event = self._done.pop(rel, None)
        if event is not None:
            event.set()

    def idle(self) -> bool:
        return not (self._front or self._back or self._busy)

    def report(self) -> list[str]:
        """The queue as lines, for the daemon's SIGUSR1 dump."""
        now = time.monotonic()
        lines = [
            f"parse queue: {len(self._busy)} parsing, {len(self._front)} in front, "
            f"{len(self._back)} behind"
        ]
        lines += [f"  parsing {rel} for {now - t:.1f} s" for rel, t in self._started.items()]
        lines += [f"  front {rel}" for rel in list(self._front)[:50]]
        lines += [f"  queued {rel}" for rel in list(self._back)[:50]]
        if len(self._back) > 50:
            lines.append(f"  ... and {len(self._back) - 50} more")
        return lines

    def progress(self, rel: str) -> tuple[str, float] | None:
        """Where ``rel`` is: ("parsing", seconds since a worker took it),
        ("queued", 0) or None when it is not in the queue."""
        started = self._started.get(rel)
        if started is not None:
            return "parsing", time.monotonic() - started
        if rel in self._front or rel in self._back:
            return "queued", 0.0
        return None


class ParseScheduler:
    def __init__(
        self, queue: ParseQueue, parse_one: Callable[[str], Awaitable[bool]], *, workers: int
    ) -> None:
        """``parse_one(rel)`` parses ``rel`` and returns True when it changed
        meanwhile and needs another parse."""
        self.queue = queue
        self.parse_one = parse_one
        self.workers = max(1, workers)
        self._cancel = trio.CancelScope()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self._cancel:
            async with trio.open_nursery() as nursery:
                for i in range(self.workers):
                    nursery.start_soon(self._worker, name=f"parse worker {i + 1}")
                task_status.started()

    def stop(self) -> None:
        self._cancel.cancel()

    async def _worker(self) -> None:
        queue = self.queue
        while True:
            rel = await queue.take()
            again = False
            try:
                again = await self.parse_one(rel)
            except Exception:
                # A bug here must not stop the other files from being parsed.
                log.exception("%s: unexpected error while parsing", rel)
            finally:
                queue.finish(rel, again=again)
