"""The access journal: every open, read, listing and write through the mount,
with the process that made it, and the lineage each write implies.

The daemon's handlers call ``Journal`` methods that only touch memory (an
event appended to a list, a byte range merged into the event of an open
handle); a thread of its own stores them in batches, at least every
``FLUSH_SECONDS``, in an SQLite database beside the store (``access.sqlite``,
mode 0600).  So a read costs no request and no wait, and a daemon killed
with ``kill -9`` loses at most the events of the last second.

One read event stands for one open handle: its byte ranges grow while the
handle is read and the row is rewritten as they do (repeated reads of one
handle coalesce into one event).  Text files get the line range the ranges
cover once the handle is closed.

Retention: the newest ``MAX_EVENTS`` events are kept; older ones are deleted,
oldest first.  Lineage (the ``outputs`` table: each written file version with
its inputs) is computed when a write is stored and kept apart from the
events, so it outlives them (up to ``MAX_OUTPUTS`` written versions).

Lineage costs what a job read and wrote, once: the thread keeps, per job
that wrote, what it has read so far (``lineage.JobReads``, fed the read
events as it stores them), and a write stores only what changed in its
inputs since its process's previous write.  Jobs are kept in memory up to
``MAX_JOBS``, and dropped after ``JOB_IDLE_SECONDS`` without events; a job
not in memory (dropped, or the daemon restarted) is read back from the
events table at its next write.  So a job that outlived the retention of
its reads keeps them while it stays in memory, and loses those already
deleted when it is read back.

Tables (``access.sqlite``, ``journal_format`` 2 in ``meta``):

``procs``    key "PID.START" -> name, cmdline (JSON), uid, pgid, sid, chain
             (JSON [[pid, name], ...] nearest first), job
``events``   seq (in order of the requests) -> t (unix seconds), kind
             (read | list | write), op (open | write | rename | unlink |
             list), proc, job, path (in the mount), source (the native file
             a read is of), hash (of ``source`` when read; of ``path`` after
             a write), locator, detail (JSON: ranges, bytes, lines, names,
             from)
``outputs``  seq of the write -> path (its present name: renames move it),
             hash, proc, job, inputs, superseded (a later write of the same
             job replaced it), gone (unlinked), base, carry.  The write's
             inputs are the writing process's view of its job's reads (the
             groups of reads that count for its writes, ``swfs.evidence.lineage``)
             less the written version itself, in the order of their first
             read, then the inputs of output row ``carry`` (the job's
             previous write of the path, 0: none) that the view has not and
             that are not the written version, in that row's order.
             ``inputs`` is JSON {"own": [path, hash] written, "g": [the view
             whole: {path, hash, locators, readers, t, o}]} when base is 0,
             else the view's change since output row ``base`` (the same
             process's previous write): {"own", "set": [items added or
             replaced], "add": [[path, hash, locators, readers] appended to
             an item], "del": [[path, hash]]}; ``o`` is [0, seq of the
             item's first read].  A view is stored whole again once the
             changes since reach its size.  Before ``retain`` deletes a row
             others rest on, they get the view whole ("g") or the carried
             inputs themselves ("c": [items], carry 0).  A JSON list is
             the whole list (format 1, which had no base and carry: a daemon
             opening such a journal adds them, 0; readers take them as 0).
``links``    job, proc, chan, write, std: the channels (pipes, files open
             for writing) a process of the job was seen holding
             (``procinfo.Link``); which processes' reads reach a write
             (``swfs.evidence.lineage``).  A journal without it has it added, empty.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swfs.api import Access, RecordedHash, RelPath, ReviewEntry
from swfs.evidence.lineage import JobReads, job_reads, read_rows, stored_inputs
from swfs.evidence.procinfo import Caller, Link, ProcCache, job_links, read_cmdline, read_stat
from swfs.store.fsutil import holds_binary, open_to_read
from swfs.store.sqlitetext import PathSafeConnection, escaped_json, pow2_chunks

log = logging.getLogger(__name__)

DB_NAME = "access.sqlite"
FLUSH_REQUEST = "access.flush-request"
FORMAT = 2
FLUSH_SECONDS = 0.5
# Events kept in memory while the journal cannot store them (a full disk):
# beyond it the oldest are dropped, and counted.
MAX_WAITING = 200_000
MAX_EVENTS = 1_000_000
MAX_OUTPUTS = 200_000
MAX_JOBS = 64  # jobs whose reads the thread keeps (the rest: read back at a write)
JOB_IDLE_SECONDS = 600.0
# A write's user.sw.inputs is kept in memory when its list has at most this
# many inputs (a longer one is built from the outputs table when asked).
INPUTS_INLINE = 256
MAX_RANGES = 64
# Written files whose user.sw.inputs stays in memory (the rest: one query),
# and the characters those values may hold in all: one write of a job that
# read thousands of files has an input list of hundreds of KB, so a count
# alone let the cache grow to hundreds of MB over a long run.
INPUTS_CACHED = 2_000
INPUTS_CACHED_CHARS = 8 * 1024 * 1024
MAX_NAMES = 10_000  # names of one listing kept
TEXT_LINES_LIMIT = 16 * 1024 * 1024  # text files up to this size get line ranges
LINES_CHUNK = 256 * 1024  # bytes counted at a time for line ranges
KINDS = ("read", "list", "write")
_EVENT_ROW = "(?,?,?,?,?,?,?,?,?,?,?)"
ROWS_PER_INSERT = 256
_NO_RANGES = '{"ranges":[],"bytes":0}'
_NO_RANGES_OPEN = '{"ranges":[],"bytes":0,"open":true}'
PARSED = ".parsed"
VERSIONS = ".versions"
REVIEW = ".review"
MAX_LINKS_SEEN = 100_000  # links remembered as recorded (the rest: recorded again)
MAX_NO_LIVE = 100_000  # paths remembered as having no live output row (``_no_live``)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT);
CREATE TABLE IF NOT EXISTS procs(
    key TEXT PRIMARY KEY, pid INTEGER, start INTEGER, name TEXT, cmdline TEXT,
    uid INTEGER, pgid INTEGER, sid INTEGER, chain TEXT, job TEXT);
CREATE TABLE IF NOT EXISTS events(
    seq INTEGER PRIMARY KEY, t REAL, kind TEXT, op TEXT, proc TEXT, job TEXT,
    path TEXT, source TEXT, hash TEXT, locator TEXT, detail TEXT);
CREATE INDEX IF NOT EXISTS events_job ON events(job, seq);
CREATE TABLE IF NOT EXISTS outputs(
    seq INTEGER PRIMARY KEY, t REAL, path TEXT, hash TEXT, proc TEXT, job TEXT,
    inputs TEXT, superseded INTEGER DEFAULT 0, gone INTEGER DEFAULT 0,
    base INTEGER DEFAULT 0, carry INTEGER DEFAULT 0);
CREATE INDEX IF NOT EXISTS outputs_path ON outputs(path, seq);
CREATE TABLE IF NOT EXISTS links(
    job TEXT, proc TEXT, chan TEXT, write INTEGER, std INTEGER,
    PRIMARY KEY(job, proc, chan, write, std));
"""


UNCOUNTED, BINARY = -1, -2
TEXT_PROBE = 8192  # a NUL in a file's first bytes makes it no text (as grep and git judge)


class JournalError(Exception):
    """The journal cannot be read (missing, not allowed, damaged)."""


class QueuedRecords(Protocol):
    """The write protocol's queue of records (``swfs.history.writesession``):
    a close's and a change of names' records are made after their reply."""

    def queued_for(self, rel: str | None) -> bool:
        """Cheap: whether a queued record may change what the store says of ``rel``."""
        ...

    def drain_for(self, rel: str | None) -> None:
        """*slow*: wait for the queued records that may concern ``rel``."""
        ...


@dataclass(slots=True)
class Event:
    seq: int
    t: float
    kind: str
    op: str
    caller: Caller
    path: str
    source: str = ""
    hash: str | None = None
    locator: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    closed: bool = True
    ranges: list[list[int]] = field(default_factory=list)  # bytes read, [start, end)
    stored: tuple[int, int, bool] | None = None  # (ranges, end, closed) when last stored
    # A native file read from byte 0 on, in order (``_count``): newlines in
    # the bytes read but their last byte; UNCOUNTED once reads leave that
    # order, BINARY once a NUL showed in its first 8 KiB.
    newlines: int = 0
    last_nl: bool = False
    # A write whose record was still queued when it was seen (a close's, a
    # rename's: made off the reply path): its hash is looked up on the
    # journal's thread, once the queue has made the record (``settle``).
    unresolved: bool = False
    recorded: RecordedHash | None = None  # a close's queued record: its hash once made


@dataclass(slots=True)
class _Open:
    """What the journal keeps of an open handle."""

    caller: Caller
    path: str
    xattrs: Mapping[str, str] | None  # a generated file's; None: a native file
    event: Event | None = None  # the read event (reading handles)
    readable: bool = False  # opened for writing and reading: a read makes the event


def _merge(ranges: list[list[int]], off: int, end: int) -> None:
    """Add [off, end) to ``ranges`` (sequential reads extend the last range)."""
    if ranges:
        last = ranges[-1]
        if last[0] <= off <= last[1]:
            last[1] = max(last[1], end)
            return
    ranges.append([off, end])
    if len(ranges) > MAX_RANGES:
        # Never sort in place: the journal's thread may be copying the list.
        ordered = sorted(ranges)
        merged: list[list[int]] = [ordered[0]]
        for s, e in ordered[1:]:
            if s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        if len(merged) > MAX_RANGES:  # keep the span of the rest
            merged[MAX_RANGES - 1 :] = [[merged[MAX_RANGES - 1][0], merged[-1][1]]]
        ranges[:] = merged


def _insert_events(con: sqlite3.Connection, verb: str, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` into ``events``, ``ROWS_PER_INSERT`` to a statement.
    ``executemany`` steps once per row, and the sqlite3 module lets go of
    the interpreter lock around every step: on a loaded machine each of those
    hand-overs can wake the daemon's loop for nothing and make it wait to
    get the lock back.  One statement of many rows hands it over once."""
    for chunk in pow2_chunks(rows, ROWS_PER_INSERT):  # few statement shapes (swfs.sqlitetext)
        sql = f"{verb} INTO events VALUES " + ",".join([_EVENT_ROW] * len(chunk))
        con.execute(sql, [v for row in chunk for v in row])


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        if not path.exists():
            raise JournalError(f"{path}: no access journal (nothing was recorded yet)")
        try:
            con = sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, timeout=10, factory=PathSafeConnection
            )
            con.execute("SELECT 1 FROM meta LIMIT 1")
        except sqlite3.Error as exc:
            if not os.access(path, os.R_OK):
                raise JournalError(f"{path}: permission denied") from None
            raise JournalError(f"{path}: cannot read the access journal: {exc}") from None
        return con
    con = sqlite3.connect(
        str(path), timeout=30, check_same_thread=False, factory=PathSafeConnection
    )
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.executescript(_SCHEMA)
    cols = {r[1] for r in con.execute("PRAGMA table_info(outputs)")}
    for col in ("base", "carry"):
        if col not in cols:
            # Format 1: every output row holds its whole input list (0: none).
            con.execute(f"ALTER TABLE outputs ADD COLUMN {col} INTEGER DEFAULT 0")
    con.execute("INSERT OR REPLACE INTO meta VALUES ('journal_format', ?)", (str(FORMAT),))
    con.commit()
    return con


def _file_ids(path: Path) -> tuple[tuple[int, int], ...] | None:
    """(device, inode) of the database, its WAL and its shared memory; None
    when one of them is gone."""
    try:
        return tuple(
            (st.st_dev, st.st_ino)
            for st in (os.stat(str(path) + suffix) for suffix in ("", "-wal", "-shm"))
        )
    except OSError:
        return None


class Journal:
    """Records accesses through one mount.  The ``on_*`` methods run on the
    daemon's loop and only touch memory; ``run`` stores them from a thread."""

    enabled = True

    @property
    def seq(self) -> int:
        """The sequence number of the last event recorded: it moves with
        every access, so what was built from the journal before is stale."""
        return self._seq

    def __init__(
        self,
        store_dir: Path,
        *,
        file_hash: Callable[[str], str | None],
        src: Path | None = None,
        locate: Callable[[str], str] | None = None,
        callers: tuple[tuple[int, int], ...] = (),
        max_events: int = MAX_EVENTS,
        flush_seconds: float = FLUSH_SECONDS,
        records: QueuedRecords | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.path = self.store_dir / DB_NAME
        self.src = src
        # Where a path's bytes are now (a --staged mount: its staged copy,
        # not SRC's); default: under ``src``.
        self.locate = locate
        self.file_hash = file_hash
        # The write protocol's queue of records (None: every record is made
        # before its event is seen).
        self.records = records
        self.procs = ProcCache(callers)
        self.max_events = max_events
        self.flush_seconds = flush_seconds
        old = os.umask(0o077)
        try:
            self._db = _connect(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        row = self._db.execute("SELECT max(seq) FROM events").fetchone()
        orow = self._db.execute("SELECT max(seq) FROM outputs").fetchone()
        self._seq = max(row[0] or 0, orow[0] or 0)
        self._lock = threading.Lock()
        self._new: list[Event] = []
        self._closed: list[Event] = []
        self._open: dict[int, _Open] = {}
        self._stored_procs: set[str] = set()
        # Paths the thread knows have no output row left that is not gone
        # (it marked them so: an unlink, a rename away): a write of one needs
        # no query for the row it carries on from.  A checkout unlinks each
        # file before it writes it again.  Emptied when a store fails (its
        # transaction is rolled back) and when it grows past MAX_NO_LIVE.
        self._no_live: set[str] = set()
        # Channels seen held (loop side: appended; the thread swaps it out),
        # each (job, link); the processes whose job was looked at, and the
        # links already recorded.
        self._links: list[tuple[str, Link]] = []
        self._linked: set[str] = set()
        self._links_seen: set[tuple[str, Link]] = set()
        # A process that feeds a pipe of its own job at its first open: the
        # stages after it may not have been forked yet, and may be gone by
        # the time the last one opens its output; a thread of its own looks
        # at the job again a few times while they run (``_Follow``).
        self._follow = _Follow(self)
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        # What each job that wrote has read (the thread's only): see the
        # module's comment; the least recently active first.
        self._jobs: OrderedDict[str, JobReads] = OrderedDict()
        # Only the recently written: the rest is read back from the outputs
        # table when asked (each entry is a JSON list of everything its job
        # read, kilobytes; a dict of every file ever written grew the
        # daemon by that much per file).
        self.inputs_by_path = RecentInputs(INPUTS_CACHED, INPUTS_CACHED_CHARS)
        # The last write's input list and its user.sw.inputs value: the
        # writes of a job that read nothing in between share them
        # (``WriteInputs.items``), a checkout's thousands of files included.
        self._xattr_memo: tuple[list[dict[str, Any]], str] | None = None
        self._load_inputs()
        self.owner = os.getuid()
        self.outputs_version = 0  # moves when a stored write changed lineage
        self._reader: sqlite3.Connection | None = None  # the loop's own
        # user.sw.inputs read back from the tables, in request threads: a
        # connection of their own, one query at a time.
        self._inputs_reader: sqlite3.Connection | None = None
        self._inputs_lock = threading.Lock()
        self._md: tuple[object, bytes] | None = None
        # The store's health (``health``): the database file the connection
        # opened (a file removed or replaced under the daemon would take
        # every later event with it, silently), why storing fails now, and
        # what the last reopen said.
        self._file_ids: tuple[tuple[int, int], ...] | None = None  # after the first flush
        self._failing: str | None = None
        self._reopened: dict[str, Any] | None = None
        self._dropped = 0  # events not stored because too many waited (MAX_WAITING)

    # -- the loop's side: memory only

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    # No locks here: each step is one operation on a list or dict, which the
    # journal's thread only swaps out or copies whole.

    def _add(self, ev: Event) -> None:
        self._new.append(ev)

    def on_open(
        self,
        fh: int,
        pid: int,
        path: str,
        *,
        flags: int = os.O_RDONLY,
        xattrs: Mapping[str, str] | None = None,
        known_hash: str | None = None,
    ) -> None:
        """A file opened with ``flags``.  ``path`` is its path in the mount;
        ``xattrs`` a generated file's (source, source_hash, locator), None
        for a native file (hidden ones included); ``known_hash`` a native
        file's content hash as the open found it recorded (else it is looked
        up here)."""
        caller = self.procs.caller_of(pid)
        self._see_links(caller)
        h = _Open(caller, path, xattrs)
        self._open[fh] = h
        mode = flags & os.O_ACCMODE
        if mode != os.O_RDONLY or flags & os.O_TRUNC:
            # Written: a read through it (O_RDWR) is recorded when it happens,
            # of the bytes before this handle's writes are recorded.
            h.readable = mode == os.O_RDWR and not flags & os.O_TRUNC
            return
        h.event = self._read_event(caller, path, xattrs, known_hash)
        self._add(h.event)
        if (
            xattrs is not None
            and path.startswith(REVIEW + "/")
            and path.endswith(".diff")
            and xattrs.get("baseline_hash")
            and xattrs.get("current_hash")
        ):
            # A file's diff shows two versions: its read is a read of both
            # (the event above, of the present one; this, of the baseline).
            ev = self._read_event(caller, path, {**xattrs, "current_hash": xattrs["baseline_hash"]})
            ev.closed = True
            self._add(ev)

    def _see_links(self, caller: Caller) -> None:
        """At a process's first open: the channels its job holds now (it may
        be gone by the time its reads are stored)."""
        key = caller.proc.key
        if key in self._linked:
            return
        if len(self._linked) > MAX_LINKS_SEEN:
            self._linked.clear()
        self._linked.add(key)
        links = self._record_links(caller)
        root = caller.chain[-1].key
        inherited = {lk.chan for lk in links if lk.proc == root}
        if any(
            lk.proc == key and lk.write and lk.std and lk.chan.startswith("pipe:")
            for lk in links
            if lk.chan not in inherited  # a harness's pipe the whole job writes
        ):
            self._follow.add(caller)

    def _record_links(self, caller: Caller, procs: ProcCache | None = None) -> list[Link]:
        links = job_links(procs or self.procs, caller)
        seen = self._links_seen
        if len(seen) > MAX_LINKS_SEEN:
            seen.clear()
        for link in links:
            item = (caller.job, link)
            if item not in seen:
                seen.add(item)
                self._links.append(item)
        return links

    def _read_event(
        self, caller: Caller, path: str, xattrs: Mapping[str, str] | None, known: str | None = None
    ) -> Event:
        unresolved = False
        if xattrs is None:  # a native file
            if known is not None:
                hash_ = known
            elif self.records is not None and self.records.queued_for(path):
                # Its record is queued (a close's just before): looked up on
                # the journal's thread once made.
                hash_, unresolved = None, True
            else:
                hash_ = self.file_hash(path)
            source, locator = path, None
        elif path.startswith(PARSED + "/"):
            source = xattrs.get("source", "")
            hash_, locator = xattrs.get("source_hash"), xattrs.get("locator")
        elif path.startswith(REVIEW + "/") and path.endswith(".diff") and "current_hash" in xattrs:
            # .review/<rel>.diff: a read of <rel> (see ``on_open``)
            source = path[len(REVIEW) + 1 : -len(".diff")]
            hash_, locator = xattrs.get("current_hash"), None
        elif path.startswith(REVIEW + "/") and path.endswith(".diff") and "baseline_hash" in xattrs:
            source = path[len(REVIEW) + 1 : -len(".diff")]  # a deleted file's diff
            hash_, locator = xattrs.get("baseline_hash"), None
        elif path.startswith(VERSIONS + "/") and not path.startswith(VERSIONS + "/@"):
            # .versions/<rel>/NNNN-<hash8>.<ext>: a read of <rel> as it was
            source = path[len(VERSIONS) + 1 :].rpartition("/")[0]
            hash_, locator = xattrs.get("hash"), None
        else:
            source, hash_, locator = "", xattrs.get("hash"), None
        ev = Event(self._next(), time.time(), "read", "open", caller, path, source, hash_, locator)
        ev.unresolved = unresolved
        ev.closed = False
        if locator or source != path:
            ev.newlines = UNCOUNTED  # no line ranges (see ``_read_detail``)
        return ev

    def on_read(self, fh: int, off: int, n: int, data: bytes | None = None) -> None:
        """``n`` bytes read at ``off`` through handle ``fh``; ``data``, the
        bytes themselves, lets a text file's lines be counted as they pass
        (else the journal's thread reads the file again to count them)."""
        h = self._open.get(fh)
        if h is None or n <= 0:
            return
        ev = h.event
        if ev is None:
            if not h.readable:
                return
            ev = h.event = self._read_event(h.caller, h.path, h.xattrs)
            ev.newlines = UNCOUNTED  # the handle writes too: lines of the file when stored
            self._add(ev)
        ranges = ev.ranges
        if ev.newlines >= 0:
            if data is None or off != (ranges[-1][1] if ranges else 0) or len(ranges) > 1:
                ev.newlines = UNCOUNTED
            else:
                _count(ev, off, data)
        if ranges:
            last = ranges[-1]
            if last[0] <= off <= last[1]:  # the next sequential read
                if off + n > last[1]:
                    last[1] = off + n
                return
        _merge(ranges, off, off + n)

    def on_wrote(self, fh: int, path: str | None, recorded: RecordedHash | None = None) -> None:
        """What handle ``fh`` wrote to ``path`` was recorded by the engine, or
        its record queued (``recorded``: its hash once made)."""
        h = self._open.get(fh)
        if h is None or path is None:
            return
        ev = Event(self._next(), time.time(), "write", "write", h.caller, path, path)
        if recorded is not None:
            ev.recorded = recorded
        else:
            self._hash_of_write(ev, path)
        self._add(ev)

    def _hash_of_write(self, ev: Event, path: str) -> None:
        """The hash ``path`` is recorded with, now or (its record queued) on
        the journal's thread before the event is stored."""
        if self.records is not None and self.records.queued_for(path):
            ev.unresolved = True
        else:
            ev.hash = self.file_hash(path)

    def _resolve(self, new: list[Event]) -> None:
        """*slow*: the hashes of writes whose records were queued."""
        for ev in new:
            if ev.recorded is not None:
                ev.recorded.wait()
                ev.hash, ev.recorded = ev.recorded.hash, None
            elif ev.unresolved:
                if self.records is not None:
                    self.records.drain_for(ev.path)
                ev.hash = self.file_hash(ev.path)
                ev.unresolved = False

    def on_close(self, fh: int) -> None:
        h = self._open.pop(fh, None)
        if h is None or h.event is None:
            return
        h.event.closed = True
        self._closed.append(h.event)

    def on_list(self, pid: int, path: str, names: list[str]) -> None:
        self._listed(self.procs.caller_of(pid), path, names)

    def _listed(self, caller: Caller, path: str, names: list[str]) -> None:
        ev = Event(self._next(), time.time(), "list", "list", caller, path)
        ev.detail = {"names": names[:MAX_NAMES], "count": len(names)}
        self._add(ev)

    def on_opendir(self, fh: int, pid: int, path: str) -> None:
        """A directory opened whose listing is taken later (``on_listed``)."""
        self._open[fh] = _Open(self.procs.caller_of(pid), path, None)

    def on_listed(self, fh: int, names: list[str]) -> None:
        h = self._open.get(fh)
        if h is not None:
            self._listed(h.caller, h.path, names)

    def on_rename(self, pid: int, old: str, new: str) -> None:
        ev = Event(self._next(), time.time(), "write", "rename", self.procs.caller_of(pid), new)
        ev.source = new
        ev.detail = {"from": old}
        self._hash_of_write(ev, new)
        self._add(ev)

    def on_unlink(self, pid: int, path: str) -> None:
        ev = Event(self._next(), time.time(), "write", "unlink", self.procs.caller_of(pid), path)
        self._add(ev)

    def may_see(self, uid: int) -> bool:
        """Lineage and the journal belong to the mounting user and root."""
        return uid in (0, self.owner)

    def access(self) -> Access:
        return Access(self.owner, os.getgid(), 0o400)

    def lineage_md(self, review: Iterable[ReviewEntry]) -> bytes:
        """``.review/LINEAGE.md`` (read on the loop: a small indexed query,
        cached until the next stored write)."""
        from swfs.evidence.lineage import lineage_md, outputs

        changed = tuple((str(e.rel), str(e.status), e.current_hash) for e in review)
        key = (self.outputs_version, changed)
        if self._md is None or self._md[0] != key:
            if self._reader is None:
                self._reader = sqlite3.connect(
                    str(self.path), check_same_thread=False, timeout=5, factory=PathSafeConnection
                )
            text = lineage_md(outputs(self._reader), changed, self._exists)
            self._md = (key, text.encode("utf-8"))
        return self._md[1]

    def inputs_xattr(self, path: str, current: str | None) -> str | None:
        """``user.sw.inputs`` of ``path`` when its present hash is ``current``:
        JSON [{"path", "hash", "locators"}] of what it was derived from."""
        hit = self.inputs_by_path.get(path)
        if hit is None:
            hit = self._stored_inputs(path)
        if hit is None or (current is not None and hit[0] != current):
            return None
        return hit[1]

    def _stored_inputs(self, path: str) -> tuple[str | None, str] | None:
        """``path``'s present output row (what ``_lineage`` stored), for a
        path no longer among the recently written (run in a request thread:
        a long job's chain of stored changes takes tens of ms to read)."""
        with self._inputs_lock:
            return self._read_inputs(path)

    def _read_inputs(self, path: str) -> tuple[str | None, str] | None:
        if self._inputs_reader is None:
            self._inputs_reader = sqlite3.connect(
                str(self.path), check_same_thread=False, timeout=5, factory=PathSafeConnection
            )
        con = self._inputs_reader
        try:
            row = con.execute(
                "SELECT seq, hash FROM outputs WHERE path=? AND gone=0 AND superseded=0 "
                "ORDER BY seq DESC LIMIT 1",
                (path,),
            ).fetchone()
            if row is None:
                return None
            items = stored_inputs(con, [row[0]]).get(row[0], [])
        except sqlite3.Error as exc:
            log.debug("inputs of %s: %s", path, exc)
            return None
        hit = (row[1], xattr_value(items))
        self.inputs_by_path[path] = hit
        return hit

    # -- the thread's side

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="swfs-journal", daemon=True)
        self._thread.start()
        self._follow.start()

    def close(self) -> None:
        """Store what is left and stop the thread."""
        self._stop = True
        self._wake.set()
        self._follow.stop()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        else:
            self.flush()
        self._db.close()
        if self._reader is not None:
            self._reader.close()
        with self._inputs_lock:
            if self._inputs_reader is not None:
                self._inputs_reader.close()
                self._inputs_reader = None

    # -- the store's health (swfs status, swfs check)

    def health(self) -> dict[str, Any]:
        """``{"state": "ok"}``; ``"failing"`` with the reason while events
        cannot be stored (they wait in memory); after the journal was started
        afresh, ``"reopened"`` says why, when, and what the old file is now."""
        if self._failing is not None:
            out: dict[str, Any] = {"state": "failing", "reason": self._failing}
            if self._dropped:
                out["dropped"] = self._dropped
            return out
        if self._reopened is not None:
            return {"state": "reopened", **self._reopened}
        return {"state": "ok"}

    def acknowledge(self) -> None:
        """``swfs check --repair``: the reopen was seen; health says ok again."""
        self._reopened = None

    def _check_file(self) -> None:
        """JournalError when the files the connection writes are not the
        journal's any more: removed, replaced or overwritten under the daemon
        (the connection would go on writing into the removed ones, silently)."""
        if self._file_ids is None:
            self._file_ids = _file_ids(self.path)  # every one exists once it has written
            return
        now = _file_ids(self.path)
        if now is None:
            raise JournalError(f"{self.path}: its files were removed under the daemon")
        if now != self._file_ids:
            raise JournalError(f"{self.path}: its files were replaced under the daemon")
        with open(self.path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise JournalError(f"{self.path}: overwritten under the daemon")

    def _store_failed(self, exc: BaseException) -> None:
        """The journal thread could not store: a busy moment is tried again at
        the next flush; a store that fails (removed, replaced, corrupt, a disk
        error) is set aside and the journal started afresh, without a remount.
        The events not stored yet wait in memory and go to the new file."""
        reason = str(exc) or type(exc).__name__
        # A busy moment, or a full disk: the store is sound, only the write
        # waits (the events wait in memory, up to MAX_WAITING).
        transient = (
            isinstance(exc, sqlite3.OperationalError)
            and any(w in reason for w in ("locked", "busy", "disk is full"))
        ) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT))
        if transient or not isinstance(exc, (sqlite3.DatabaseError, JournalError, OSError)):
            if self._failing != reason:
                log.exception("access journal: storing events failed")
            self._failing = reason
            self._bound_waiting()
            return
        self._failing = reason
        log.error("%s: access journal failed (%s): starting it afresh", self.path, reason)
        try:
            kept = self._reopen()
        except (OSError, sqlite3.Error) as again:
            log.error("%s: the access journal cannot be started afresh: %s", self.path, again)
            self._failing = f"{reason}; starting afresh failed: {again}"
            return
        self._failing = None
        self._reopened = {
            "reason": reason,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kept": kept,
        }
        log.warning(
            "%s: access journal started afresh%s",
            self.path,
            f"; the failed one is kept as {kept}" if kept else "",
        )

    def _bound_waiting(self) -> None:
        """While events cannot be stored, keep at most MAX_WAITING of them
        (the newest); say how many were dropped."""
        extra = len(self._new) - MAX_WAITING
        if extra > 0:
            del self._new[:extra]
            self._dropped += extra
            log.error("access journal: %d events dropped while it could not store", extra)

    def _reopen(self) -> str | None:
        """*the journal thread*: a new, empty journal at ``path``; the old
        file, if one is there, renamed aside.  Returns its new name."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        kept = None
        if self.path.exists():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            aside = self.path.with_name(f"{DB_NAME}.failed-{stamp}")
            os.replace(self.path, aside)
            kept = aside.name
        for suffix in ("-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(self.path) + suffix)
        old = os.umask(0o077)
        try:
            self._db = _connect(self.path)
        finally:
            os.umask(old)
        self._file_ids = None
        self._stored_procs.clear()  # the new file has none of them
        self._no_live.clear()
        self._md = None
        # Readers made for the old file: dropped, not closed (the loop may be
        # reading with one right now); later reads open the new file.
        self._reader = None
        with self._inputs_lock:
            if self._inputs_reader is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._inputs_reader.close()
                self._inputs_reader = None
        return kept

    def _run(self) -> None:
        request = self.store_dir / FLUSH_REQUEST
        flushes = 0
        while not self._stop:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            try:
                self._check_file()
                self.flush()
                flushes += 1
                if flushes % 600 == 0:
                    self.retain()
                if request.exists():
                    request.unlink(missing_ok=True)  # the reader waits for this
                self._failing = None
            except Exception as exc:
                self._store_failed(exc)
        try:
            self.flush()
        except Exception:
            log.exception("access journal: storing the last events failed")

    def flush(self) -> int:
        """Store what was recorded since the last flush; the number of rows."""
        with self._lock:  # one flush at a time (the thread, close())
            return self._flush()

    def _flush(self) -> int:
        new = self._new
        self._new = []
        links = self._links
        self._links = []
        closed = self._closed
        self._closed = []
        try:
            self._resolve(new)
            return self._store(new, links, closed)
        except BaseException:
            self._no_live.clear()  # what it learned was rolled back
            # Kept for the next flush (into a reopened journal, if need be):
            # the loop has only appended to the fresh lists meanwhile.
            self._new[:0] = new
            self._links[:0] = links
            self._closed[:0] = closed
            raise

    def _store(self, new: list[Event], links: list[tuple[str, Link]], closed: list[Event]) -> int:
        reading = [h.event for h in list(self._open.values()) if h.event is not None]
        # A new event is stored as it is now; one stored before, when it
        # changed since (``Event.stored``: what its row says).
        rows = []
        callers: dict[str, Caller] = {}
        writes = []
        row = self._row
        for k, ev in enumerate(new):
            rows.append(row(ev))
            callers[ev.caller.proc.key] = ev.caller
            if ev.kind == "write":
                writes.append(ev)
            if k % 64 == 63:
                time.sleep(0)  # let the daemon's loop have the interpreter
        updates = []
        updated = []
        for ev in closed + reading:
            ranges = ev.ranges
            if ev.stored != (len(ranges), ranges[-1][1] if ranges else 0, ev.closed):
                updates.append((row(ev)[10], ev.seq))
                updated.append(ev)
        if not rows and not updates and not links:
            return 0
        stored = self._stored_procs
        con = self._db
        with con:
            for key, c in callers.items():
                if key not in stored:
                    self._store_proc(con, c)
            try:  # seqs only grow: a plain insert (a third cheaper than a replace)
                _insert_events(con, "INSERT", rows)
            except sqlite3.IntegrityError:  # never expected; keep the newest
                _insert_events(con, "INSERT OR REPLACE", rows)
            # Only a read's detail changes after it was stored (ranges, closed).
            con.executemany("UPDATE events SET detail=? WHERE seq=?", updates)
            if links:
                # Before the writes: which reads reach them may depend on them.
                con.executemany(
                    "INSERT OR IGNORE INTO links VALUES (?,?,?,?,?)",
                    [(job, lk.proc, lk.chan, lk.write, lk.std) for job, lk in links],
                )
                for job, lk in links:
                    acc = self._jobs.get(job)
                    if acc is not None:
                        acc.link(lk)
            if writes or self._jobs:
                self._lineage(con, new, rows, updated, updates)
        if writes:
            self.outputs_version += 1
        return len(rows) + len(updates)

    def _row(self, ev: Event) -> tuple[Any, ...]:
        """The event's row as it is now (and marked as stored so)."""
        if ev.kind == "read":
            closed = ev.closed
            if not ev.ranges:  # no read reached the daemon (the kernel's cache served them)
                ev.stored = (0, 0, closed)
                detail = _NO_RANGES if closed else _NO_RANGES_OPEN
            else:
                ranges = [list(r) for r in ev.ranges]  # the loop may extend them meanwhile
                ev.stored = (len(ranges), ranges[-1][1], closed)
                detail = self._read_detail(ev, ranges, closed)
        else:
            detail = _detail_json(ev.detail)
        c = ev.caller
        return (
            ev.seq,
            ev.t,
            ev.kind,
            ev.op,
            c.proc.key,
            c.job,
            ev.path,
            ev.source,
            ev.hash,
            ev.locator,
            detail,
        )

    def _read_detail(self, ev: Event, ranges: list[list[int]], closed: bool) -> str:
        # Built by hand: this runs once per read, json.dumps costs more.
        spans = ",".join(f"[{s},{e}]" for s, e in ranges)
        detail = f'{{"ranges":[{spans}],"bytes":{sum(e - s for s, e in ranges)}'
        if not closed:
            detail += ',"open":true'
        elif not ev.locator and ev.source == ev.path and (path := self._bytes_of(ev.source)):
            # Line ranges need the file's bytes: counted as they were read
            # (``_count``), else read here, off the loop.
            lines = _counted_lines(path, ev, ranges)
            if lines is not None:
                detail += f',"lines":[{lines[0]},{lines[1]}]'
        return detail + "}"

    def _exists(self, rel: str) -> bool:
        path = self._bytes_of(rel)
        return path is None or os.path.lexists(path)

    def _bytes_of(self, rel: str) -> Path | None:
        """The file whose bytes the mount serves for ``rel``."""
        if self.locate is not None:
            return Path(self.locate(rel))
        return None if self.src is None else self.src / rel

    def _store_proc(self, con: sqlite3.Connection, c: Caller) -> None:
        p = c.proc
        name, cmdline = p.name, c.cmdline
        now = read_stat(p.pid)
        if now is not None and now.start == p.start:
            # Read again now: a shell's child that opened a redirection has
            # exec'd its command since.
            # A process that has exited but is not reaped yet (a zombie)
            # has no command line left: keep the one read at its open.
            name, cmdline = now.name, read_cmdline(p.pid) or cmdline
        chain = [[a.pid, a.name] for a in c.chain]
        con.execute(
            "INSERT OR REPLACE INTO procs VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                p.key,
                p.pid,
                p.start,
                name,
                json.dumps(list(cmdline), ensure_ascii=False),
                p.uid,
                p.pgid,
                p.sid,
                json.dumps(chain, ensure_ascii=False),
                c.job,
            ),
        )
        self._stored_procs.add(p.key)
        if len(self._stored_procs) > 100_000:
            self._stored_procs.clear()

    def _lineage(
        self,
        con: sqlite3.Connection,
        new: list[Event],
        rows: list[tuple[Any, ...]],
        updated: list[Event],
        updates: list[tuple[str, int]],
    ) -> None:
        """Advance the jobs' reads by the events just stored (``rows``, the
        rows of ``new``; ``updates``, the new details of ``updated``) and
        store the lineage of their writes, renames and unlinks, in order."""
        jobs = self._jobs
        details = {seq: detail for detail, seq in updates} if updates else {}
        for ev in updated:  # stored before, changed since
            acc = jobs.get(ev.caller.job)
            if acc is not None and ev.seq <= acc.upto:
                acc.update(ev.seq, details[ev.seq])
        now = time.monotonic()
        for ev, row in zip(new, rows, strict=True):
            if ev.kind == "read":
                acc = jobs.get(ev.caller.job)
                if acc is not None and ev.seq > acc.upto:
                    acc.fold(
                        ev.seq,
                        ev.caller.proc.key,
                        ev.source,
                        ev.hash,
                        ev.locator,
                        details.get(ev.seq, row[10]),
                        ev.t,
                    )
                    acc.touched = now
            elif ev.kind == "write":
                self._write_lineage(con, ev, now)
        while jobs:
            first = next(iter(jobs.values()))
            if len(jobs) <= MAX_JOBS and now - first.touched < JOB_IDLE_SECONDS:
                break
            jobs.popitem(last=False)

    def _write_lineage(self, con: sqlite3.Connection, ev: Event, now: float) -> None:
        if ev.op == "write":
            job = ev.caller.job
            acc = self._jobs.pop(job, None)
            if acc is None:
                acc = job_reads(con, job, ev.seq)
            self._jobs[job] = acc  # the most recently active last
            acc.touched = now
            no_live = self._no_live
            if ev.path in no_live:
                prev = None
                no_live.discard(ev.path)  # its row is inserted below
            else:
                prev = con.execute(
                    "SELECT seq FROM outputs WHERE path=? AND job=? AND gone=0 "
                    "ORDER BY seq DESC LIMIT 1",
                    (ev.path, job),
                ).fetchone()
            # The same job wrote this file before: this version carries on
            # from that one (a shell's `>` then `>>`, a script's flushes).
            got = acc.write(
                con,
                ev.seq,
                ev.caller.proc.key,
                ev.path,
                ev.hash,
                None if prev is None else prev[0],
                want_items=INPUTS_INLINE,
            )
            if prev is not None:
                con.execute("UPDATE outputs SET superseded=1 WHERE seq=?", (prev[0],))
            con.execute(
                "INSERT OR REPLACE INTO outputs"
                "(seq, t, path, hash, proc, job, inputs, superseded, gone, base, carry) "
                "VALUES (?,?,?,?,?,?,?,0,0,?,?)",
                (
                    ev.seq,
                    ev.t,
                    ev.path,
                    ev.hash,
                    ev.caller.proc.key,
                    job,
                    got.text,
                    got.base,
                    got.carry,
                ),
            )
            if got.items is not None:
                memo = self._xattr_memo
                if memo is None or memo[0] is not got.items:
                    # A new list: its view changed since the last write's.
                    memo = self._xattr_memo = (got.items, xattr_value(got.items))
                self.inputs_by_path[ev.path] = (ev.hash, memo[1])
            else:  # a long list: built from the outputs table when asked
                self.inputs_by_path.pop(ev.path, None)
        elif ev.op == "rename":
            old = ev.detail["from"]
            no_live = self._no_live
            if ev.path not in no_live:
                con.execute("UPDATE outputs SET gone=1 WHERE path=? AND gone=0", (ev.path,))
            if old in no_live:
                self._no_live_add(ev.path)  # nothing moves onto it
            else:
                con.execute("UPDATE outputs SET path=? WHERE path=? AND gone=0", (ev.path, old))
                no_live.discard(ev.path)  # the rows of ``old``, if any
                self._no_live_add(old)
            hit = self.inputs_by_path.pop(old, None)
            if hit is not None:
                self.inputs_by_path[ev.path] = hit
            else:
                self.inputs_by_path.pop(ev.path, None)
        elif ev.op == "unlink":
            if ev.path not in self._no_live:
                con.execute("UPDATE outputs SET gone=1 WHERE path=? AND gone=0", (ev.path,))
                self._no_live_add(ev.path)
            self.inputs_by_path.pop(ev.path, None)

    def _no_live_add(self, path: str) -> None:
        if len(self._no_live) >= MAX_NO_LIVE:
            self._no_live.clear()  # forgotten: queried again
        self._no_live.add(path)

    def _load_inputs(self) -> None:
        rows = self._db.execute(
            "SELECT seq, path, hash FROM outputs WHERE gone=0 AND superseded=0 "
            "ORDER BY seq DESC LIMIT ?",
            (self.inputs_by_path.cap,),
        ).fetchall()
        lists = stored_inputs(self._db, [r[0] for r in rows])
        for seq, path, hash_ in reversed(rows):
            self.inputs_by_path[path] = (hash_, xattr_value(lists.get(seq, [])))

    def retain(self) -> int:
        """Delete the oldest events beyond ``max_events``; the number deleted."""
        con = self._db
        with con:
            (count,) = con.execute("SELECT count(*) FROM events").fetchone()
            extra = count - self.max_events
            if extra <= 0:
                return 0
            con.execute(
                "DELETE FROM events WHERE seq IN (SELECT seq FROM events ORDER BY seq LIMIT ?)",
                (extra,),
            )
            # The channels of jobs none of whose events are left.
            con.execute("DELETE FROM links WHERE job NOT IN (SELECT job FROM events)")
            (outs,) = con.execute("SELECT count(*) FROM outputs").fetchone()
            if outs > MAX_OUTPUTS:
                self._drop_outputs(con, outs - MAX_OUTPUTS)
        return extra

    def _drop_outputs(self, con: sqlite3.Connection, n: int) -> None:
        """Delete the ``n`` oldest output rows; a row kept that rests on one
        of them (its view's change against it, or what it carries on from
        it) gets what it took from it stored in itself first."""
        row = con.execute("SELECT seq FROM outputs ORDER BY seq LIMIT 1 OFFSET ?", (n - 1,))
        (cut,) = row.fetchone()
        resting = con.execute(
            "SELECT seq, base, carry, inputs FROM outputs WHERE seq>? AND "
            "((base>0 AND base<=?) OR (carry>0 AND carry<=?))",
            (cut, cut, cut),
        ).fetchall()
        views = {s for s, b, _c, _i in resting if 0 < b <= cut}
        carries = {s for s, _b, c, _i in resting if 0 < c <= cut}
        got = read_rows(con, set(), views_of=views, carried_of=carries)
        for seq, base, carry, text in resting:
            data = json.loads(text)
            if seq in views:
                kept = {k: v for k, v in data.items() if k in ("own", "c")}
                kept["g"] = sorted(got.views[seq].values(), key=lambda i: i.get("o") or [0, 0])
                data, base = kept, 0
            if seq in carries:
                data["c"] = got.carried[seq]
                carry = 0
            con.execute(
                "UPDATE outputs SET inputs=?, base=?, carry=? WHERE seq=?",
                (json.dumps(data, ensure_ascii=False, separators=(",", ":")), base, carry, seq),
            )
        con.execute("DELETE FROM outputs WHERE seq<=?", (cut,))
        for acc in self._jobs.values():
            acc.forget_before(cut)


class _Follow:
    """Looks again at the jobs of processes that feed a pipe, 1, 2, 4 ... 64
    ms after their first open, while they run: a pipeline's later
    stages are forked after its first, and a stage that opens no file of
    the mount (the ``grep`` in ``cat a | grep x | sort > out``) is seen only
    so.  Its own thread and process cache: the loop never waits for it."""

    DELAYS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064)
    MAX_PENDING = 256  # followed at once (more: not followed)

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.procs = ProcCache(tuple(journal.procs.callers.items()), journal.procs.proc_root)
        self.pending: list[tuple[float, int, Caller]] = []  # (when, step, caller)
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.stopping = False
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="swfs-links", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        if self.thread is not None:
            self.thread.join(5)
            self.thread = None

    def add(self, caller: Caller) -> None:
        if self.thread is None:
            return
        with self.lock:
            if len(self.pending) < self.MAX_PENDING:
                self.pending.append((time.monotonic() + self.DELAYS[0], 0, caller))
        self.wake.set()

    def _run(self) -> None:
        while not self.stopping:
            with self.lock:
                due = min((w for w, _s, _c in self.pending), default=None)
            now = time.monotonic()
            if due is None:
                # Nothing to follow: asleep until ``add`` or ``stop`` (a
                # timed wait woke the thread, and took the interpreter from
                # the loop, every second for nothing).
                self.wake.wait()
                self.wake.clear()
                continue
            if due > now:
                self.wake.wait(due - now)
                self.wake.clear()
                continue
            with self.lock:
                ready = [x for x in self.pending if x[0] <= now]
                self.pending = [x for x in self.pending if x[0] > now]
            for _w, step, caller in ready:
                try:
                    self.journal._record_links(caller, self.procs)
                except Exception:
                    log.exception("access journal: reading a job's channels failed")
                    continue
                p = caller.proc
                now_p = read_stat(p.pid, self.procs.proc_root)
                alive = now_p is not None and now_p.start == p.start
                if alive and step + 1 < len(self.DELAYS):
                    with self.lock:
                        self.pending.append(
                            (time.monotonic() + self.DELAYS[step + 1], step + 1, caller)
                        )


class RecentInputs(OrderedDict[str, tuple[str | None, str]]):
    """A mapping that keeps only its ``cap`` most recently set keys, and no
    more than ``max_chars`` characters of values in all (a value longer
    than that is not kept); safe to use from the journal's thread and the
    loop at once."""

    def __init__(self, cap: int, max_chars: int | None = None) -> None:
        super().__init__()
        self.cap = cap
        self.max_chars = max_chars
        self.chars = 0  # of the values held
        self._lock = threading.Lock()

    def __setitem__(self, key: str, value: tuple[str | None, str]) -> None:
        with self._lock:
            old = super().pop(key, None)
            if old is not None:
                self.chars -= len(old[1])
            if self.max_chars is not None and len(value[1]) > self.max_chars:
                return  # asked for again, it is read back from the outputs table
            super().__setitem__(key, value)
            self.chars += len(value[1])
            while len(self) > self.cap or (
                self.max_chars is not None and self.chars > self.max_chars
            ):
                self.chars -= len(self.popitem(last=False)[1][1])

    def pop(self, key: str, default: Any = None) -> Any:
        with self._lock:
            out = super().pop(key, default)
            if out is not default and out is not None:
                self.chars -= len(out[1])
            return out


class NoJournal:
    """``--no-journal``: the same calls, recording nothing."""

    enabled = False
    seq = 0  # nothing recorded
    inputs_by_path: dict[str, tuple[str | None, str]] = {}

    def __init__(self, why: str = "off (swfs mount --no-journal)") -> None:
        self.why = why

    def health(self) -> dict[str, Any]:
        return {"state": "off", "reason": self.why}

    def acknowledge(self) -> None:
        pass

    def on_open(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_read(self, fh: int, off: int, n: int, data: bytes | None = None) -> None:
        pass

    def on_wrote(self, fh: int, path: str | None, recorded: RecordedHash | None = None) -> None:
        pass

    def on_close(self, fh: int) -> None:
        pass

    def on_list(self, pid: int, path: str, names: list[str]) -> None:
        pass

    def on_opendir(self, fh: int, pid: int, path: str) -> None:
        pass

    def on_listed(self, fh: int, names: list[str]) -> None:
        pass

    def on_rename(self, pid: int, old: str, new: str) -> None:
        pass

    def on_unlink(self, pid: int, path: str) -> None:
        pass

    def inputs_xattr(self, path: str, current: str | None) -> str | None:
        return None

    def may_see(self, uid: int) -> bool:
        return uid in (0, os.getuid())

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def _detail_json(detail: dict[str, Any]) -> str:
    """An event's detail as JSON text SQLite can hold: names that are not
    UTF-8 (a listing's, a rename's) in their ``escaped`` form, as paths are
    stored; escaping the JSON text whole would break its string escapes."""
    if not detail:
        return "{}"  # a write's, an unlink's: no encoder for them
    text = json.dumps(detail, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(escaped_json(detail), ensure_ascii=False)
    return text


def xattr_value(inputs: list[dict[str, Any]]) -> str:
    """``user.sw.inputs`` of an input list: JSON of each item's path, hash
    and locators."""
    return json.dumps(
        [{"path": i["path"], "hash": i["hash"], "locators": i.get("locators", [])} for i in inputs],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def _count(ev: Event, off: int, data: bytes) -> None:
    """Bytes ``data`` read at ``off``, right after those read before, of a
    native file: count their newlines (a C scan of bytes already in memory,
    where ``text_lines`` would open and read the file again)."""
    if off < TEXT_PROBE and data.find(b"\0", 0, TEXT_PROBE - off) >= 0:
        ev.newlines = BINARY
    elif off + len(data) > TEXT_LINES_LIMIT:
        ev.newlines = UNCOUNTED  # too big for line ranges: text_lines says so
    elif data:
        # Newlines of all bytes read so far, less the last byte's own.
        total = ev.newlines + ev.last_nl + data.count(b"\n")
        ev.last_nl = data[-1] == 0x0A
        ev.newlines = total - ev.last_nl


def _counted_lines(path: Path, ev: Event, ranges: list[list[int]]) -> list[int] | None:
    """What ``text_lines(path, ranges)`` says, from the newlines counted while
    the file was read (one ``lstat``) where they tell it, else from the file."""
    if ev.newlines == BINARY:  # a NUL in the first bytes: no text, whatever was read
        return None
    if ev.newlines == UNCOUNTED or len(ranges) != 1 or ranges[0][0] != 0:
        return text_lines(path, ranges)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    # text_lines' own refusals: not a regular file (a link is not followed), too big
    if not stat.S_ISREG(st.st_mode) or st.st_size > TEXT_LINES_LIMIT:
        return None
    end = ranges[0][1]
    if end > st.st_size or end < min(TEXT_PROBE, st.st_size):
        return text_lines(path, ranges)  # shrunk since, or the probe not all read
    return [1, 1 + ev.newlines]


def text_lines(path: Path, ranges: list[list[int]]) -> list[int] | None:
    """[first, last] line (1-based) that byte ``ranges`` of a text file cover;
    None for a file that is not text (a NUL in its first 8 KiB) or unreadable.
    The file is read and counted a chunk at a time: memory stays small and
    the interpreter is never held for long (the daemon's loop shares it)."""
    if not ranges:
        return None
    try:
        # Never follow a link out of the tree, never wait on a FIFO.
        fd = open_to_read(path, os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > TEXT_LINES_LIMIT:
            return None
        if holds_binary(fd):
            return None
        start = min(s for s, _ in ranges)
        end = min(max(e for _, e in ranges), st.st_size)
        if start >= st.st_size:
            return None
        first = _newlines(fd, 0, start) + 1
        return [first, first + _newlines(fd, start, max(start, end - 1))]
    except OSError:
        return None
    finally:
        os.close(fd)


def _newlines(fd: int, start: int, end: int) -> int:
    """Newlines in bytes [start, end) of ``fd``."""
    n = 0
    while start < end:
        chunk = os.pread(fd, min(LINES_CHUNK, end - start), start)
        if not chunk:
            break
        n += chunk.count(b"\n")
        start += len(chunk)
    return n


# -- the reading side (swfs log, swfs lineage)


def request_flush(store_dir: Path, timeout: float = 10.0) -> bool:
    """Ask a running daemon's journal to store what it holds, and wait for it
    (True once it did; False if nothing answered within ``timeout``)."""
    req = Path(store_dir) / FLUSH_REQUEST
    try:
        req.touch()
    except OSError:
        return False
    deadline = time.monotonic() + timeout
    while req.exists():
        if time.monotonic() > deadline:
            req.unlink(missing_ok=True)
            return False
        time.sleep(0.05)
    return True


def open_readonly(store_dir: Path) -> sqlite3.Connection:
    return _connect(Path(store_dir) / DB_NAME, readonly=True)


def iter_events(
    con: sqlite3.Connection,
    *,
    kind: str | None = None,
    since: float | None = None,
    until: float | None = None,
    after: int | None = None,
) -> Iterator[dict[str, Any]]:
    """The stored events in order, each with its process, as JSON-ready dicts
    (``since``/``until``: unix times, e.g. a tab's; ``after``: only events
    whose ``seq`` is greater)."""
    where: list[str] = []
    args: list[Any] = []
    if after is not None:
        where.append("e.seq > ?")
        args.append(after)
    if kind is not None:
        where.append("e.kind = ?")
        args.append(kind)
    if since is not None:
        where.append("e.t >= ?")
        args.append(since)
    if until is not None:
        where.append("e.t < ?")
        args.append(until)
    sql = (
        "SELECT e.seq, e.t, e.kind, e.op, e.path, e.source, e.hash, e.locator, e.detail, "
        "p.pid, p.name, p.cmdline, p.chain, e.job, p.uid FROM events e "
        "LEFT JOIN procs p ON p.key = e.proc"
    )
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY e.seq"
    # A process makes thousands of events (a grep -r): its part is decoded
    # once, and the events share it (read it, do not change it).
    procs: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in con.execute(sql, args):
        seq, t, kind_, op, path, source, hash_, locator, detail, pid, name, cmd, chain, job, uid = (
            row
        )
        out: dict[str, Any] = {"seq": seq, "t": t, "kind": kind_, "op": op, "path": path}
        if source and source != path:
            out["source"] = source
        if hash_:
            out["hash"] = hash_
        if locator:
            out["locator"] = locator
        if detail and detail != "{}":
            try:
                out.update(json.loads(detail))
            except ValueError:  # one damaged row (an older journal's) hides nothing else
                out["detail_error"] = "unreadable detail"
        key = (pid, name, cmd, chain, job, uid)
        proc = procs.get(key)
        if proc is None:
            if len(procs) >= 4096:
                procs.clear()
            proc = procs[key] = {
                "pid": pid,
                "name": name,
                "cmdline": json.loads(cmd or "[]"),
                "parents": [{"pid": a, "name": n} for a, n in json.loads(chain or "[]")[1:]],
                "job": job,
                "uid": uid,
            }
        out["process"] = proc
        yield out


def hash_lookup(engine: Any) -> Callable[[str], str | None]:
    """The hash the engine recorded for a file, in one store lookup (a
    ``file_state`` also counts versions and asks for freshness)."""
    store = getattr(engine, "store", None)
    fast = getattr(store, "get_file_hash", None)
    if fast is not None:
        return fast
    get_file = getattr(store, "get_file", None)
    if get_file is not None:

        def recorded(rel: str) -> str | None:
            rec = get_file(rel)
            return None if rec is None else str(rec.hash)

        return recorded
    return lambda rel: getattr(engine.file_state(RelPath(rel)), "hash", None)


def open_journal(
    store_dir: Path,
    *,
    enabled: bool,
    file_hash: Callable[[str], str | None],
    src: Path | None = None,
    locate: Callable[[str], str] | None = None,
    callers: tuple[tuple[int, int], ...] = (),
    records: QueuedRecords | None = None,
) -> Journal | NoJournal:
    """The mount's journal, started; ``NoJournal`` when recording is off or
    the journal cannot be opened (said in the log: the mount still serves)."""
    if not enabled:
        return NoJournal()
    try:
        j = Journal(
            store_dir,
            file_hash=file_hash,
            src=src,
            locate=locate,
            callers=callers,
            records=records,
        )
    except (OSError, sqlite3.Error) as exc:
        log.error("%s: access journal off: %s", Path(store_dir) / DB_NAME, exc)
        return NoJournal(f"off: it could not be opened: {exc}")
    j.start()
    return j
