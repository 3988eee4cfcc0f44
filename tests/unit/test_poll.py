"""The daemon's adaptive polling: it polls only in a window after a request,
and an idle daemon goes back to sleep."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from mountd.poll import Poller


def run_poller(window: float, body: Callable[[Poller], Awaitable[None]]) -> None:
    """Run ``body`` beside a running Poller(window)."""

    async def main() -> None:
        poller = Poller(window)
        async with trio.open_nursery() as nursery:
            await nursery.start(poller.run)
            await body(poller)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_polls_after_a_request_then_sleeps() -> None:
    async def body(poller: Poller) -> None:
        await trio.sleep(0.02)
        assert poller.passes == 0  # nothing served yet: asleep
        poller.touch()
        await trio.sleep(0.02)
        after_window = poller.passes
        assert after_window > 0
        await trio.sleep(0.05)
        assert poller.passes == after_window  # the window closed: asleep again
        poller.touch()
        await trio.sleep(0.02)
        assert poller.passes > after_window

    run_poller(0.005, body)


def test_window_zero_never_polls() -> None:
    async def body(poller: Poller) -> None:
        poller.touch()
        await trio.sleep(0.02)
        assert poller.passes == 0

    run_poller(0.0, body)


def test_no_polling_while_a_handler_waits_on_a_thread() -> None:
    async def body(poller: Poller) -> None:
        with poller.paused():
            poller.touch()
            await trio.sleep(0.02)
            assert poller.passes == 0  # the worker thread gets the GIL
        await trio.sleep(0.01)
        assert poller.passes > 0  # and the window opens again when it is done

    run_poller(0.05, body)
