"""Keep glibc's heap from growing with the daemon's thread count.

glibc gives each thread that meets contention an arena of its own (up to 8
per core), and memory freed in an arena is kept there for the next
allocation of that arena.  The daemon's worker threads (hashing, LMDB,
``trio.to_thread``) then each hold megabytes of freed buffers: measured
over a few thousand small operations through the mount, RSS went from 70
to over 200 MB in fourteen-odd 64 MiB arenas while Python's own heap
(tracemalloc) held under 15 MB.

``limit_arenas`` caps the arenas (``M_ARENA_MAX``, what the
``MALLOC_ARENA_MAX`` variable does) before any thread is started, so the
limit is the one glibc reads when the first thread arena is made.
``trim`` hands free heap memory back to the kernel (``malloc_trim``), and
``trim_periodically`` does so every ``TRIM_SECONDS`` for the daemon's whole
life: what a burst of big transient allocations (a batch of journal rows,
a write's lineage, a parse's output) leaves free in the arenas is otherwise
kept for good (about a quarter of the daemon's RSS over a long run of
small operations).  All do nothing where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os

import trio

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # malloc.h
ARENAS = 2
ENV = "MALLOC_ARENA_MAX"  # set by the user: theirs wins
TRIM_SECONDS = 30.0


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas; True if done.  Call before threads start."""
    if os.environ.get(ENV):
        return False
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(M_ARENA_MAX, arenas))
    if not ok:
        log.debug("mallopt(M_ARENA_MAX, %d) refused", arenas)
    return ok


def trim() -> bool:
    """Give free heap memory back to the kernel; True if some was."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


async def trim_periodically(
    seconds: float = TRIM_SECONDS, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """``trim`` every ``seconds`` (in a worker thread: it walks the heap)."""
    task_status.started()
    if _libc() is None:
        return
    while True:
        await trio.sleep(seconds)
        await trio.to_thread.run_sync(trim)
