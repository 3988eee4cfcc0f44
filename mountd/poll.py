"""Adaptive polling: keep the event loop hot for a moment after each request.

A FUSE round trip costs two wake-ups: the kernel wakes the daemon for the
request, and the daemon's reply wakes the caller.  When the two run on
different CPUs of a virtual machine each wake-up is an inter-processor
interrupt, and on the machines swfs is benchmarked on those dominate the
round trip (which takes more than twice as long as with both on one CPU).
Tools that walk a tree (find, grep -r, ls -lR) send their next request
within tens of microseconds of the last reply.  While the window is open the loop keeps
polling the FUSE descriptor instead of sleeping in epoll, so such a request
is picked up without the daemon having to be woken.  The window closes
``window`` seconds after the last request; an idle daemon sleeps as before.

Polling pauses while a handler waits on a worker thread (an engine call):
every pass of the loop takes the GIL, and the thread doing the actual work
needs it more.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio
import trio.lowlevel


class Poller:
    def __init__(self, window: float) -> None:
        self.window = window
        self._until = 0.0
        self._wake = trio.Event()
        self.passes = 0  # loop passes spent polling, ever
        self._holds = 0  # handlers waiting on a worker thread

    def touch(self) -> None:
        """A request was served: keep polling until ``window`` from now."""
        if self.window > 0:
            self._until = time.monotonic() + self.window
            self._wake.set()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Around a wait on a worker thread: leave it the GIL."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1
            self.touch()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.window <= 0:
            return
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while not self._holds and time.monotonic() < self._until:
                self.passes += 1
                await (
                    trio.lowlevel.checkpoint()
                )  # one pass of the loop: poll the descriptors, run what is ready
