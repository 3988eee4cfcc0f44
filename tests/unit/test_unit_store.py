"""Parse results stored unit by unit (store format 3): one unit of a huge
parse is read without the others, older stores are upgraded, and ``swfs
check`` finds records whose units are missing or stray.

Costs are measured as memory, not time (the machine may be busy): the peak of
Python allocations while serving one unit, against the size of the parse."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from swfs.api import Freshness, RelPath
from swfs.check import check_parses
from swfs.store.records import FORMAT_VERSION, ParseRecord, Store, dumps, parse_key, unit_prefix
from swfs.views.serving import Views
from swfs.workspace import LiveSource, Workspace
from tests.bigparse import PAGE_TEXT, PAGES, big_parse, peak_bytes


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, int]]:
    with big_parse(
        tmp_path_factory.mktemp("units") / "src", lambda i: f"page {i} says {PAGE_TEXT}"
    ) as b:
        yield b


def test_one_unit_is_served_without_reading_the_others(big: tuple[Workspace, int]) -> None:
    ws, size = big
    rel = RelPath("report.txt")

    def open_last() -> bytes:
        view = Views(LiveSource(ws)).view_state(rel)
        assert view is not None
        unit = Views(LiveSource(ws)).view_unit(view, f"page-{PAGES:05d}.md")
        assert unit is not None
        return unit.content

    content = open_last()
    head, _, body = content.partition(b"\n")
    assert b'freshness="current"' in head
    assert b'locator="report.txt#page=12000"' in head
    assert body.startswith(b"page 12000 says lorem")
    assert b"page 11999 says" not in content
    peak = peak_bytes(open_last)
    assert peak < size // 100, f"{peak} bytes allocated to serve one unit of {size}"


def test_a_listing_reads_names_not_text(big: tuple[Workspace, int]) -> None:
    ws, size = big
    view = Views(LiveSource(ws)).view_state(RelPath("report.txt"))
    assert view is not None
    views = Views(LiveSource(ws))
    names = list(views.view_unit_names(view))
    assert len(names) == PAGES
    assert names[:2] == ["page-00001.md", "page-00002.md"]
    assert names[-1] == f"page-{PAGES:05d}.md"
    peak = peak_bytes(lambda: views.view_unit_names(view))
    # The names, locators and sizes (about 300 bytes a unit in Python), never
    # the pages' text (over 1,100 bytes each).
    assert peak < PAGES * 512, f"{peak} bytes allocated to list {size} bytes of units"


def test_unknown_units_and_the_typed_record(big: tuple[Workspace, int]) -> None:
    ws, _ = big
    rec = ws.store.get_file("report.txt")
    assert rec is not None
    assert rec.parser is not None
    record = ws.store.get_parse(rec.hash, rec.parser)
    assert isinstance(record, ParseRecord)
    assert (record.status, record.units, record.ok) == ("ok", PAGES, True)
    view = Views(LiveSource(ws)).view_state(RelPath("report.txt"))
    assert view is not None
    assert Views(LiveSource(ws)).view_unit(view, "page-99999.md") is None
    assert Views(LiveSource(ws)).view_unit(view, "pending.md") is None
    assert ws.store.get_unit(rec.hash, rec.parser + "x", "page-00001.md") is None


def test_names_longer_than_a_key_and_odd_text(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    try:
        h = "ab" * 32
        long_name = "sheet-" + "Ä" * 300 + ".md"  # 600+ bytes: over LMDB's key size
        units = [
            (long_name, "sheet=long", "A1 = 1"),
            ("odd.md", 'h=a "quoted"\nline', "bad \udcff byte, lone \ud800 surrogate"),
            ("empty.md", "e", ""),
        ]
        store.put_parse(h, "x@1", ParseRecord("ok"), units)
        assert store.get_unit(h, "x@1", long_name) == units[0]
        name, locator, text = store.get_unit(h, "x@1", "odd.md") or ("", "", "")
        assert locator == 'h=a "quoted"\nline'
        assert text == "bad \udcff byte, lone \ufffd surrogate"
        infos = store.unit_names(h, "x@1")
        assert [(i.name, i.size) for i in infos] == [
            (long_name, 6),
            ("odd.md", 30),
            ("empty.md", 0),
        ]
        # Stored again (a re-parse of the same key): the old units go.
        store.put_parse(h, "x@1", ParseRecord("ok"), units[2:])
        assert [i.name for i in store.unit_names(h, "x@1")] == ["empty.md"]
        assert store.get_unit(h, "x@1", long_name) is None
    finally:
        store.close()


def _make_format_2_store(root: Path, h: str, parser: str) -> None:
    """A store as format 2 wrote it: the units inline in the parse record."""
    (root / "db").mkdir(parents=True)
    env = lmdb.open(str(root / "db"), max_dbs=16, map_size=1 << 26)
    meta, parses = env.open_db(b"meta"), env.open_db(b"parses")
    record = {
        "status": "ok",
        "units": [["page-0001.md", "page=1", "first page\n"], ["page-0002.md", "page=2", "two"]],
        "error": None,
        "secs": 0.5,
        "at": 1.0,
    }
    with env.begin(write=True) as txn:
        txn.put(b"format_version", dumps(2), db=meta)
        txn.put(parse_key(h, parser), dumps(record), db=parses)
        failed = {"status": "failed", "units": [], "error": "encrypted", "secs": 0.1, "at": 1.0}
        txn.put(parse_key("cd" * 32, parser), dumps(failed), db=parses)
    env.close()


def test_a_format_2_store_is_upgraded(tmp_path: Path) -> None:
    h, parser = "ab" * 32, "pdf@3"
    _make_format_2_store(tmp_path / "store", h, parser)
    store = Store(tmp_path / "store")
    try:
        assert store.get_meta("format_version") == FORMAT_VERSION == 3
        record = store.get_parse(h, parser)
        assert record == ParseRecord("ok", None, 0.5, 1.0, 2)
        assert store.get_unit(h, parser, "page-0002.md") == ("page-0002.md", "page=2", "two")
        assert [i.name for i in store.unit_names(h, parser)] == ["page-0001.md", "page-0002.md"]
        failed = store.get_parse("cd" * 32, parser)
        assert failed is not None
        assert (failed.status, failed.error, failed.units) == ("failed", "encrypted", 0)
        # The record itself no longer holds the text.
        with store.read() as txn:
            raw = bytes(txn.get(parse_key(h, parser), db=store.dbs["parses"]))
        assert b"first page" not in raw
    finally:
        store.close()
    # Opening it again changes nothing.
    store = Store(tmp_path / "store")
    try:
        assert store.parse_units(h, parser)[0] == ("page-0001.md", "page=1", "first page\n")
    finally:
        store.close()


def test_an_upgraded_workspace_serves_its_views(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "notes.txt").write_text("alpha beta\n")
    with Workspace(src) as ws:
        ws.scan()
        rec = ws.store.get_file("notes.txt")
        assert rec is not None
        assert rec.parser is not None
        # Rewrite the parse as format 2 did and mark the store format 2.
        key = parse_key(rec.hash, rec.parser)
        legacy = {"status": "ok", "units": [["content.txt", "content", "alpha beta\n"]]}
        with ws.store.write() as txn:
            ws.store.delete_parse(txn, key)
            txn.put(
                key, dumps({**legacy, "error": None, "secs": 0, "at": 0}), db=ws.store.dbs["parses"]
            )
            txn.put(b"format_version", dumps(2), db=ws.store.dbs["meta"])
    with Workspace(src) as ws:
        view = Views(LiveSource(ws)).parsed_view(RelPath("notes.txt"))
        assert view is not None
        assert view.freshness is Freshness.CURRENT
        assert [u.name for u in view.units] == ["content.txt"]
        assert view.units[0].content.endswith(b"\nalpha beta\n")
        assert check_parses(ws, repair=False) == []


def test_check_finds_missing_and_stray_units(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("alpha\n")
    (src / "b.txt").write_text("beta\n")
    with Workspace(src) as ws:
        ws.scan()
        for rel, text in (("a.txt", "alpha\n"), ("b.txt", "beta\n")):
            rec = ws.store.get_file(rel)
            assert rec is not None
            assert rec.parser is not None
            ws.store.put_parse(
                rec.hash, rec.parser, ParseRecord("ok"), [("content.txt", "c", text)]
            )
        assert check_parses(ws, repair=False) == []
        a = ws.store.get_file("a.txt")
        assert a is not None
        assert a.parser is not None
        prefix = unit_prefix(parse_key(a.hash, a.parser))
        with ws.store.write() as txn:
            # a.txt loses its unit's text; a unit of no record appears.
            txn.delete(prefix + b"o" + b"\0\0\0\0", db=ws.store.dbs["units"])
            txn.put(b"\x01" * 16 + b"o\0\0\0\0", b'["x","y"]\nz', db=ws.store.dbs["units"])
        problems = check_parses(ws, repair=True)
        messages = sorted(p.message for p in problems)
        assert len(messages) == 2, messages
        assert "0 of its 1 units" in messages[0] or "0 of its 1 units" in messages[1]
        assert any("belong to no parse record" in m for m in messages)
        assert ws.store.get_parse(a.hash, a.parser) is None  # re-parsed later
        assert check_parses(ws, repair=False) == []
        b = ws.store.get_file("b.txt")
        assert b is not None
        assert b.parser is not None
        assert ws.store.get_unit(b.hash, b.parser, "content.txt") == ("content.txt", "c", "beta\n")


def test_a_record_head_gives_signature_and_hash_without_decoding(tmp_path: Path) -> None:
    from swfs.store.records import FileRecord, signature_bytes

    store = Store(tmp_path / "store")
    try:
        long_name = "d/" + "n" * 600 + ".txt"  # a hashed key: the path is in the body
        recs = {
            "a.txt": FileRecord("ab" * 32, 5, 10, 20, 30, 0o100644, 0, 0, "text@2"),
            long_name: FileRecord("cd" * 32, 6, 11, 21, 31, 0o100644, 0, 0, None),
        }
        with store.write() as txn:
            for rel, rec in recs.items():
                store.put_file(txn, rel, rec)
        for rel, rec in recs.items():
            assert store.file_head(rel) == (signature_bytes(*rec.signature()), rec.hash)
            assert store.get_file_hash(rel) == rec.hash
        assert store.file_head("absent.txt") is None
    finally:
        store.close()


_OLD_FILE = {
    "h": "ab" * 32,
    "s": 11,
    "m": 7,
    "c": 8,
    "i": 9,
    "mode": 0o100644,
    "u": 0,
    "g": 0,
    "p": "pdf@3",
    "v": "ab" * 32,
    "vp": "pdf@3",
}
_OLD_UNITS = [["page-0001.md", "page=1", "first page\n"], ["page-0002.md", "page=2", "zwei é\n"]]


def _make_format_1_store(root: Path) -> dict[str, bytes]:
    """A store as format 1 wrote it, by raw LMDB writes: a file record
    without its signature, a parse record with its units inline.  The raw
    values written, by sub-database."""
    (root / "db").mkdir(parents=True)
    env = lmdb.open(str(root / "db"), max_dbs=16, map_size=1 << 26)
    meta, files, parses = (env.open_db(n) for n in (b"meta", b"files", b"parses"))
    record = {"status": "ok", "units": _OLD_UNITS, "error": None, "secs": 0.5, "at": 1.0}
    raw = {"files": dumps(_OLD_FILE), "parses": dumps(record)}
    with env.begin(write=True) as txn:
        txn.put(b"format_version", dumps(1), db=meta)
        txn.put(b"doc.pdf", raw["files"], db=files)
        txn.put(parse_key("ab" * 32, "pdf@3"), raw["parses"], db=parses)
    env.close()
    return raw


def _raw_state(root: Path) -> dict[str, bytes | None]:
    env = lmdb.open(str(root / "db"), max_dbs=16, map_size=1 << 26)
    try:
        meta, files, parses = (env.open_db(n) for n in (b"meta", b"files", b"parses"))
        with env.begin() as txn:
            got = {
                "format_version": txn.get(b"format_version", db=meta),
                "files": txn.get(b"doc.pdf", db=files),
                "parses": txn.get(parse_key("ab" * 32, "pdf@3"), db=parses),
            }
            return {k: None if v is None else bytes(v) for k, v in got.items()}
    finally:
        env.close()


def test_a_format_1_store_upgrades_once_and_reads_exact(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _make_format_1_store(root)
    store = Store(root)
    try:
        assert store.upgraded_from == 1
        assert store.get_meta("format_version") == FORMAT_VERSION
        rec = store.get_file("doc.pdf")
        assert rec is not None
        assert (rec.hash, rec.size, rec.parser) == ("ab" * 32, 11, "pdf@3")
        assert rec.signature() == (11, 7, 8, 9)
        assert store.file_signatures() == {"doc.pdf": b"11,7,8,9"}
        assert store.get_parse("ab" * 32, "pdf@3") == ParseRecord("ok", None, 0.5, 1.0, 2)
        assert [tuple(u) for u in _OLD_UNITS] == [
            tuple(u) for u in store.parse_units("ab" * 32, "pdf@3")
        ]
    finally:
        store.close()
    upgraded = _raw_state(root)
    ran: list[str] = []
    store = Store(root, upgrade_fault=ran.append)
    try:
        assert store.upgraded_from is None
        assert store.get_unit("ab" * 32, "pdf@3", "page-0002.md") == (
            "page-0002.md",
            "page=2",
            "zwei é\n",
        )
    finally:
        store.close()
    assert ran == []
    assert _raw_state(root) == upgraded


class _Crash(Exception):
    pass


@pytest.mark.parametrize("at", ["files", "parses"])
def test_a_crash_during_the_upgrade_leaves_the_old_format(tmp_path: Path, at: str) -> None:
    """Killed part way through the upgrade (in its 1 -> 2 or its 2 -> 3
    step): the store is still format 1 as it was, and the next open
    upgrades it whole."""
    root = tmp_path / "store"
    raw = _make_format_1_store(root)
    before = _raw_state(root)
    assert before == {"format_version": dumps(1), **raw}

    def fault(what: str) -> None:
        if what.startswith(at):
            raise _Crash(what)

    with pytest.raises(_Crash):
        Store(root, upgrade_fault=fault)
    assert _raw_state(root) == before
    store = Store(root)
    try:
        assert store.upgraded_from == 1
        assert store.parse_units("ab" * 32, "pdf@3")[1] == ("page-0002.md", "page=2", "zwei é\n")
    finally:
        store.close()
