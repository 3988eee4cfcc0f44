"""The LMDB store: the one place that knows the on-disk format.

Layout of a store directory (``SRC/.swfs/`` by default)::

    db/            LMDB environment (data.mdb, lock.mdb)
    blobs/         content-addressed preserved bytes (see swfs.blobs)
    daemon.log     the daemon's log when it runs in the background
    control.sock   the running daemon's control socket
    reserve        allocated blocks held back for deletes, truncates and gc
                   on a full disk (swfs.reserve); no content
    access.sqlite  the access journal and lineage, mode 0600 (SQLite, WAL; swfs.evidence.access)
    search.sqlite  the search index: which parses are indexed, their units and
    search.tantivy/  the paths that show them (SQLite, WAL), and the units' text
                   (tantivy); derived from ``files`` and ``parses`` only:
                   deleting them costs a re-index, never data (swfs.search).
    render/        .render images and office-to-PDF conversions, by content
                   hash; plain files, no LMDB keys (see swfs.render)
    tab/           the task's tab: tab.json, requirements.md, old/<NAME>/ (swfs.tab)
    staged/        a --staged mount's layer over SRC: upper/<rel>, state.json
                   (whiteouts, copied-up nodes' SRC identities), commit.json
                   (a commit's intent log while it runs); no LMDB keys
                   (swfs.staging)

Sub-databases, keys and values (all values are compact UTF-8 JSON unless
noted).  Paths are workspace-relative, '/'-separated, encoded with
``os.fsencode`` so that non-UTF-8 names round-trip.  A path key longer than
400 bytes (LMDB allows 511) is stored as a NUL byte plus the path's blake3
digest, and its value then carries the path (``"path"`` in a file record;
``{"path": ..., "versions": [...]}`` instead of a bare version list).

``meta``
    ``format_version`` -> int.  ``baseline`` -> manifest (see below).
    ``baseline_at`` -> float.  ``baseline_dirs`` -> [directories that held
    no file at the baseline] (swfs.history).  ``baseline_dir_modes`` ->
    ``{directory: [mode, uid, gid]}`` of every folder then ('' the root).
    ``reclaim:<hash>`` -> b"": a
    blob a dropped temp-file history may leave unreferenced (swfs.history;
    ``check`` accepts it, ``gc`` clears the key).  ``created_at`` -> float.  ``parsers`` -> str,
    ``parsers.registry.fingerprint()`` at the last scan: when it differs, the
    next scan re-examines every file so that each gets the present parser key.
``files``  path -> file record: the stat signature as ASCII
    ``size,mtime_ns,ctime_ns,ino``, a newline, then
    ``{"h": hash, "s": size, "m": mtime_ns, "c": ctime_ns, "i": ino,
    "mode": st_mode, "u": uid, "g": gid, "p": parser key or null,
    "v": hash of the last successfully parsed content or null,
    "vp": parser key of that parse}``.
    Invariant: one record per regular file under SRC that is not hidden.
``parses``  ``hash + b"|" + parser key`` -> parse record
    ``{"status": "ok"|"failed"|"unsupported", "n": number of units,
    "error": str|null, "secs": float, "at": float}`` (``"status"`` first, so
    that it can be read from the first bytes).  Keyed by content and parser
    only, never by path or mtime: renames, copies and reverts reuse it.
    Small whatever the document's size: the units are in ``units``.
``units``  the units of a parse, each readable without the others.  With
    ``P`` = the first 16 bytes of the blake3 digest of the parse record's key:
    ``P + b"o" + 4-byte big-endian ordinal`` (0-based, document order) ->
    ``[name, locator]`` as JSON, a newline, then the unit's text as UTF-8
    (surrogate escapes kept; lone surrogates as U+FFFD); its size is the
    value's length less the first line.
    ``P + b"n" + name`` (or, for a name over 400 bytes, ``b"\0"`` + its
    blake3 digest) -> the 4-byte ordinal of the unit of that name.
    Invariant: a parse record with ``"n": k`` has exactly the ordinals
    ``0..k-1`` and one name key per ordinal; no key of ``units`` belongs to
    no parse record.
``versions``  path -> ``[[number, hash, recorded_at, cause, size, mode, uid,
    gid], ...]``: ``mode`` (``st_mode``), ``uid`` and ``gid`` are the file's
    when that version was recorded (swfs.permissions: a version is readable
    only by who could read the file then and now).  A version recorded before
    these fields (five items) is owner-only.  A ninth item, when present, is
    why the version's bytes were not kept (``"disk full"``: a delete or
    truncate on a full disk went on without them; ``version_not_kept``).
    Numbers start at 1 and strictly increase.  Kept for deleted paths too.
``snapshots``  name -> manifest
``snapinfo``  snapshot name -> ``{"at": float, "kind": "snapshot"|"submission"|
    "baseline", "dirs": [directories that held no file then, ...],
    "dir_modes": {directory ('' for the root): [mode, uid, gid]}}``
    (swfs.history).  A snapshot without one predates it: kind "snapshot".
    A folder without a recorded mode is owner-only in a world.
    Kind "baseline" is a former baseline kept on re-baselining: its bytes are
    those the history kept (like the baseline's own), not copied up front.
``submissions``  name -> ``{"at": float, "snapshot": name, "files":
    [{"path", "hash", "size", "status"}, ...]}`` (swfs.history)
``journal``  the state log (``STATE_LOG_DB``): 8-byte big-endian sequence
    number -> event
    ``{"t": float, "ev": str, ...}``; append-only.
``diffs``  blake3 of ``kind|old hash|new hash|path`` -> rendered diff (UTF-8 text)

A manifest is ``{path: [hash, size, mode, uid, gid, parser key]}``.

Durability: commits are not flushed to disk one by one (LMDB ``NOSYNC``);
the daemon flushes every ``FLUSH_INTERVAL`` seconds, after every baseline,
snapshot and restore, and at close.  A killed daemon loses nothing (the
kernel holds the pages); an operating-system crash or power loss may undo
the transactions of the last interval.  Preserved bytes (blobs) are always
fsynced before the operation that needed them goes on.

Format changelog (a store of an older format is brought to the present one
once, when it is opened, in one write transaction: ``swfs.store.upgrade``):
    1  first format.
    2  file records start with the stat signature (``size,mtime,ctime,ino``
       and a newline) so that a rescan need not decode them.  Format 1 stores
       are upgraded in place when opened.
       Added within format 2 (older stores gain them empty when opened):
       ``snapinfo``, ``submissions``, meta ``baseline_dirs`` and ``reclaim:``.
    3  a parse record keeps its units under their own keys (``units``), so
       one unit is read without decoding the others: opening a page of a
       24,000-page PDF costs what opening one of a 40-page PDF does.
       Format 2 records (``"units": [[name, locator, text], ...]`` inline)
       are split when the store is opened.
       Added within format 3: a version's ``mode, uid, gid``; ``dir_modes``
       in ``snapinfo`` and meta ``baseline_dir_modes``.  Older records lack
       them and read as owner-only.
       Added within format 3: a version's ninth item, why its bytes were
       not kept.  Older swfs ignores it (it reads the first eight).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import lmdb

from swfs.api import UnitTooLarge
from swfs.store.upgrade import Fault, UnitRow, upgrade_records

log = logging.getLogger(__name__)

FORMAT_VERSION = 3
# The state log (``append_state_log``) is the LMDB sub-database named
# "journal" on disk, its name from before "journal" came to mean the access
# journal only: kept, so existing stores open unchanged.  The one place
# that maps the two names.
STATE_LOG_DB = "journal"
DATABASES = (
    "meta",
    "files",
    "parses",
    "units",
    "versions",
    "snapshots",
    STATE_LOG_DB,
    "diffs",
    "snapinfo",
    "submissions",
)
_INITIAL_MAP_SIZE = 1 << 30
FLUSH_INTERVAL = 1.0  # seconds between fsyncs of the store in a running daemon
_MAX_MAP_SIZE = 1 << 40


class StoreError(Exception):
    """The store is unusable (wrong format, corrupt, locked)."""


Raw = bytes | memoryview  # what lmdb hands back
_MAX_PLAIN_KEY = 400  # LMDB keys are at most 511 bytes; paths may be 4095


def pkey(rel: str) -> bytes:
    """The key of a path: the path itself, or for a long (or empty) one a NUL
    byte plus its blake3 digest; the value then also carries the path."""
    raw = os.fsencode(rel)
    if 0 < len(raw) <= _MAX_PLAIN_KEY:
        return raw
    return b"\0" + blake3.blake3(raw).digest()


def is_hashed_key(key: Raw) -> bool:
    return bytes(key[:1]) == b"\0"


def pdecode(key: Raw) -> str:
    return os.fsdecode(bytes(key))


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogateescape"
    )


def loads(data: Raw) -> Any:
    return json.loads(bytes(data).decode("utf-8", "surrogateescape"))


_STATUS_PREFIX = b'{"status":"'
_HASH_PREFIX = b'{"h":"'  # a file record's body starts with its hash


def parse_key(h: str, parser: str) -> bytes:
    return f"{h}|{parser}".encode()


UnitText = tuple[str, str, str]  # (name, locator, text) of one parsed unit
UNIT_PREFIX_LEN = 16
_MAX_NAME_KEY = 400


def unit_prefix(key: bytes) -> bytes:
    """Where the units of the parse record ``key`` live in ``units``."""
    return blake3.blake3(key).digest()[:UNIT_PREFIX_LEN]


def _name_key(name: str) -> bytes:
    raw = os.fsencode(name)
    if len(raw) <= _MAX_NAME_KEY:
        return raw
    return b"\0" + blake3.blake3(raw).digest()


_LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def _text_bytes(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Lone surrogates from a broken document become U+FFFD; escaped
        # undecodable bytes (U+DC80..U+DCFF) are written back as they were.
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8", "surrogateescape")


def encode_unit(name: str, locator: str, text: str) -> bytes:
    return dumps([name, locator]) + b"\n" + _text_bytes(text)


def decode_unit(raw: Raw) -> UnitText:
    data = bytes(raw)
    head, _, body = data.partition(b"\n")
    name, locator = loads(head)
    if not (isinstance(name, str) and isinstance(locator, str)):
        raise ValueError("unit head is not [name, locator]")
    return name, locator, body.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class UnitInfo:
    """One unit of a parse without its text: what a listing needs."""

    name: str
    locator: str
    size: int  # bytes of its UTF-8 text
    ends_with_newline: bool


def _unit_info(raw: Raw) -> UnitInfo:
    # Only the first line is copied out of the map: a listing of 24,000 pages
    # reads 24,000 short heads, never the pages' text.
    view = memoryview(raw) if not isinstance(raw, memoryview) else raw
    head = bytes(view[:512])
    cut = head.find(b"\n")
    if cut < 0:
        data = bytes(view)
        cut = data.find(b"\n")
        head = data
    name, locator = loads(head[:cut])
    size = len(view) - cut - 1
    return UnitInfo(str(name), str(locator), size, size > 0 and bytes(view[-1:]) == b"\n")


@dataclass(frozen=True)
class ParseRecord:
    """The outcome of parsing one content with one parser, without its units
    (``Store.unit_names``, ``get_unit`` and ``parse_units`` read those)."""

    status: str  # "ok" | "failed" | "unsupported"
    error: str | None = None
    secs: float = 0.0
    at: float = 0.0
    units: int = 0  # how many units the parse has

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def encode(self) -> bytes:
        return dumps(
            {
                "status": self.status,
                "n": self.units,
                "error": self.error,
                "secs": self.secs,
                "at": self.at,
            }
        )

    @classmethod
    def decode(cls, raw: Raw) -> ParseRecord:
        d = loads(raw)
        if not isinstance(d, dict):
            raise ValueError("parse record is not an object")
        status, n = d.get("status"), d.get("n", 0)
        if not isinstance(status, str) or not isinstance(n, int):
            raise ValueError("parse record without status or unit count")
        error = d.get("error")
        return cls(
            status=status,
            error=None if error is None else str(error),
            secs=float(d.get("secs") or 0.0),
            at=float(d.get("at") or 0.0),
            units=n,
        )


# Decoded file records by their encoded bytes (FileRecord.decode).
DECODED_KEPT = 8192
_DECODED: dict[bytes, FileRecord] = {}


@dataclass(frozen=True)
class FileRecord:
    hash: str
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int
    uid: int
    gid: int
    parser: str | None
    view_hash: str | None = None
    view_parser: str | None = None

    def signature(self) -> tuple[int, int, int, int]:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino)

    def encode(self, path: str | None = None) -> bytes:
        body: dict[str, Any] = {
            "h": self.hash,
            "s": self.size,
            "m": self.mtime_ns,
            "c": self.ctime_ns,
            "i": self.ino,
            "mode": self.mode,
            "u": self.uid,
            "g": self.gid,
            "p": self.parser,
            "v": self.view_hash,
            "vp": self.view_parser,
        }
        if path is not None:
            body["path"] = path
        return signature_bytes(*self.signature()) + b"\n" + dumps(body)

    @classmethod
    def decode(cls, data: Raw) -> FileRecord:
        """The record these bytes encode.  Decoded records are kept by their
        bytes (a record is immutable, so a hit cannot be stale): an open of
        a .parsed unit asks for the same record three times."""
        raw = bytes(data)
        hit = _DECODED.get(raw)
        if hit is not None:
            return hit
        rec = cls._decode(raw)
        if len(_DECODED) >= DECODED_KEPT:
            _DECODED.clear()  # a walk over more records than this gains nothing
        _DECODED[raw] = rec
        return rec

    @classmethod
    def _decode(cls, raw: bytes) -> FileRecord:
        d = loads(raw.partition(b"\n")[2])
        return cls(
            hash=d["h"],
            size=d["s"],
            mtime_ns=d["m"],
            ctime_ns=d["c"],
            ino=d["i"],
            mode=d["mode"],
            uid=d["u"],
            gid=d["g"],
            parser=d["p"],
            view_hash=d.get("v"),
            view_parser=d.get("vp"),
        )

    def manifest_entry(self) -> list[Any]:
        return [self.hash, self.size, self.mode, self.uid, self.gid, self.parser]


def stat_signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def signature_bytes(size: int, mtime_ns: int, ctime_ns: int, ino: int) -> bytes:
    """The stat signature as it prefixes a file record."""
    return b"%d,%d,%d,%d" % (size, mtime_ns, ctime_ns, ino)


def version_not_kept(v: Sequence[Any]) -> str | None:
    """Why the bytes of version entry ``v`` were not kept, if that was
    recorded (its ninth item; see ``versions`` above)."""
    return v[8] if len(v) > 8 and isinstance(v[8], str) else None


def mark_not_kept(v: list[Any], why: str, access: tuple[int, int, int]) -> None:
    """Record on version entry ``v`` that its bytes were not kept, and why.
    An entry of five items gains ``access`` (mode, uid, gid) first: the
    file's, the best known for that version."""
    if len(v) < 8:
        v[5:] = list(access)
    del v[8:]
    v.append(why)


class _Codec:
    """The present format's encoders, for ``swfs.store.upgrade``."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def loads(self, data: bytes) -> Any:
        return loads(data)

    def signature(self, size: int, mtime_ns: int, ctime_ns: int, ino: int) -> bytes:
        return signature_bytes(size, mtime_ns, ctime_ns, ino)

    def write_parse(
        self,
        txn: lmdb.Transaction,
        key: bytes,
        fields: Mapping[str, Any],
        units: Sequence[UnitRow],
    ) -> None:
        record = ParseRecord(
            status=fields["status"], error=fields["error"], secs=fields["secs"], at=fields["at"]
        )
        self._store._write_parse(txn, key, record, units)  # noqa: SLF001


class Store:
    """An LMDB environment with the sub-databases above.

    One ``Store`` per process.  Transactions are short and never span an
    ``await``: every method opens and closes its own.
    """

    def __init__(
        self, root: Path, *, readonly: bool = False, upgrade_fault: Fault | None = None
    ) -> None:
        """``upgrade_fault``: called at each step of an upgrade of an older
        format (``swfs.store.upgrade``); a test raises from it."""
        self.root = root
        self.readonly = readonly
        self.upgraded_from: int | None = None  # the format this open upgraded
        dbdir = root / "db"
        if not readonly:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            dbdir.mkdir(mode=0o700, exist_ok=True)
        elif not dbdir.is_dir():
            raise StoreError(f"{root}: no swfs store here")
        self._writer = threading.RLock()  # every write transaction (``write``)
        try:
            self.env = lmdb.open(
                str(dbdir),
                map_size=max(_INITIAL_MAP_SIZE, self._current_data_size(dbdir) * 2),
                max_dbs=len(DATABASES) + 1,
                subdir=True,
                readonly=False,
                lock=True,
                mode=0o600,
                max_readers=256,
                # Commits do not fsync (see "Durability" above): a write through
                # the mount would otherwise wait for two disk flushes.
                sync=False,
                metasync=False,
            )
        except lmdb.Error as exc:
            raise StoreError(f"{dbdir}: cannot open the store: {exc}") from exc
        self.dbs = {name: self.env.open_db(name.encode()) for name in DATABASES}
        try:
            self._check_format(upgrade_fault)
        except BaseException:
            self.env.close()
            raise

    @staticmethod
    def exists(root: Path) -> bool:
        """Whether ``root`` holds a store (checked without creating anything)."""
        return (root / "db").is_dir()

    @staticmethod
    def _current_data_size(dbdir: Path) -> int:
        try:
            return (dbdir / "data.mdb").stat().st_size
        except FileNotFoundError:
            return 0

    def _check_format(self, fault: Fault | None) -> None:
        """Stamp a new store with the present format; bring an older one to
        it (``swfs.store.upgrade``) in one write transaction, once."""
        with self.read() as txn:
            raw = txn.get(b"format_version", db=self.dbs["meta"])
        if raw is not None and loads(raw) == FORMAT_VERSION:
            return
        if raw is not None:
            # Splitting parse records rewrites them: room for a second copy.
            self.ensure_room(self._current_data_size(self.root / "db"))
        with self.write() as txn:
            raw = txn.get(b"format_version", db=self.dbs["meta"])
            if raw is None:
                txn.put(b"format_version", dumps(FORMAT_VERSION), db=self.dbs["meta"])
                txn.put(b"created_at", dumps(time.time()), db=self.dbs["meta"])
                return
            old = loads(raw)
            version = old
            if isinstance(old, int) and old < FORMAT_VERSION:
                version = upgrade_records(
                    txn, self.dbs, old, _Codec(self), where=self.root, fault=fault
                )
            if version != FORMAT_VERSION:
                raise StoreError(
                    f"{self.root}: store format {old}, this swfs reads format {FORMAT_VERSION}"
                )
            txn.put(b"format_version", dumps(version), db=self.dbs["meta"])
            self.upgraded_from = old

    def flush(self) -> None:
        """Make every committed transaction durable (fsync)."""
        self.env.sync(True)

    def close(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            log.warning("%s: final sync of the store failed: %s", self.root, exc)
        self.env.close()

    # -- transactions
    @contextmanager
    def write(self) -> Iterator[lmdb.Transaction]:
        """A write transaction.  Callers that may write a lot call
        ``ensure_room`` first: LMDB cannot grow its map inside a transaction.
        Taken under the store's writer lock, which LMDB's own writer mutex
        would serialize anyway, so that ``writer_if_free`` can ask."""
        with self._writer:
            txn = self.env.begin(write=True)
            try:
                yield txn
            except BaseException:
                txn.abort()
                raise
            txn.commit()

    @contextmanager
    def writer_if_free(self) -> Iterator[bool]:
        """Hold the writer lock for a block if no other thread holds it now:
        yields True, and ``write`` inside the block never waits on this
        process's other writers; False (nothing held) when one is writing.
        For a caller that must not wait (the daemon's event loop)."""
        got = self._writer.acquire(blocking=False)
        try:
            yield got
        finally:
            if got:
                self._writer.release()

    def ensure_room(self, nbytes: int) -> None:
        info = self.env.info()
        stat = self.env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        if used + nbytes * 2 > info["map_size"]:
            self._grow(used + nbytes * 2)

    def _grow(self, at_least: int = 0) -> None:
        size = self.env.info()["map_size"]
        new = min(max(size * 2, at_least), _MAX_MAP_SIZE)
        log.info("growing the store map from %d to %d bytes", size, new)
        self.env.set_mapsize(new)

    def read(self) -> lmdb.Transaction:
        return self.env.begin(write=False)

    # -- meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        with self.read() as txn:
            raw = txn.get(key.encode(), db=self.dbs["meta"])
        return default if raw is None else loads(raw)

    def put_meta(self, key: str, value: Any) -> None:
        with self.write() as txn:
            txn.put(key.encode(), dumps(value), db=self.dbs["meta"])

    # -- files
    def get_file(self, rel: str, txn: lmdb.Transaction | None = None) -> FileRecord | None:
        if txn is None:
            with self.read() as t:
                raw = t.get(pkey(rel), db=self.dbs["files"])
        else:
            raw = txn.get(pkey(rel), db=self.dbs["files"])
        return None if raw is None else FileRecord.decode(raw)

    def get_file_hash(self, rel: str) -> str | None:
        """The content hash recorded for ``rel`` (None if none), read from the
        record's head without decoding all of it: the access journal asks
        this on every open."""
        head = self.file_head(rel)
        return None if head is None else head[1]

    def file_head(self, rel: str) -> tuple[bytes, str] | None:
        """(stat signature bytes, content hash) of ``rel``'s record, None if it
        has none, without decoding the whole record: an open asks this."""
        with self.read() as t:
            raw = t.get(pkey(rel), db=self.dbs["files"])
        if raw is None:
            return None
        data = bytes(raw)
        nl = data.find(b"\n")
        at = nl + 1 + len(_HASH_PREFIX)
        end = data.find(b'"', at)
        if data.startswith(_HASH_PREFIX, at - len(_HASH_PREFIX)) and end > at:
            return data[:nl], data[at:end].decode("ascii", "replace")
        return data[:nl], FileRecord.decode(data).hash

    def iter_files(self, txn: lmdb.Transaction) -> Iterator[tuple[str, FileRecord]]:
        cur = txn.cursor(db=self.dbs["files"])
        for key, raw in cur:
            yield self.file_path_of(key, raw), FileRecord.decode(raw)

    @staticmethod
    def file_path_of(key: Raw, raw: Raw) -> str:
        if is_hashed_key(key):
            return str(loads(bytes(raw).partition(b"\n")[2])["path"])
        return pdecode(key)

    def file_signatures(self) -> dict[str, bytes]:
        """path -> stat signature bytes, without decoding the records: what a
        rescan compares, so that an unchanged tree costs one cursor pass."""
        out: dict[str, bytes] = {}
        with self.read() as txn:
            for key, raw in txn.cursor(db=self.dbs["files"]):
                data = bytes(raw)
                out[self.file_path_of(key, data)] = data[: data.find(b"\n")]
        return out

    def all_files(self) -> dict[str, FileRecord]:
        with self.read() as txn:
            return dict(self.iter_files(txn))

    def put_file(self, txn: lmdb.Transaction, rel: str, rec: FileRecord) -> None:
        key = pkey(rel)
        txn.put(key, rec.encode(rel if is_hashed_key(key) else None), db=self.dbs["files"])

    def delete_file(self, txn: lmdb.Transaction, rel: str) -> None:
        txn.delete(pkey(rel), db=self.dbs["files"])

    # -- parses
    def get_parse(
        self, h: str, parser: str, txn: lmdb.Transaction | None = None
    ) -> ParseRecord | None:
        """The parse record of (content, parser), without its units."""
        key = parse_key(h, parser)
        if txn is None:
            with self.read() as t:
                raw = t.get(key, db=self.dbs["parses"])
        else:
            raw = txn.get(key, db=self.dbs["parses"])
        return None if raw is None else ParseRecord.decode(raw)

    def parse_status(self, h: str, parser: str, txn: lmdb.Transaction | None = None) -> str | None:
        """The status of a parse record, read from its first bytes."""
        key = parse_key(h, parser)
        if txn is None:
            with self.env.begin(write=False, buffers=True) as t:
                return self._status_of(t.get(key, db=self.dbs["parses"]))
        return self._status_of(txn.get(key, db=self.dbs["parses"]))

    @staticmethod
    def _status_of(raw: Raw | None) -> str | None:
        if raw is None:
            return None
        # Records are written with "status" first: read it from the first
        # bytes; decode the whole record only if that ever changes.
        head = bytes(raw[:40])
        if head.startswith(_STATUS_PREFIX):
            value, sep, _ = head[len(_STATUS_PREFIX) :].partition(b'"')
            if sep:
                return value.decode()
        return str(loads(raw)["status"])

    def has_parse(self, txn: lmdb.Transaction, h: str, parser: str) -> bool:
        with txn.cursor(db=self.dbs["parses"]) as cur:
            return bool(cur.set_key(parse_key(h, parser)))

    def put_parse(
        self, h: str, parser: str, record: ParseRecord, units: Sequence[UnitText] = ()
    ) -> None:
        """Store a parse record and its units (replacing any earlier ones)."""
        self.ensure_room(sum(len(u[2]) for u in units) * 4 + 4096)
        with self.write() as txn:
            self.write_parse(txn, h, parser, record, units)

    def write_parse(
        self,
        txn: lmdb.Transaction,
        h: str,
        parser: str,
        record: ParseRecord,
        units: Sequence[UnitText] = (),
    ) -> None:
        """``put_parse`` inside the caller's transaction (call ``ensure_room``
        first: about four times the units' text)."""
        self._write_parse(txn, parse_key(h, parser), record, units)

    def _write_parse(
        self, txn: lmdb.Transaction, key: bytes, record: ParseRecord, units: Sequence[UnitText]
    ) -> None:
        self._delete_units(txn, key)
        record = dataclasses.replace(record, units=len(units))
        txn.put(key, record.encode(), db=self.dbs["parses"])
        prefix = unit_prefix(key)
        db = self.dbs["units"]
        seen: set[bytes] = set()
        for i, (name, locator, text) in enumerate(units):
            ordinal = struct.pack(">I", i)
            txn.put(prefix + b"o" + ordinal, encode_unit(name, locator, text), db=db)
            nkey = prefix + b"n" + _name_key(name)
            if nkey not in seen:  # the first of two units of one name is served
                seen.add(nkey)
                txn.put(nkey, ordinal, db=db)

    def delete_parse(self, txn: lmdb.Transaction, key: bytes) -> None:
        """Drop a parse record (by its raw key) and its units."""
        txn.delete(key, db=self.dbs["parses"])
        self._delete_units(txn, key)

    def _delete_units(self, txn: lmdb.Transaction, key: bytes) -> None:
        prefix = unit_prefix(key)
        with txn.cursor(db=self.dbs["units"]) as cur:
            if not cur.set_range(prefix):
                return
            while bytes(cur.key()[: len(prefix)]) == prefix:
                if not cur.delete():
                    break

    def unit_names(
        self, h: str, parser: str, txn: lmdb.Transaction | None = None
    ) -> list[UnitInfo]:
        """Name, locator and size of every unit of a parse, in document order,
        without copying their text."""
        with self._buffers(txn) as t, t.cursor(db=self.dbs["units"]) as cur:
            return [_unit_info(raw) for raw in self._ordinals(cur, parse_key(h, parser))]

    def parse_units(
        self, h: str, parser: str, txn: lmdb.Transaction | None = None
    ) -> list[UnitText]:
        """Every unit of a parse as (name, locator, text), in document order."""
        with self._buffers(txn) as t, t.cursor(db=self.dbs["units"]) as cur:
            return [decode_unit(raw) for raw in self._ordinals(cur, parse_key(h, parser))]

    def get_unit(
        self,
        h: str,
        parser: str,
        name: str,
        txn: lmdb.Transaction | None = None,
        *,
        limit: int | None = None,
    ) -> UnitText | None:
        """The unit ``name`` of a parse: one lookup of its name, one of its
        bytes, whatever the number of units.  UnitTooLarge when its record is
        longer than ``limit`` bytes (checked before it is decoded)."""
        prefix = unit_prefix(parse_key(h, parser))
        with self._buffers(txn) as t:
            db = self.dbs["units"]
            ordinal = t.get(prefix + b"n" + _name_key(name), db=db)
            if ordinal is None:
                return None
            raw = t.get(prefix + b"o" + bytes(ordinal), db=db)
            if raw is None:
                return None
            if limit is not None and len(raw) > limit:
                raise UnitTooLarge(f"{name}: {len(raw)} bytes")
            unit = decode_unit(raw)
        return unit if unit[0] == name else None

    @staticmethod
    def _ordinals(cur: lmdb.Cursor, key: bytes) -> Iterator[Raw]:
        start = unit_prefix(key) + b"o"
        if not cur.set_range(start):
            return
        for k, raw in cur:
            if bytes(k[: len(start)]) != start:
                return
            yield raw

    @contextmanager
    def _buffers(self, txn: lmdb.Transaction | None) -> Iterator[lmdb.Transaction]:
        if txn is not None:
            yield txn
            return
        with self.env.begin(write=False, buffers=True) as t:
            yield t

    # -- versions
    def get_versions(self, rel: str, txn: lmdb.Transaction | None = None) -> list[list[Any]]:
        if txn is None:
            with self.read() as t:
                raw = t.get(pkey(rel), db=self.dbs["versions"])
        else:
            raw = txn.get(pkey(rel), db=self.dbs["versions"])
        if raw is None:
            return []
        value = loads(raw)
        return list(value["versions"] if isinstance(value, dict) else value)

    def put_versions(self, txn: lmdb.Transaction, rel: str, versions: list[list[Any]]) -> None:
        key = pkey(rel)
        if versions:
            value: Any = {"path": rel, "versions": versions} if is_hashed_key(key) else versions
            txn.put(key, dumps(value), db=self.dbs["versions"])
        else:
            txn.delete(key, db=self.dbs["versions"])

    def iter_versions(self, txn: lmdb.Transaction) -> Iterator[tuple[str, list[list[Any]]]]:
        for key, raw in txn.cursor(db=self.dbs["versions"]):
            value = loads(raw)
            if isinstance(value, dict):
                yield value["path"], value["versions"]
            else:
                yield pdecode(key), value

    # -- the state log
    def append_state_log(self, txn: lmdb.Transaction, event: str, **fields: Any) -> None:
        cur = txn.cursor(db=self.dbs[STATE_LOG_DB])
        seq = struct.unpack(">Q", cur.key())[0] + 1 if cur.last() else 1
        fields = {"t": time.time(), "ev": event, **fields}
        txn.put(struct.pack(">Q", seq), dumps(fields), db=self.dbs[STATE_LOG_DB])

    def iter_state_log(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self.read() as txn:
            for key, raw in txn.cursor(db=self.dbs[STATE_LOG_DB]):
                yield struct.unpack(">Q", key)[0], loads(raw)

    # -- snapshots
    def put_snapshot(self, name: str, manifest: dict[str, list[Any]]) -> None:
        data = dumps(manifest)
        self.ensure_room(len(data))
        with self.write() as txn:
            txn.put(name.encode(), data, db=self.dbs["snapshots"])

    def get_snapshot(self, name: str) -> dict[str, list[Any]] | None:
        with self.read() as txn:
            raw = txn.get(name.encode(), db=self.dbs["snapshots"])
        return None if raw is None else loads(raw)

    def snapshot_names(self) -> list[str]:
        with self.read() as txn:
            return [bytes(k).decode() for k, _ in txn.cursor(db=self.dbs["snapshots"])]

    # -- diff cache
    @staticmethod
    def _diff_key(key: str) -> bytes:
        # Keys hold paths, which may exceed LMDB's 511-byte key limit.
        return blake3.blake3(key.encode("utf-8", "surrogateescape")).digest()

    def get_diff(self, key: str) -> str | None:
        with self.read() as txn:
            raw = txn.get(self._diff_key(key), db=self.dbs["diffs"])
        return None if raw is None else bytes(raw).decode("utf-8", "surrogateescape")

    def put_diff(self, key: str, text: str) -> None:
        data = text.encode("utf-8", "surrogateescape")
        self.ensure_room(len(data))
        with self.write() as txn:
            txn.put(self._diff_key(key), data, db=self.dbs["diffs"])
