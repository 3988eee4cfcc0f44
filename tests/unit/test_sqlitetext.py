"""Connections that store any path: a name that is not UTF-8 is stored in
its escaped form, and a statement binding one runs exactly once."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from swfs.evidence import access as jmod
from swfs.store.sqlitetext import PathSafeConnection, escaped, in_list, pow2_chunks

BAD = os.fsdecode(b"caf\xe9.txt")  # a Latin-1 name: lone surrogates once decoded


def test_a_batch_holding_one_undecodable_name_is_stored_once_and_whole() -> None:
    con = PathSafeConnection(":memory:")
    con.execute("CREATE TABLE t(seq INTEGER PRIMARY KEY, path TEXT)")
    # One statement of many rows, as the access journal stores its events:
    # had the unescaped attempt run part of it, the retry would collide.
    rows = [(1, "a.txt"), (2, BAD), (3, "naïve.md")]
    con.execute("INSERT INTO t VALUES (?,?),(?,?),(?,?)", [v for r in rows for v in r])
    got = con.execute("SELECT seq, path FROM t ORDER BY seq").fetchall()
    assert got == [(1, "a.txt"), (2, "caf\\xe9.txt"), (3, "naïve.md")]
    assert escaped(BAD) == "caf\\xe9.txt"
    # Lookups by the name find the row under the same escaped form.
    assert con.execute("SELECT seq FROM t WHERE path=?", (BAD,)).fetchall() == [(2,)]


def test_many_rows_with_an_undecodable_name_each_stored_once() -> None:
    con = PathSafeConnection(":memory:")
    con.execute("CREATE TABLE t(seq INTEGER PRIMARY KEY, path TEXT)")
    con.executemany("INSERT INTO t VALUES (?,?)", [(1, "ok"), (2, BAD), (3, "also ok")])
    assert con.execute("SELECT count(*), count(DISTINCT seq) FROM t").fetchone() == (3, 3)
    named = con.execute("SELECT seq FROM t WHERE path=:p", {"p": BAD}).fetchall()
    assert named == [(2,)]


def test_chunks_are_powers_of_two_in_order_and_cover_everything() -> None:
    items = list(range(1000))
    for n in (0, 1, 2, 3, 7, 255, 256, 257, 511, 1000):
        chunks = [list(c) for c in pow2_chunks(items[:n], 256)]
        assert [x for c in chunks for x in c] == items[:n]
        assert all(len(c) & (len(c) - 1) == 0 and 0 < len(c) <= 256 for c in chunks)
    # Every batch length gives one of nine shapes: 1, 2, 4, ..., 256.
    shapes = {len(c) for n in range(1, 600) for c in pow2_chunks(items[:n], 256)}
    assert shapes == {1 << k for k in range(9)}


def test_an_in_list_is_padded_to_a_power_of_two_and_matches_the_same_rows() -> None:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
    for want in ([5], [1, 2, 3], list(range(10, 30)), [99, 0, 42, 7, 8]):
        marks, params = in_list(want)
        assert len(params) & (len(params) - 1) == 0
        assert len(params) < 2 * len(want)
        assert marks.count("?") == len(params)
        got = [r for (r,) in con.execute(f"SELECT id FROM t WHERE id IN {marks}", params)]
        assert sorted(got) == sorted(want)
    assert in_list([]) == ("()", [])


def _sqlite_memory() -> Callable[[], int] | None:
    """``sqlite3_memory_used`` of the library the sqlite3 module runs on, if
    it can be reached from ctypes (a shared libsqlite3)."""
    for name in ("sqlite3", "libsqlite3.so.0"):
        path = ctypes.util.find_library(name) or name
        try:
            fn = ctypes.CDLL(path).sqlite3_memory_used
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int64
        return lambda: int(fn())
    return None


@pytest.mark.skipif(_sqlite_memory() is None, reason="no shared libsqlite3 to ask")
def test_the_journal_keeps_few_statements_whatever_its_batch_lengths(tmp_path: Path) -> None:
    """The access journal stores each flush's events in one statement of many
    rows.  A statement per batch length filled the sqlite3 module's cache of
    128 prepared statements with programs of up to 256 rows each: 16 MB."""
    used = _sqlite_memory()
    assert used is not None
    src, store = tmp_path / "src", tmp_path / "store"
    src.mkdir()
    store.mkdir()
    j = jmod.Journal(store, file_hash=lambda rel: None, src=src)
    try:
        j.on_list(os.getpid(), "warm", ["x"])
        j.flush()
        before = used()
        seen = 0
        for n in range(1, 200, 3):  # 67 batch lengths, from 1 to 199 events
            for i in range(n):
                j.on_list(os.getpid(), f"d{seen + i}", [f"n{i}"])
            assert j.flush() == n
            seen += n
        grew = used() - before
        stored = len(list(jmod.iter_events(j._db, kind="list")))
    finally:
        j.close()
    assert stored == seen + 1
    # One shape per length: 9.1 MB here; nine shapes: under 1 MB.
    assert grew < 3 * 2**20, f"sqlite grew by {grew / 2**20:.1f} MB"
