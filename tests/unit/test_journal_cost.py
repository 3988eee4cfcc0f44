"""What keeps the access journal cheap still records what it did: the hash
read from a file record's head, line ranges counted a chunk at a time, and
rows built only for what changed since the last batch."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from swfs.evidence import access as jmod
from swfs.store.records import FileRecord, Store


def _record(h: str | None) -> FileRecord:
    return FileRecord(h, 3, 1, 2, 3, 0o100644, 0, 0, "text@1")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "rel",
    [
        "a.txt",
        'dir/naïve "quoted" name.md',
        "deep/" + "x" * 600 + ".txt",  # a key too long for LMDB: stored under its hash
    ],
)
def test_file_hash_from_the_record_head_matches_the_full_record(tmp_path: Path, rel: str) -> None:
    store = Store(tmp_path / "store")
    h = "0123456789abcdef" * 4
    with store.write() as txn:
        store.put_file(txn, rel, _record(h))
    assert store.get_file_hash(rel) == h == store.get_file(rel).hash  # type: ignore[union-attr]
    assert store.get_file_hash(rel + ".missing") is None
    assert jmod.hash_lookup(type("Engine", (), {"store": store})())(rel) == h


def test_file_hash_of_a_record_written_otherwise_is_decoded(tmp_path: Path) -> None:
    """A record whose body does not start with the hash (older writers,
    another key order) is decoded whole: never a wrong answer."""
    store = Store(tmp_path / "store")
    from swfs.store.records import pkey

    body = json.dumps(
        {"s": 3, "m": 1, "c": 2, "i": 3, "mode": 0o100644, "u": 0, "g": 0, "p": None, "h": "f" * 64}
    )
    with store.write() as txn:
        txn.put(pkey("b.txt"), b"3,1,2,3\n" + body.encode(), db=store.dbs["files"])
    assert store.get_file_hash("b.txt") == "f" * 64


def _count_lines_naively(data: bytes, ranges: list[list[int]]) -> list[int] | None:
    start = min(s for s, _ in ranges)
    end = min(max(e for _, e in ranges), len(data))
    if start >= len(data):
        return None
    first = data.count(b"\n", 0, start) + 1
    return [first, first + data.count(b"\n", start, max(start, end - 1))]


def test_line_ranges_counted_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jmod, "LINES_CHUNK", 7)  # every range crosses chunk edges
    data = "".join(f"line {i}\n" for i in range(1, 501)).encode()
    f = tmp_path / "t.txt"
    f.write_bytes(data)
    line_100 = data.index(b"line 100\n")
    line_120_end = data.index(b"line 121\n")
    assert jmod.text_lines(f, [[line_100, line_120_end]]) == [100, 120]
    assert jmod.text_lines(f, [[0, len(data)]]) == [1, 500]
    assert jmod.text_lines(f, [[len(data) + 5, len(data) + 10]]) is None  # past the end
    for ranges in ([[3, 4]], [[0, 1]], [[50, 60], [700, 2000]], [[len(data) - 1, len(data) + 99]]):
        assert jmod.text_lines(f, ranges) == _count_lines_naively(data, ranges), ranges
    # A NUL in the first 8 KiB: not text, whatever the chunk size.
    (tmp_path / "b").write_bytes(b"x" * 5000 + b"\0" + b"\n" * 100)
    assert jmod.text_lines(tmp_path / "b", [[0, 10]]) is None


def _journal(tmp_path: Path) -> jmod.Journal:
    (tmp_path / "src").mkdir()
    (tmp_path / "store").mkdir()
    return jmod.Journal(
        tmp_path / "store", file_hash=lambda rel: "a" * 64, src=tmp_path / "src", flush_seconds=60
    )


def _details(j: jmod.Journal) -> dict[int, dict[str, object]]:
    con = sqlite3.connect(j.path)
    try:
        return {s: json.loads(d) for s, d in con.execute("SELECT seq, detail FROM events")}
    finally:
        con.close()


def test_a_batch_stores_each_change_once_and_nothing_unchanged(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    (tmp_path / "src" / "a.txt").write_text("one\ntwo\nthree\n")
    pid = os.getpid()
    j.on_open(1, pid, "a.txt")  # served from the kernel's cache: no read reaches us
    j.on_open(2, pid, "a.txt")
    j.on_read(2, 0, 4)
    assert j.flush() == 2
    assert _details(j) == {
        1: {"ranges": [], "bytes": 0, "open": True},
        2: {"ranges": [[0, 4]], "bytes": 4, "open": True},
    }
    assert j.flush() == 0  # nothing changed: nothing written
    j.on_close(1)
    j.on_read(2, 4, 4)
    j.on_close(2)
    j.on_open(3, pid, "a.txt")
    j.on_close(3)  # opened and closed within one batch: one row
    assert j.flush() == 3
    assert _details(j) == {
        1: {"ranges": [], "bytes": 0},
        2: {"ranges": [[0, 8]], "bytes": 8, "lines": [1, 2]},
        3: {"ranges": [], "bytes": 0},
    }
    assert j.flush() == 0
    j.close()


# -- the benchmark's measurement of it


def test_bench_cpu_between_uses_thread_ns_unless_a_thread_ended() -> None:
    from bench.journalcost import cpu_between, cpu_sample

    before = (1.00, {"10": 5_000_000, "11": 1_000_000})
    grown = (1.02, {"10": 9_000_000, "11": 1_000_000, "12": 2_000_000})  # 12 started
    assert cpu_between(before, grown) == pytest.approx(0.006)
    ended = (1.05, {"10": 9_000_000})  # 11 ended: its ns are gone, the ticks keep them
    assert cpu_between(before, ended) == pytest.approx(0.05)
    ticks, threads = cpu_sample(os.getpid())
    assert ticks >= 0
    assert str(os.getpid()) in threads


def test_bench_recording_cost_is_measured(tmp_path: Path) -> None:
    from bench.journalcost import RECORDED, recording_cpu_us

    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(5):
        (src / "d" / f"f{i}.txt").write_text(f"{i}\n")
    loop_us, thread_us = recording_cpu_us(tmp_path / "scratch", src)
    assert loop_us > 0
    assert thread_us > 0
    con = sqlite3.connect(tmp_path / "scratch" / "rec-journal" / jmod.DB_NAME)
    try:
        (n,) = con.execute("SELECT count(*) FROM events WHERE hash IS NOT NULL").fetchone()
    finally:
        con.close()
    assert n == RECORDED  # every open stored, each with the hash its record holds


def test_bench_rewrite_cost_is_measured(tmp_path: Path) -> None:
    from bench.journalcost import READ_FIRST, REWRITTEN, rewrite_cpu_us

    loop_us, thread_us = rewrite_cpu_us(tmp_path)
    assert loop_us > 0
    assert thread_us > 0
    con = sqlite3.connect(tmp_path / "rewrite-journal" / jmod.DB_NAME)
    try:
        kinds = dict(con.execute("SELECT op, count(*) FROM events GROUP BY op"))
        (inputs,) = con.execute("SELECT inputs FROM outputs ORDER BY seq DESC").fetchone()
    finally:
        con.close()
    assert kinds == {"open": READ_FIRST, "unlink": REWRITTEN, "write": REWRITTEN}
    assert '"own":["d49/f4999.txt"' in inputs  # every write's lineage stored


def test_a_hash_known_at_open_is_used_without_a_lookup(tmp_path: Path) -> None:
    """The open found the file's record (its stat matched): its hash is the
    read's, with no second store lookup; without one the journal looks."""
    (tmp_path / "src").mkdir()
    (tmp_path / "store").mkdir()
    asked: list[str] = []

    def lookup(rel: str) -> str:
        asked.append(rel)
        return "b" * 64

    j = jmod.Journal(tmp_path / "store", file_hash=lookup, src=tmp_path / "src", flush_seconds=60)
    pid = os.getpid()
    j.on_open(1, pid, "a.txt", known_hash="c" * 64)
    j.on_close(1)
    assert asked == []
    j.on_open(2, pid, "b.txt")
    j.on_close(2)
    assert asked == ["b.txt"]
    j.flush()
    con = sqlite3.connect(j.path)
    try:
        got = dict(con.execute("SELECT path, hash FROM events"))
    finally:
        con.close()
    j.close()
    assert got == {"a.txt": "c" * 64, "b.txt": "b" * 64}


# -- a job's many writes after its reads (a checkout)


def _write(j: jmod.Journal, fh: int, rel: str) -> None:
    j.on_open(fh, os.getpid(), rel, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    j.on_wrote(fh, rel)
    j.on_close(fh)


def _read(j: jmod.Journal, fh: int, rel: str, off: int = 0, n: int = 4) -> None:
    j.on_open(fh, os.getpid(), rel)
    j.on_read(fh, off, n)
    j.on_close(fh)


def _inputs(j: jmod.Journal, rel: str) -> list[tuple[str, list[str]]]:
    value = j.inputs_xattr(rel, None)
    assert value is not None, rel
    return [(i["path"], i["locators"]) for i in json.loads(value)]


def test_writes_between_no_reads_share_one_input_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout's thousands of writes after its reads: the input list and
    its user.sw.inputs value are made once, not once per write (each was a
    sort, a copy and a JSON dump of every item the job read)."""
    built: list[int] = []
    real = jmod.xattr_value

    def counting(items: list[dict[str, object]]) -> str:
        built.append(len(items))
        return real(items)

    monkeypatch.setattr(jmod, "xattr_value", counting)
    j = _journal(tmp_path)
    src = tmp_path / "src"
    for i in range(20):
        (src / f"in{i}.txt").write_text(f"{i}\n")
        _read(j, 100 + i, f"in{i}.txt")
    for i in range(50):
        _write(j, 200 + i, f"out{i}.txt")
    j.flush()
    assert built == [20]
    want = [(f"in{i}.txt", ["lines=1-1"]) for i in range(20)]
    assert [_inputs(j, f"out{i}.txt") for i in (0, 25, 49)] == [want] * 3
    j.close()


def test_a_read_between_writes_changes_the_next_writes_inputs(tmp_path: Path) -> None:
    """The shared list is made again whenever the job's reads change: a new
    file read, or a new place in one read before (its locators grow)."""
    j = _journal(tmp_path)
    src = tmp_path / "src"
    (src / "a.txt").write_text("one\ntwo\nthree\n")
    (src / "b.txt").write_text("bee\n")
    _read(j, 1, "a.txt")
    _write(j, 2, "o1.txt")
    j.flush()
    _write(j, 3, "o2.txt")  # same batch as the read below, before it
    _read(j, 4, "b.txt")
    _write(j, 5, "o3.txt")
    j.flush()
    _read(j, 6, "a.txt", 8, 6)  # line 3 of a.txt: its item gains a locator
    _write(j, 7, "o4.txt")
    _write(j, 8, "a.txt")  # the version it read, written again: not its own input
    j.flush()
    a1 = ("a.txt", ["lines=1-1"])
    a13 = ("a.txt", ["lines=1-1", "lines=3-3"])
    b = ("b.txt", ["lines=1-1"])
    assert _inputs(j, "o1.txt") == [a1]
    assert _inputs(j, "o2.txt") == [a1]
    assert _inputs(j, "o3.txt") == [a1, b]
    assert _inputs(j, "o4.txt") == [a13, b]
    assert _inputs(j, "a.txt") == [b]  # one hash for every file here (``_journal``)
    assert _inputs(j, "o4.txt") == [a13, b]  # the shared list untouched by that
    j.close()


def _outputs_rows(j: jmod.Journal) -> list[tuple[str, int, int, int]]:
    con = sqlite3.connect(j.path)
    try:
        return list(con.execute("SELECT path, superseded, gone, carry FROM outputs ORDER BY seq"))
    finally:
        con.close()


def test_a_file_unlinked_then_written_again_needs_no_query_for_its_previous_row(
    tmp_path: Path,
) -> None:
    """A checkout unlinks each file and writes it again: the journal knows
    it left the path no live output row, so the write does not look for one;
    renames and writes keep what it knows true (the rows say the same)."""
    j = _journal(tmp_path)
    asked: list[str] = []
    j._db.set_trace_callback(
        lambda sql: asked.append(sql) if sql.startswith("SELECT seq FROM outputs") else None
    )
    pid = os.getpid()
    _write(j, 1, "f")
    _write(j, 2, "g")
    j.flush()
    assert len(asked) == 2  # nothing known of either: looked up
    asked.clear()
    j.on_unlink(pid, "f")
    _write(j, 3, "f")  # no live row of f left: not looked up
    _write(j, 4, "f")  # its row of a moment ago: looked up, carried on from
    j.on_rename(pid, "g", "h")  # g's row moves to h; g has none left
    _write(j, 5, "g")  # not looked up
    j.on_rename(pid, "x", "g")  # x had no live row that is known: g's is gone now
    _write(j, 6, "h")  # the row moved here: looked up, carried on from
    j.flush()
    assert [q.split("path=")[1][:3] for q in asked] == ["'f'", "'h'"]
    assert _outputs_rows(j) == [
        ("f", 0, 1, 0),  # unlinked
        ("h", 1, 0, 0),  # g renamed to h, then h written by the job again
        ("f", 1, 0, 0),  # superseded by the next write of f
        ("f", 0, 0, 4),  # carries on from row 4 (seqs: 1 f, 2 g, 3 unlink, 4 f)
        ("g", 0, 1, 0),  # x renamed over it
        ("h", 0, 0, 2),
    ]
    j.close()
