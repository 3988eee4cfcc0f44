"""``mountd.hop.run_sync``: trio's worker threads without the per-call
renaming of the thread (two GIL round trips in the worker that the loop
thread waited on); otherwise as ``trio.to_thread.run_sync``: the result or
the exception, the caller's context, a limiter that bounds the threads, a
cancelled caller that still waits for its thread."""

from __future__ import annotations

import contextvars
import threading
import time

import pytest
import trio

from mountd import hop

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("WHO", default="nobody")


def _os_name() -> str:
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        return f.read().strip()


def test_a_trip_answers_as_the_call_would() -> None:
    loop_thread = threading.get_ident()

    def work(x: int) -> tuple[int, bool, str, str]:
        return x * 2, threading.get_ident() != loop_thread, WHO.get(), _os_name()

    def boom() -> None:
        raise ValueError("bad input")

    async def main() -> None:
        limiter = trio.CapacityLimiter(2)
        WHO.set("request 7")
        doubled, off_loop, who, before = await hop.run_sync(work, 21, limiter=limiter)
        assert (doubled, off_loop, who) == (42, True, "request 7")
        # The OS thread keeps the name the thread cache gave it: no renaming
        # per call (trio.to_thread names it after the call and back).
        assert "work" not in before
        with pytest.raises(ValueError, match="bad input"):
            await hop.run_sync(boom, limiter=limiter)
        assert limiter.borrowed_tokens == 0

    trio.run(main)


def test_the_limiter_bounds_the_threads_at_once() -> None:
    now = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
        time.sleep(0.02)
        with lock:
            now -= 1

    async def main() -> None:
        limiter = trio.CapacityLimiter(2)
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(lambda: hop.run_sync(work, limiter=limiter))

    trio.run(main)
    assert most == 2


def test_a_cancelled_caller_waits_for_its_thread() -> None:
    release = threading.Event()
    done: list[bool] = []

    def work() -> None:
        assert release.wait(60)
        done.append(True)

    def later() -> None:
        time.sleep(0.2)  # after the cancellation below
        release.set()

    async def main() -> None:
        limiter = trio.CapacityLimiter(1)
        with trio.move_on_after(0.05):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, later)
                await hop.run_sync(work, limiter=limiter)
        assert done == [True]  # not abandoned: the cancellation waited for it

    trio.run(main)
