"""Connections that store any path: a name that is not UTF-8 is stored in
its escaped form, and a statement binding one runs exactly once."""

from __future__ import annotations

import os

from swfs.sqlitetext import PathSafeConnection, escaped

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
