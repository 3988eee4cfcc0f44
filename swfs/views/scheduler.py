"""The parse workers as one owned object.

``ParseScheduler`` runs ``workers`` tasks that take paths from a
``ParseQueue`` (coalesced per path, with a front lane for files a
reader waits on) and parse them one at a time each.

A parse the queue is asked for because a file changed (``later``) waits
for a pause in the changes, the way the recorder does
(``swfs.history.recorder``): while a program rewrites thousands of files
(a git checkout), each parse, its record and the notices it sends would
compete with the program and with the request loop for the interpreter.
The deferred paths are released together once no change has come for
QUIET seconds, or MAX_DELAY after the first of them was deferred, or at
once when someone waits for views (``hurry``: ``swfs sync``, a search).
A file a reader waits on goes to the front lane at once, deferred or not.  It is background work
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

# A deferred parse waits until no change has come for QUIET seconds, at
# most MAX_DELAY after the first deferred one (seconds of the trio clock).
QUIET = 0.5
MAX_DELAY = 5.0


class ParseQueue:
    """Paths waiting for a parse, coalesced, with a front lane for readers."""

    def __init__(self, *, quiet: float | None = None, max_delay: float | None = None) -> None:
        self._front: OrderedDict[str, None] = OrderedDict()
        self._back: OrderedDict[str, None] = OrderedDict()
        # Changed files waiting for a pause in the changes (``later``).
        self._later: OrderedDict[str, None] = OrderedDict()
        self._quiet = QUIET if quiet is None else quiet
        self._max_delay = MAX_DELAY if max_delay is None else max_delay
        self._later_since = 0.0  # when the first of _later was deferred
        self._last_change = 0.0  # when the last ``later`` submit came
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._again_later: set[str] = set()  # of _again: changed, so deferred
        # One parked task per idle worker; each submit wakes one of them.  (A
        # shared Event that every idle worker replaced woke only the last.)
        self._idle = trio.lowlevel.ParkingLot()
        self._started: dict[str, float] = {}  # path -> when a worker took it
        self._done: dict[str, trio.Event] = {}

    def __len__(self) -> int:
        return len(self._front) + len(self._back) + len(self._later) + len(self._busy)

    def submit(self, rel: str, *, front: bool = False, later: bool = False) -> None:
        """Queue ``rel``: ``front`` for a reader that waits on it; ``later``
        for a change, deferred to a pause in the changes (on the trio loop)."""
        later = later and not front
        if later:
            self._last_change = trio.current_time()
        if rel in self._busy:
            # Parsed again once it is done: deferred if every ask was a change.
            if not later:
                self._again_later.discard(rel)
            elif rel not in self._again:
                self._again_later.add(rel)
            self._again.add(rel)
            return
        if front:
            self._back.pop(rel, None)
            self._later.pop(rel, None)
            self._front[rel] = None
            self._front.move_to_end(rel)
        elif rel in self._front or rel in self._back:
            return  # queued already: coalesced
        elif later:
            if self._later:
                self._later[rel] = None
                return  # a worker already waits for their pause
            self._later_since = self._last_change
            self._later[rel] = None
        else:
            self._later.pop(rel, None)
            self._back[rel] = None
        self._idle.unpark()

    def hurry(self) -> None:
        """Someone waits for the views: the deferred parses are due now."""
        if self._later:
            self._release()

    def _release(self) -> None:
        self._back.update(self._later)
        self._later.clear()
        self._idle.unpark_all()

    def _due(self) -> float:
        """When the deferred paths are released (trio clock)."""
        return min(self._last_change + self._quiet, self._later_since + self._max_delay)

    async def take(self) -> str:
        while not (self._front or self._back):
            if not self._later:
                await self._idle.park()
                continue
            wait = self._due() - trio.current_time()
            if wait <= 0:
                self._release()
                continue
            with trio.move_on_after(wait):
                await self._idle.park()
        lane = self._front if self._front else self._back
        rel, _ = lane.popitem(last=False)
        self._busy.add(rel)
        self._started[rel] = time.monotonic()
        if self._front or self._back or self._later:
            # More work than this worker (or a pause to wait for): pass the
            # wake-up on.
            self._idle.unpark()
        return rel

    def finish(self, rel: str, *, again: bool) -> None:
        self._busy.discard(rel)
        self._started.pop(rel, None)
        if again or rel in self._again:
            # Changed while it was parsed: deferred like any change; a parse
            # that asks for another (``again``) gets it at once.
            later = not again and rel in self._again_later
            self._again.discard(rel)
            self._again_later.discard(rel)
            self.submit(rel, later=later)
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
        return not (self._front or self._back or self._later or self._busy)

    def report(self) -> list[str]:
        """The queue as lines, for the daemon's SIGUSR1 dump."""
        now = time.monotonic()
        lines = [
            f"parse queue: {len(self._busy)} parsing, {len(self._front)} in front, "
            f"{len(self._back)} behind, {len(self._later)} waiting for a pause in changes"
        ]
        lines += [f"  parsing {rel} for {now - t:.1f} s" for rel, t in self._started.items()]
        lines += [f"  front {rel}" for rel in list(self._front)[:50]]
        lines += [f"  queued {rel}" for rel in list(self._back)[:50]]
        if len(self._back) > 50:
            lines.append(f"  ... and {len(self._back) - 50} more")
        lines += [f"  deferred {rel}" for rel in list(self._later)[:50]]
        if len(self._later) > 50:
            lines.append(f"  ... and {len(self._later) - 50} more deferred")
        return lines

    def progress(self, rel: str) -> tuple[str, float] | None:
        """Where ``rel`` is: ("parsing", seconds since a worker took it),
        ("queued", 0) or None when it is not in the queue."""
        started = self._started.get(rel)
        if started is not None:
            return "parsing", time.monotonic() - started
        if rel in self._front or rel in self._back or rel in self._later:
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
