"""mountd.malloc.heap_figures: what malloc holds and sqlite's share, as the
SIGUSR1 dump reports them (the memory tracemalloc cannot see)."""

from __future__ import annotations

import ctypes
import sqlite3

import pytest
import trio

from bench.storage import _malloc_figures
from mountd import malloc
from mountd.dump import dump_text

MB = 1_000_000


def test_in_use_follows_a_c_allocation_and_its_free() -> None:
    libc = malloc._libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc 2.33+: no mallinfo2")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = malloc.heap_figures()["in_use"]
    blocks = [libc.malloc(64 * 1024) for _ in range(320)]  # 20 MiB of 64 KiB blocks
    try:
        held = malloc.heap_figures()["in_use"]
    finally:
        for b in blocks:
            libc.free(b)
    after = malloc.heap_figures()["in_use"]
    assert held - before >= 20 * 1024 * 1024
    assert held - after >= 20 * 1024 * 1024


def test_sqlite_share_follows_an_open_database() -> None:
    if malloc._sqlite() is None:
        pytest.skip("sqlite3_memory_used not found")
    before = malloc.heap_figures()["sqlite"]
    con = sqlite3.connect(":memory:")
    try:
        con.execute("CREATE TABLE t (x)")
        con.executemany("INSERT INTO t VALUES (?)", ((b"y" * 1000,) for _ in range(5000)))
        held = malloc.heap_figures()["sqlite"]
    finally:
        con.close()
    assert held - before > 4 * MB  # 5,000 rows of 1,000 bytes, in sqlite's pages


def test_the_dump_carries_the_line_and_the_bench_reads_it() -> None:
    async def dump() -> str:
        return dump_text()

    text = trio.run(dump)
    line = next(x for x in text.splitlines() if x.startswith("malloc: "))
    figures = _malloc_figures(text)
    if "unavailable" in line:
        assert figures == {}
        return
    assert set(figures) == {f"malloc_{k}" for k in malloc.heap_figures()}
    assert figures["malloc_in_use"] > 0
