"""A trip to a worker thread that costs the loop as little as it can.

``run_sync`` is ``trio.to_thread.run_sync`` for the daemon's own blocking
calls (the write protocol's slow steps, engine calls, kernel
notifications), on the same thread cache (``trio.lowlevel.start_thread_soon``)
and with the same rules: the caller waits for the thread even when
cancelled, a limiter bounds the threads at once, the call runs in a copy of
the caller's context (``mountd.caller``'s ``REQUEST`` with it).

What it leaves out is what the daemon never uses and the loop paid for at
every trip: naming the OS thread after each call and back (two ctypes calls
in the worker, each a release and a reacquisition of the GIL the loop
thread waits for), and the bookkeeping behind ``trio.from_thread`` (nothing
the daemon runs in a worker calls back into trio: a result goes back with
the return).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio
import trio.lowlevel

if TYPE_CHECKING:
    import outcome

T = TypeVar("T")


def _not_now(raise_cancel: Any) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # the thread runs on: its result is awaited


async def run_sync(fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter) -> T:
    """``fn(*args)`` in a worker thread, holding one of ``limiter``'s tokens."""
    await trio.lowlevel.checkpoint_if_cancelled()
    borrower = object()  # one token per call, as trio's own
    await limiter.acquire_on_behalf_of(borrower)
    try:
        task = trio.lowlevel.current_task()
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[T]) -> None:
            with contextlib.suppress(trio.RunFinishedError):  # the loop is gone, the task too
                token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        call = functools.partial(contextvars.copy_context().run, fn, *args)
        trio.lowlevel.start_thread_soon(call, deliver)
        got: T = await trio.lowlevel.wait_task_rescheduled(_not_now)
        return got
    finally:
        limiter.release_on_behalf_of(borrower)
