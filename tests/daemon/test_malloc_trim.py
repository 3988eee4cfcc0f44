"""mountd.malloc.trim_periodically: the daemon hands freed heap memory back
to the kernel again and again for its whole life, off the trio thread."""

from __future__ import annotations

import threading

import pytest
import trio

from mountd import malloc


def test_trims_repeatedly_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    if malloc._libc() is None:
        pytest.skip("not glibc: malloc_trim unavailable")
    calls: list[bool] = []
    loop_thread = threading.get_ident()
    done = trio.Event()

    def trim() -> bool:
        calls.append(threading.get_ident() != loop_thread)
        if len(calls) == 3:
            trio.from_thread.run_sync(done.set)
        return True

    monkeypatch.setattr(malloc, "trim", trim)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(malloc.trim_periodically, 0.01)
            with trio.fail_after(60):  # generous: a busy machine
                await done.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert len(calls) >= 3
    assert all(calls)  # never on the loop's thread
