"""The access journal, the job rule and lineage, without FUSE."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from swfs.evidence import access as jmod
from swfs.evidence import lineage
from swfs.evidence.procinfo import ProcCache, read_stat

# -- /proc and the job rule


def fake_proc(root: Path, procs: list[tuple[int, str, int, int, int]]) -> Path:
    """(pid, name, ppid, pgid, sid) -> ROOT/<pid>/stat and cmdline."""
    for pid, name, ppid, pgid, sid in procs:
        d = root / str(pid)
        d.mkdir(parents=True)
        rest = ["S", ppid, pgid, sid] + [0] * 15 + [1000 + pid]
        (d / "stat").write_text(f"{pid} ({name}) " + " ".join(map(str, rest)) + "\n")
        (d / "cmdline").write_bytes(name.encode() + b"\0--flag\0")
    return root


def test_stat_name_with_parenthesis_and_spaces(tmp_path: Path) -> None:
    root = fake_proc(tmp_path, [(42, "evil) S 1 2 3 (x", 7, 42, 42)])
    p = read_stat(42, str(root))
    assert p is not None
    assert (p.name, p.ppid, p.pgid, p.sid, p.start) == ("evil) S 1 2 3 (x", 7, 42, 42, 1042)
    assert read_stat(43, str(root)) is None


def test_job_rule(tmp_path: Path) -> None:
    root = fake_proc(
        tmp_path,
        [
            (10, "harness", 1, 10, 10),  # the mount's caller, a session leader
            (100, "bash", 10, 10, 10),  # bash -c "cat a | sort > b"
            (101, "cat", 100, 10, 10),
            (102, "sort", 100, 10, 10),
            (200, "bash", 10, 10, 10),  # the next bash -c
            (201, "cp", 200, 10, 10),
            (300, "bash", 1, 300, 300),  # an interactive login shell, its own session
            (301, "cat", 300, 301, 300),  # one pipeline: its own process group
            (302, "sort", 300, 301, 300),
            (303, "cp", 300, 303, 300),  # the next command line
        ],
    )
    pc = ProcCache(callers=((10, 1010),), proc_root=str(root))
    job = {pid: pc.caller_of(pid).job for pid in (100, 101, 102, 200, 201, 301, 302, 303)}
    assert job[100] == job[101] == job[102]
    assert job[200] == job[201] != job[101]
    assert job[301] == job[302] != job[303]
    chain = pc.caller_of(102).chain
    assert [p.name for p in chain] == ["sort", "bash"]
    assert pc.caller_of(102).cmdline == ("sort", "--flag")
    # A process gone before it was seen is known by its pid only.
    assert pc.caller_of(999).proc.name == "?"


# -- the journal


def _journal(tmp_path: Path, **kw: object) -> jmod.Journal:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    hashes = {"a.txt": "a" * 64, "b.txt": "b" * 64, "out.txt": "c" * 64}
    return jmod.Journal(store, file_hash=hashes.get, src=src, **kw)  # type: ignore[arg-type]


def _events(j: jmod.Journal, kind: str | None = None) -> list[dict[str, object]]:
    con = jmod.open_readonly(j.store_dir)
    try:
        return list(jmod.iter_events(con, kind=kind))
    finally:
        con.close()


def test_reads_of_one_handle_are_one_event_with_lines(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    (tmp_path / "src" / "a.txt").write_text("".join(f"line {i:03d}\n" for i in range(1, 101)))
    pid = os.getpid()
    j.on_open(7, pid, "a.txt")
    for off in range(0, 90, 9):  # the first 10 lines, a line per request
        j.on_read(7, off, 9)
    j.flush()
    (ev,) = _events(j, "read")
    assert ev["open"] is True  # stored before the handle closed: a crash keeps it
    assert ev["ranges"] == [[0, 90]]
    j.on_close(7)
    j.flush()
    (ev,) = _events(j, "read")
    assert "open" not in ev
    assert ev["lines"] == [1, 10]
    assert ev["bytes"] == 90
    assert ev["hash"] == "a" * 64
    assert ev["process"]["pid"] == pid  # type: ignore[index]
    assert os.stat(j.path).st_mode & 0o777 == 0o600
    j.close()


def test_unit_reads_keep_their_locator_and_listings_their_names(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    xattrs = {"source": "r.pdf", "source_hash": "d" * 64, "locator": "r.pdf#page=17"}
    j.on_open(3, os.getpid(), ".parsed/r.pdf/page-0017.md", xattrs=xattrs)
    j.on_read(3, 0, 100)
    j.on_close(3)
    j.on_list(os.getpid(), "reports", ["r.pdf", "q.xlsx"])
    j.flush()
    (read,) = _events(j, "read")
    assert (read["source"], read["locator"], read["hash"]) == ("r.pdf", "r.pdf#page=17", "d" * 64)
    (listing,) = _events(j, "list")
    assert listing["names"] == ["r.pdf", "q.xlsx"]
    assert _events(j, "write") == []
    j.close()


def test_a_hidden_native_file_is_read_as_itself_and_generated_files_as_theirs(
    tmp_path: Path,
) -> None:
    """A native name starting with a dot (``.env``, a vim swap file) is a
    native read with its source and hash, not a generated file's; a
    generated file without a source (``.review``) names none."""
    hashes = {".env": "e" * 64, "a.txt": "a" * 64}
    (tmp_path / "store").mkdir()
    j = jmod.Journal(tmp_path / "store", file_hash=hashes.get, src=tmp_path)  # type: ignore[arg-type]
    (tmp_path / ".env").write_text("KEY=1\n")
    pid = os.getpid()
    j.on_open(1, pid, ".env")
    j.on_read(1, 0, 6, b"KEY=1\n")
    j.on_close(1)
    j.on_open(2, pid, ".review/SUMMARY.md", xattrs={})
    j.on_close(2)
    j.flush()
    native, review = _events(j, "read")
    assert (native["path"], native["hash"]) == (".env", "e" * 64)
    assert "source" not in native  # a read of itself
    assert native["lines"] == [1, 1]
    assert review["path"] == ".review/SUMMARY.md"
    assert "source" not in review
    assert "hash" not in review
    j.close()


def test_retention_drops_the_oldest_events(tmp_path: Path) -> None:
    j = _journal(tmp_path, max_events=10)
    for i in range(25):
        j.on_list(os.getpid(), f"d{i}", [])
    j.flush()
    assert j.retain() == 15
    assert [e["path"] for e in _events(j)] == [f"d{i}" for i in range(15, 25)]
    j.close()


def test_events_survive_a_reopen_and_keep_counting(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    j.on_list(os.getpid(), "x", [])
    j.close()
    j = _journal(tmp_path)
    j.on_list(os.getpid(), "y", [])
    j.close()
    assert [(e["seq"], e["path"]) for e in _events(j)] == [(1, "x"), (2, "y")]


def test_flusher_thread_stores_without_being_asked(tmp_path: Path) -> None:
    j = _journal(tmp_path, flush_seconds=0.05)
    j.start()
    try:
        j.on_list(os.getpid(), "seen", [])
        assert jmod.request_flush(j.store_dir, timeout=30)
        assert [e["path"] for e in _events(j)] == ["seen"]
    finally:
        j.close()


# -- lineage rule over stored events


class FakeCaller:
    """Stand-ins for processes: the journal keys events by these."""

    def __init__(self, j: jmod.Journal) -> None:
        self.j = j

    def set(self, pid: int, job: str) -> None:
        from swfs.evidence.procinfo import Caller, Proc

        p = Proc(pid, 1, f"p{pid}", 1, pid, pid)
        self.j.procs._callers[pid] = (float("inf"), Caller(p, (p,), job))  # noqa: SLF001


def test_lineage_rule(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    procs = FakeCaller(j)
    # job A: `cut a > t; sort t > out`  (cut=1, sort=2)
    procs.set(1, "A")
    procs.set(2, "A")
    j.on_open(1, 1, "a.txt")
    j.on_close(1)
    j.on_open(2, 1, "t.txt", flags=os.O_WRONLY | os.O_CREAT)
    j.on_wrote(2, "t.txt")
    j.on_close(2)
    j.on_open(3, 2, "t.txt")
    j.on_close(3)
    j.on_open(4, 2, "out.txt", flags=os.O_WRONLY | os.O_TRUNC)
    j.on_wrote(4, "out.txt")
    # job B reads b.txt: never an input of job A's writes
    procs.set(9, "B")
    j.on_open(5, 9, "b.txt")
    j.on_close(5)
    # A again appends to out.txt: carries on from the first write
    j.on_open(6, 2, "b.txt")
    j.on_close(6)
    j.on_wrote(4, "out.txt")
    j.on_close(4)
    # an editor's save in job C: read, temp, rename over
    procs.set(7, "C")
    j.on_open(8, 7, "b.txt")
    j.on_close(8)
    j.on_open(10, 7, ".b.txt.swp", flags=os.O_WRONLY | os.O_CREAT)
    j.on_wrote(10, ".b.txt.swp")
    j.on_close(10)
    j.on_rename(7, ".b.txt.swp", "b.txt")
    j.flush()
    con = jmod.open_readonly(j.store_dir)
    outs = lineage.outputs(con)
    con.close()
    g = lineage.build(outs)
    edges = {(e["from_path"], e["to_path"]) for e in g.edges}
    assert edges == {
        ("a.txt", "t.txt"),
        ("t.txt", "out.txt"),
        ("b.txt", "out.txt"),
        ("b.txt", "b.txt"),
    }
    assert ".b.txt.swp" not in {n["path"] for n in g.nodes.values()}
    sub = lineage.build(outs, "out.txt")
    assert {(e["from_path"], e["to_path"]) for e in sub.edges} == {
        ("a.txt", "t.txt"),
        ("t.txt", "out.txt"),
        ("b.txt", "out.txt"),
    }
    assert json.loads(j.inputs_xattr("t.txt", None) or "[]")[0]["path"] == "a.txt"
    j.close()


# -- presentation


@pytest.mark.parametrize(
    ("locators", "text"),
    [
        (["rows=1-5000", "rows=5001-20000"], "rows 1-20000"),
        (["sheet=Sheet1"], "Sheet1"),
        (["page=17"], "page 17"),
        (["page=3", "page=4", "page=5", "page=9"], "pages 3-5, 9"),
        (["lines=1-10", "lines=5-40"], "lines 1-40"),
        (["slide=2", "h=Clause 7/7.2"], "slide 2, Clause 7/7.2"),
        ([], ""),
    ],
)
def test_describe(locators: list[str], text: str) -> None:
    assert lineage.describe(locators) == text


def _graph() -> tuple[lineage.Graph, list[lineage.Output]]:
    proc = {"key": "5.9", "pid": 5, "name": "python", "cmdline": ["python", "s.py"], "job": "x"}
    outs = [
        lineage.Output(
            1,
            0.0,
            "deliverables/summary.md",
            "e" * 64,
            proc,
            [
                {"path": "data/export.csv", "hash": "1" * 64, "locators": ["rows=1-20000"]},
                {"path": "finance/budget.xlsx", "hash": "2" * 64, "locators": ["sheet=Sheet1"]},
            ],
        )
    ]
    return lineage.build(outs), outs


def test_lineage_md_and_text() -> None:
    g, outs = _graph()
    want = "deliverables/summary.md <- data/export.csv (rows 1-20000), finance/budget.xlsx (Sheet1)"
    assert lineage.to_text(g, outs).strip() == want
    md = lineage.lineage_md(
        outs,
        [
            ("deliverables/summary.md", "added", "e" * 64),
            ("old.txt", "deleted", None),
            ("notes.txt", "modified", "f" * 64),
        ],
    )
    assert want in md
    assert "notes.txt <- (not written through the mount)" in md
    assert "old.txt" not in md


def test_the_text_form_names_each_input_once_and_what_is_gone() -> None:
    proc = {"key": "5.9", "pid": 5, "name": "sh", "cmdline": [], "job": "x"}
    log = [
        {"path": "log.txt", "hash": f"{n:064x}", "locators": [f"lines={n}-{n}"]} for n in (1, 2, 3)
    ]
    inputs = [*log, {"path": "tmp/t.csv", "hash": "9" * 64, "locators": []}]
    outs = [lineage.Output(1, 0.0, "out.md", "e" * 64, proc, inputs)]
    text = lineage.to_text(lineage.build(outs), outs, lambda p: p != "tmp/t.csv").strip()
    assert text == "out.md <- log.txt (3 versions; lines 1-3), tmp/t.csv (gone)"
    text = lineage.to_text(lineage.build(outs), outs, lambda p: False).strip()
    assert text.startswith("out.md (gone) <- log.txt (gone; 3 versions; ")


def test_prov_json_reads_back_with_the_prov_package() -> None:
    from prov.model import ProvDocument

    g, _ = _graph()
    doc = ProvDocument.deserialize(content=json.dumps(lineage.to_prov(g)), format="json")
    kinds = [r.get_type().localpart for r in doc.get_records()]
    assert kinds.count("Entity") == 3
    assert kinds.count("Activity") == 1
    assert kinds.count("Usage") == 2
    assert kinds.count("Generation") == 1
    assert kinds.count("Derivation") == 2
    dot = lineage.to_dot(g)
    assert dot.count("->") == 2
    assert '"deliverables/summary.md\\n' in dot


def test_read_write_handle_is_its_own_input_at_its_earlier_hash(tmp_path: Path) -> None:
    hashes = {"db.bin": "0" * 64}
    j = jmod.Journal(tmp_path, file_hash=hashes.get, src=tmp_path)
    FakeCaller(j).set(5, "J")
    j.on_open(1, 5, "db.bin", flags=os.O_RDWR)
    j.on_read(1, 0, 4096)  # read before the write is recorded: the old bytes
    hashes["db.bin"] = "1" * 64
    j.on_wrote(1, "db.bin")
    j.on_close(1)
    j.on_open(2, 5, "log.txt", flags=os.O_RDWR | os.O_CREAT)  # written, never read
    j.on_wrote(2, "log.txt")
    j.on_close(2)
    j.flush()
    con = jmod.open_readonly(tmp_path)
    g = lineage.build(lineage.outputs(con))
    con.close()
    db = [e for e in g.edges if e["to_path"] == "db.bin"]
    assert [(e["from_path"], e["from_hash"], e["to_hash"]) for e in db] == [
        ("db.bin", "0" * 64, "1" * 64)
    ]
    # Opened for reading and writing but never read: no read of itself.
    assert not any(e["from_path"] == "log.txt" for e in g.edges)
    j.close()


def test_line_ranges_never_wait_on_a_fifo_or_follow_a_link(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert jmod.text_lines(fifo, [[0, 10]]) is None  # returns: does not hang
    (tmp_path / "real.txt").write_text("a\nb\nc\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    assert jmod.text_lines(tmp_path / "link.txt", [[0, 6]]) is None
    assert jmod.text_lines(tmp_path / "real.txt", [[2, 6]]) == [2, 3]
    (tmp_path / "bin").write_bytes(b"PK\x03\x04\x00\x00binary")
    assert jmod.text_lines(tmp_path / "bin", [[0, 10]]) is None


def test_listing_taken_after_opendir(tmp_path: Path) -> None:
    """Without the kernel's listing cache the names come with readdir."""
    j = _journal(tmp_path)
    j.on_opendir(4, os.getpid(), "reports")
    j.on_listed(4, ["a.pdf", "b.xlsx"])
    j.on_close(4)
    j.on_listed(4, ["late"])  # after release: no handle, nothing recorded
    j.flush()
    (ev,) = _events(j, "list")
    assert (ev["path"], ev["names"], ev["count"]) == ("reports", ["a.pdf", "b.xlsx"], 2)
    j.close()


def test_a_batch_larger_than_one_statement_is_stored_whole_and_in_order(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    n = 2 * jmod.ROWS_PER_INSERT + 7
    for i in range(n):
        j.on_list(os.getpid(), f"d{i}", [f"n{i}"])
    assert j.flush() == n
    got = _events(j, "list")
    assert [e["path"] for e in got] == [f"d{i}" for i in range(n)]
    assert got[-1]["names"] == [f"n{n - 1}"]
    # A row whose seq is taken (never expected) replaces it: the newest is kept.
    row = (got[0]["seq"], 0.0, "list", "list", "", "", "again", "", None, None, "{}")
    with pytest.raises(sqlite3.IntegrityError):
        jmod._insert_events(j._db, "INSERT", [row])
    jmod._insert_events(j._db, "INSERT OR REPLACE", [row])
    j._db.commit()
    assert _events(j, "list")[0]["path"] == "again"
    j.close()


def test_a_listing_of_a_name_that_is_not_utf8_stays_valid_json(tmp_path: Path) -> None:
    """The name is stored escaped inside the listing's JSON (escaping the
    JSON text whole made ``\\x`` escapes JSON cannot read, and every later
    reader of the journal failed); a row damaged so by an older daemon
    hides nothing else."""
    j = _journal(tmp_path)
    bad = os.fsdecode(b"caf\xe9.txt")
    j.on_list(os.getpid(), "data", [bad, "plain.txt"])
    j.on_rename(os.getpid(), f"data/{bad}", "data/renamed.txt")
    j.flush()
    (listing,) = _events(j, "list")
    assert listing["names"] == ["caf\\xe9.txt", "plain.txt"]
    (rename,) = _events(j, "write")
    assert rename["from"] == "data/caf\\xe9.txt"
    con = sqlite3.connect(j.path)
    try:
        with con:
            con.execute("UPDATE events SET detail=? WHERE kind='list'", ('{"names":["caf\\xe9"]}',))
    finally:
        con.close()
    (listing,) = _events(j, "list")
    assert listing["detail_error"] == "unreadable detail"
    assert listing["path"] == "data"
    assert len(_events(j)) == 2
    j.close()


# -- the journal's store failing


def _fill(path: Path) -> Path:
    """Fill the file system of ``path`` with one file; returns it."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (64 * 1024, 512):  # then the last few blocks
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_keeps_the_events_waiting_and_the_journal_in_place(tmp_path: Path) -> None:
    """A full disk is no damaged store: nothing is set aside or started
    afresh; the events wait in memory and are stored once there is room."""
    from tests.tmpfs import small_tmpfs

    with small_tmpfs(tmp_path, "2m"):
        j = _journal(tmp_path)
        try:
            j.on_list(os.getpid(), "before", [])
            j.flush()
            filler = _fill(tmp_path / "store")
            for i in range(2000):  # more than the WAL's free pages take
                j.on_list(os.getpid(), f"while-full-{i:04d}-" + "x" * 200, [])
            with pytest.raises(sqlite3.OperationalError) as exc:
                j.flush()
            j._store_failed(exc.value)
            assert j.health()["state"] == "failing"
            assert "full" in str(j.health()["reason"])
            assert not list((tmp_path / "store").glob("*.failed-*"))
            filler.unlink()
            j.flush()
            j._failing = None
            assert j.health() == {"state": "ok"}
            paths = [e["path"] for e in _events(j, "list")]
            assert paths[0] == "before"
            assert len(paths) == 2001
        finally:
            j.close()


def test_a_damaged_journal_is_set_aside_and_recording_goes_on(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    try:
        j.on_list(os.getpid(), "old", [])
        j.flush()
        j._check_file()  # notes the files it writes
        with open(j.path, "r+b") as f:
            f.write(b"not a database at all")
        j.on_list(os.getpid(), "new", [])
        with pytest.raises(jmod.JournalError) as exc:
            j._check_file()
        j._store_failed(exc.value)
        state = j.health()
        assert state["state"] == "reopened"
        assert (tmp_path / "store" / str(state["kept"])).exists()  # set aside, never deleted
        j.flush()
        assert [e["path"] for e in _events(j, "list")] == ["new"]
    finally:
        j.close()
