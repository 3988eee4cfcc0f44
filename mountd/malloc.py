"""Keep glibc's heap from growing with the daemon's thread count.

glibc gives each thread that meets contention an arena of its own (up to 8
per core), and memory freed in an arena is kept there for the next
allocation of that arena.  The daemon's worker threads (hashing, LMDB,
``trio.to_thread``) then each hold megabytes of freed buffers: over a few
thousand small operations through the mount, RSS grew to several times
what it started at, in a dozen or more 64 MiB arenas, while Python's own
heap (tracemalloc) stayed a small part of it.

``limit_arenas`` caps the arenas (``M_ARENA_MAX``, what the
``MALLOC_ARENA_MAX`` variable does) before any thread is started, so the
limit is the one glibc reads when the first thread arena is made.
``fix_mmap_threshold`` keeps allocations of ``MMAP_THRESHOLD`` bytes and
more out of the heap for the daemon's whole life.  glibc maps such a block
on its own, but after the first one is freed it raises the threshold to
that block's size (up to 32 MiB), and from then on buffers of hundreds of
KiB to a few MiB (a tantivy segment's writer, a burst of journal rows, a
file's read) are carved from the heap and leave holes there that the
smaller blocks around them keep in memory.  Over a long run of small
operations through the mount, malloc held more free (unused, still
resident) than in use, and a fraction of that with the threshold fixed
(``mallopt``, what ``MALLOC_MMAP_THRESHOLD_`` does); the daemon's RssAnon
shrank by about a third.
``trim`` hands free heap memory back to the kernel (``malloc_trim``), and
``trim_periodically`` does so every ``TRIM_SECONDS`` for the daemon's whole
life: what a burst of big transient allocations (a batch of journal rows,
a write's lineage, a parse's output) leaves free in the arenas is otherwise
kept for good (about a quarter of the daemon's RSS over a long run of
small operations).  All do nothing where the C library is not glibc.

``heap_line`` says what malloc holds (``mallinfo2``) and how much of it is
sqlite's (``sqlite3_memory_used``), for the SIGUSR1 dump: the part of a
growing RSS that tracemalloc cannot see.
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
M_MMAP_THRESHOLD = -3
ARENAS = 2
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value
ENV = "MALLOC_ARENA_MAX"  # set by the user: theirs wins
MMAP_ENV = "MALLOC_MMAP_THRESHOLD_"
TRIM_SECONDS = 30.0


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def _mallopt(env: str, param: int, name: str, value: int) -> bool:
    """``mallopt(param, value)`` unless the user set ``env``; True if done."""
    if os.environ.get(env):
        return False
    libc = _libc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(param, value))
    if not ok:
        log.debug("mallopt(%s, %d) refused", name, value)
    return ok


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas; True if done.  Call before threads start."""
    return _mallopt(ENV, M_ARENA_MAX, "M_ARENA_MAX", arenas)


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Map every block of ``size`` bytes or more on its own, for good (no
    dynamic threshold); True if done.  The user's variable wins."""
    return _mallopt(MMAP_ENV, M_MMAP_THRESHOLD, "M_MMAP_THRESHOLD", size)


def trim() -> bool:
    """Give free heap memory back to the kernel; True if some was."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


class _MallInfo2(ctypes.Structure):
    _fields_ = [  # noqa: RUF012 (ctypes' own protocol)
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _sqlite() -> ctypes.CDLL | None:
    """The sqlite library Python's sqlite3 module uses (loaded already)."""
    import sqlite3  # noqa: F401 (loads the shared library this looks up)

    for name in (ctypes.util.find_library("sqlite3"), "libsqlite3.so.0"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, "sqlite3_memory_used"):
            lib.sqlite3_memory_used.restype = ctypes.c_int64
            return lib
    return None


def heap_figures() -> dict[str, int]:
    """Bytes: malloc's in use (``in_use``: small blocks and mmapped big ones),
    held free (``free``), and sqlite's share of what is in use (``sqlite``).
    A figure the C library cannot give is left out."""
    out: dict[str, int] = {}
    libc = _libc()
    info = getattr(libc, "mallinfo2", None) if libc is not None else None
    if info is not None:
        info.restype = _MallInfo2
        mi = info()
        out["in_use"] = mi.uordblks + mi.hblkhd
        out["free"] = mi.fordblks
    lib = _sqlite()
    if lib is not None:
        out["sqlite"] = lib.sqlite3_memory_used()
    return out


def heap_line() -> str:
    """One line for the dump: ``malloc: in use 36.1 MB, free 4.2 MB, sqlite 3.5 MB``."""
    figures = heap_figures()
    if not figures:
        return "malloc: unavailable (not glibc)"
    names = {"in_use": "in use", "free": "free", "sqlite": "sqlite"}
    return "malloc: " + ", ".join(f"{names[k]} {v / 1e6:.1f} MB" for k, v in figures.items())


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
