"""The LMDB store: the one place that knows the on-disk format.

Layout of a store directory (``SRC/.swfs/`` by default)::

    db/            LMDB environment (data.mdb, lock.mdb)
    blobs/         content-addressed preserved bytes (see swfs.blobs)
    daemon.log     the daemon's log when it runs in the background
    control.sock   the running daemon's control socket
    access.sqlite  the access journal and lineage, mode 0600 (SQLite, WAL; see swfs.journal)
    search.sqlite  the search index: which parses are indexed, their units and
    search.tantivy/  the paths that show them (SQLite, WAL), and the units' text
                   (tantivy); derived from ``files`` and ``parses`` only:
                   deleting them costs a re-index, never data (swfs.search).
    tab/           the task's tab: tab.json, requirements.md, old/<NAME>/ (swfs.tab)

Sub-databases, keys and values (all values are compact UTF-8 JSON unless
noted).  Paths are workspace-relative, '/'-separated, encoded with
``os.fsencode`` so that non-UTF-8 names round-trip.  A path key longer than
400 bytes (LMDB allows 511) is stored as a NUL byte plus the path's blake3
digest, and its value then carries the path (``"path"`` in a file record;
``{"path": ..., "versions": [...]}`` instead of a bare version list).

``meta``
    ``format_version`` -> int.  ``baseline`` -> manifest (see below).
    ``baseline_at`` -> float.  ``created_at`` -> float.  ``parsers`` -> str,
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
    ``{"status": "ok"|"failed"|"unsupported", "units": [[name, locator, text], ...],
    "error": str|null, "secs": float, "at": float}``.  Keyed by content and
    parser only, never by path or mtime: renames, copies and reverts reuse it.
``versions``  path -> ``[[number, hash, recorded_at, cause, size], ...]``
    Numbers start at 1 and strictly increase.  Kept for deleted paths too.
``snapshots``  name -> manifest
``journal``  8-byte big-endian sequence number -> event
    ``{"t": float, "ev": str, ...}``; append-only.
``diffs``  blake3 of ``kind|old hash|new hash|path`` -> rendered diff (UTF-8 text)

A manifest is ``{path: [hash, size, mode, uid, gid, parser key]}``.

Durability: commits are not flushed to disk one by one (LMDB ``NOSYNC``);
the daemon flushes every ``FLUSH_INTERVAL`` seconds, after every baseline,
snapshot and restore, and at close.  A killed daemon loses nothing (the
kernel holds the pages); an operating-system crash or power loss may undo
the transactions of the last interval.  Preserved bytes (blobs) are always
fsynced before the operation that needed them goes on.

Format changelog:
    1  first format.
    2  file records start with the stat signature (``size,mtime,ctime,ino``
       and a newline) so that a rescan need not decode them.  Format 1 stores
       are upgraded in place when opened.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import lmdb

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
_DBS = ("meta", "files", "parses", "versions", "snapshots", "journal", "diffs")
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


def parse_key(h: str, parser: str) -> bytes:
    return f"{h}|{parser}".encode()


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
        d = loads(bytes(data).partition(b"\n")[2])
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


class Store:
    """An LMDB environment with the sub-databases above.

    One ``Store`` per process.  Transactions are short and never span an
    ``await``: every method opens and closes its own.
    """

    def __init__(self, root: Path, *, readonly: bool = False) -> None:
        self.root = root
        self.readonly = readonly
        dbdir = root / "db"
        if not readonly:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            dbdir.mkdir(mode=0o700, exist_ok=True)
        elif not dbdir.is_dir():
            raise StoreError(f"{root}: no swfs store here")
        try:
            self.env = lmdb.open(
                str(dbdir),
                map_size=max(_INITIAL_MAP_SIZE, self._current_data_size(dbdir) * 2),
                max_dbs=len(_DBS) + 1,
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
        self.dbs = {name: self.env.open_db(name.encode()) for name in _DBS}
        self._check_format()

    @staticmethod
    def _current_data_size(dbdir: Path) -> int:
        try:
            return (dbdir / "data.mdb").stat().st_size
        except FileNotFoundError:
            return 0

    def _check_format(self) -> None:
        with self.env.begin(write=True) as txn:
            raw = txn.get(b"format_version", db=self.dbs["meta"])
            if raw is None:
                txn.put(b"format_version", dumps(FORMAT_VERSION), db=self.dbs["meta"])
                txn.put(b"created_at", dumps(time.time()), db=self.dbs["meta"])
                return
            version = loads(raw)
            if version == 1:
                self._upgrade_1_to_2(txn)
                version = 2
                txn.put(b"format_version", dumps(version), db=self.dbs["meta"])
            if version != FORMAT_VERSION:
                raise StoreError(
                    f"{self.root}: store format {version}, this swfs reads format {FORMAT_VERSION}"
                )

    def _upgrade_1_to_2(self, txn: lmdb.Transaction) -> None:
        """Format 2 prefixes file records with their stat signature."""
        log.info("%s: upgrading the store from format 1 to 2", self.root)
        db = self.dbs["files"]
        rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
        for key, value in rows:
            d = loads(value)
            sig = signature_bytes(d["s"], d["m"], d["c"], d["i"])
            txn.put(key, sig + b"\n" + value, db=db)

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
        ``ensure_room`` first: LMDB cannot grow its map inside a transaction."""
        txn = self.env.begin(write=True)
        try:
            yield txn
        except BaseException:
            txn.abort()
            raise
        txn.commit()

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

    def iter_files(self, txn: lmdb.Transaction) -> Iterator[tuple[str, FileRecord]]:
        cur = txn.cursor(db=self.dbs["files"])
        for key, raw in cur:
            yield self._file_path(key, raw), FileRecord.decode(raw)

    @staticmethod
    def _file_path(key: Raw, raw: Raw) -> str:
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
                out[self._file_path(key, data)] = data[: data.find(b"\n")]
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
    ) -> dict[str, Any] | None:
        key = parse_key(h, parser)
        if txn is None:
            with self.read() as t:
                raw = t.get(key, db=self.dbs["parses"])
        else:
            raw = txn.get(key, db=self.dbs["parses"])
        return None if raw is None else loads(raw)

    def parse_status(self, h: str, parser: str, txn: lmdb.Transaction | None = None) -> str | None:
        """The status of a parse record without decoding its units."""
        key = parse_key(h, parser)
        if txn is None:
            # Every open in .parsed asks this: a buffer into the map, not a
            # copy of a record that holds every unit of a 24,000-page PDF.
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
        # A cursor finds the key without copying the (possibly huge) record.
        with txn.cursor(db=self.dbs["parses"]) as cur:
            return bool(cur.set_key(parse_key(h, parser)))

    def put_parse(self, h: str, parser: str, record: dict[str, Any]) -> None:
        data = dumps(record)
        self.ensure_room(len(data))
        with self.write() as txn:
            txn.put(parse_key(h, parser), data, db=self.dbs["parses"])

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

    # -- journal
    def append_journal(self, txn: lmdb.Transaction, event: str, **fields: Any) -> None:
        cur = txn.cursor(db=self.dbs["journal"])
        seq = struct.unpack(">Q", cur.key())[0] + 1 if cur.last() else 1
        fields = {"t": time.time(), "ev": event, **fields}
        txn.put(struct.pack(">Q", seq), dumps(fields), db=self.dbs["journal"])

    def iter_journal(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with self.read() as txn:
            for key, raw in txn.cursor(db=self.dbs["journal"]):
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
