"""The parse workers as one owned object.

``ParseScheduler`` runs ``workers`` tasks that take paths from a
``swfs.engine.ParseQueue`` (coalesced per path, with a front lane for files a
reader waits on) and parse them one at a time each.  It is background work
like the daemon's others: ``nursery.start(scheduler.run)`` starts it once
every worker waits for work, ``stop()`` ends it.  A bug in one parse is
logged and never stops the other files from being parsed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from swfs.engine import ParseQueue

log = logging.getLogger(__name__)


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
