"""Ranked full-text search over every parsed unit: the index and the query.

The index is derived from the store's parse cache alone (it can be deleted
at any time and is rebuilt): the text in tantivy (``STORE/search.tantivy/``,
BM25, English stemming; see ``swfs.find.textindex``), the rest in SQLite
(``STORE/search.sqlite``, WAL):

``contents``  one row per indexed parse, ``key`` = ``hash|parser key``.
``units``     one row per unit of a content: name, locator, text bytes; its
              id (never reused) is the tantivy document's ``unit``.
``vecs``      unit id -> embedding (float32 bytes), only with an embedding model.
``files``     path -> the content it shows now (its view's hash and parser):
              ``raw`` the path's exact bytes (the key), ``rel`` the path as
              text (``swfs.store.sqlitetext``: a name that is not UTF-8 as the
              backslash escapes of its bytes, for ``path:`` filters).
``meta``      ``schema``, ``model`` (the embedding model's fingerprint).

A content is indexed once per (content hash, parser key), like a parse: a
rename or a copy only adds a ``files`` row; a re-parse points the path at the
new content, and a content no path shows any more is deleted.  The indexer
runs in its own thread (never on the trio loop; LMDB is only read), fed by
the engine's change events; queries run in any thread.

Why tantivy: on the benchmark workspace (tens of thousands of units, query
words each in half the units) a warm two-word top-20 query is two orders of
magnitude faster in tantivy, which skips blocks that cannot reach the top
(block-max WAND), than in a bare SQLite FTS5 table, which scores every
match; building takes about as long in both, and tantivy's index is the
smaller (docs/performance.md).

Every connection is a ``PathSafeConnection`` (any path, any unit name is
storable), and a hit names a path that is not UTF-8 in its escaped form
(``caf\\xe9.txt``), as the journal and the tab do.

A hit is shown only to a caller who may read its source file and pass
through every directory above it (root included), by the mode bits the
workspace has now; a query says nothing about the others, not even how many
there are.  Nor do its scores: BM25 weighs a word by how many units hold
it, so statistics over the whole index would let a caller test a guess
about a file they cannot read, one word at a time (the same word in their
own file scoring 1.694 with a private file holding it and 1.74 without).
Root and the store's owner (who may read the store, and with it every
unit's text) are ranked by tantivy over the whole index.  Anyone else is
ranked over the units they may read (``_Scope``): the number of units,
their average length and each word's document frequency are counted among
those alone, every matching unit of theirs is scored here (BM25, k1 1.2,
b 0.75, lengths in bytes of text), and snippets weigh words by the same
frequencies.  That costs a look at every path's mode (kept for a caller's
next queries for ``SCOPE_KEPT`` seconds) and a score for every unit of
theirs that matches a word, its term frequencies read from the postings
(``docs/trees.md``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from swfs.api import Access, Freshness, RelPath
from swfs.find.query import (  # the query language, light for the CLI
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Caller,
    Query,
    QueryError,
    parse_query,
    syntax_help,
)
from swfs.find.textindex import DIR_NAME as TEXT_DIR
from swfs.find.textindex import TextIndex
from swfs.store.sqlitetext import PathSafeConnection, escaped, in_list, path_key, path_of

if TYPE_CHECKING:
    from swfs.find.embed import EmbedModel
    from swfs.store.records import Store

log = logging.getLogger(__name__)


class Indexed(Protocol):
    """What the search index reads of a workspace (``swfs.workspace.Workspace``)."""

    @property
    def store(self) -> Store: ...
    @property
    def store_dir(self) -> Path: ...
    def parse_units(self, h: str, parser: str) -> list[tuple[str, str, str]] | None: ...
    def settled(self, rel: RelPath) -> bool: ...


DB_NAME = "search.sqlite"
SCHEMA = 4  # 3: files keyed by the exact bytes of the path; 4: tantivy's unit a fast field
SNIPPET_TOKENS = 14
BATCH = 256  # paths per transaction of a full reconcile (its progress is shown by them)
PASS = 2048  # most paths per transaction (one tantivy commit) of a catch-up
# Changes come in bursts (a git checkout replaces thousands of files, a
# create every few milliseconds): the indexer waits for a pause of QUIET
# seconds in them, or MAX_DELAY seconds after the first, before it catches
# up, so that a burst costs a few commits, not one per moment of it.  A
# query while the index lags asks for a pass at once (``SearchIndex._hurry``)
# and waits for it, QUERY_WAIT seconds at most; still behind then, it says so.
QUIET = 0.3
MAX_DELAY = 3.0
QUERY_WAIT = 2.0
RRF_K = 60  # reciprocal rank fusion constant (hybrid ranking)
CANDIDATES = 200  # per ranking, before fusion
MIN_SIMILARITY = 0.3  # cosine below which a unit is no vector candidate
K1, B = 1.2, 0.75  # BM25's constants, tantivy's
SCOPE_KEPT = 2.0  # seconds a caller's readable units answer their next queries
SCOPES_KEPT = 64  # callers whose scopes are kept
SNIPPET_CHARS = 160

# -- who asks


def _allows(acc: Access, caller: Caller, bit: int) -> bool:
    """``bit``: 0o4 read, 0o1 search (pass through), as the owner/group/other
    class the kernel would pick for the caller."""
    if caller.uid == acc.uid:
        return bool(acc.mode & (bit << 6))
    if acc.gid in caller.gids:
        return bool(acc.mode & (bit << 3))
    return bool(acc.mode & bit)


class AccessCheck:
    """``may_read(rel)`` for one caller, with the directories' answers kept
    for the length of one query."""

    def __init__(self, access: Callable[[RelPath], Access | None], caller: Caller) -> None:
        self._access, self.caller = access, caller
        self._dirs: dict[str, bool] = {}

    def _dir_ok(self, rel: str) -> bool:
        ok = self._dirs.get(rel)
        if ok is None:
            acc = self._access(RelPath(rel))
            ok = acc is not None and _allows(acc, self.caller, 0o1)
            if ok and rel:
                ok = self._dir_ok(rel.rpartition("/")[0])
            self._dirs[rel] = ok
        return ok

    def may_read(self, rel: str) -> bool:
        if self.caller.root:
            return True
        acc = self._access(RelPath(rel))
        if acc is None or not _allows(acc, self.caller, 0o4):
            return False
        return self._dir_ok(rel.rpartition("/")[0])


# -- results


@dataclass(frozen=True)
class Hit:
    rel: str  # the workspace path (not UTF-8: with os.fsdecode's surrogates)
    unit: str
    locator: str  # shown: the path ``escaped``
    score: float
    freshness: Freshness
    snippet: str

    @property
    def path(self) -> str:
        """Where the unit is in the mount, relative to its root (a name
        that is not UTF-8 ``escaped``)."""
        return f".parsed/{escaped(self.rel)}/{self.unit}"

    def line(self) -> str:
        return f"{self.path}\t{self.score:.4g}\t{self.freshness}\t{self.snippet}"

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "source": escaped(self.rel),
            "unit": self.unit,
            "locator": self.locator,
            "score": float(f"{self.score:.6g}"),
            "freshness": str(self.freshness),
            "snippet": self.snippet,
        }


@dataclass(frozen=True)
class SearchResult:
    query: str
    hits: tuple[Hit, ...] = ()
    error: str | None = None  # the query could not be run: why
    mode: str = "bm25"  # or "hybrid" with an embedding model
    behind: bool = False  # the index was still catching up with the parses
    # The index cannot answer (it failed and is being rebuilt): why.  Never
    # answered as "no hits".
    unavailable: str | None = None

    def render(self) -> bytes:
        """What a file under .search/ holds."""
        if self.unavailable is not None:
            return (
                f"# swfs search {json.dumps(self.query)}: the index is unavailable: "
                f"{self.unavailable}\n"
            ).encode("utf-8", "surrogateescape")
        if self.error is not None:
            return syntax_help(self.error).encode("utf-8", "surrogateescape")
        note = " (the index is still catching up with new parses)" if self.behind else ""
        if not self.hits:
            head = f"# swfs search {json.dumps(self.query)}: no hits{note}\n"
            return head.encode("utf-8", "surrogateescape")
        hits = f"{len(self.hits)} hit" + ("" if len(self.hits) == 1 else "s")
        head = (
            f"# swfs search {json.dumps(self.query)}: {hits}, best first, "
            f"{self.mode}{note}; path, score, freshness, snippet (tab-separated)\n"
        )
        body = "".join(h.line() + "\n" for h in self.hits)
        return (head + body).encode("utf-8", "surrogateescape")

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "mode": self.mode,
            "error": self.error,
            "behind": self.behind,
            "unavailable": self.unavailable,
            "hits": [h.as_json() for h in self.hits],
        }


def _flatten(snippet: str) -> str:
    return " ".join(snippet.split())


# -- the index

_CREATE = """
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT);
CREATE TABLE IF NOT EXISTS contents(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS units(
    id INTEGER PRIMARY KEY AUTOINCREMENT, content INTEGER NOT NULL, name TEXT NOT NULL,
    locator TEXT NOT NULL, size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS units_content ON units(content);
CREATE TABLE IF NOT EXISTS files(
    raw BLOB PRIMARY KEY, rel TEXT NOT NULL, content INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS files_content ON files(content);
CREATE TABLE IF NOT EXISTS vecs(unit INTEGER PRIMARY KEY, v BLOB NOT NULL);
"""
_DROP = """
DROP TABLE IF EXISTS fts; DROP TABLE IF EXISTS vecs; DROP TABLE IF EXISTS files;
DROP TABLE IF EXISTS units; DROP TABLE IF EXISTS contents; DROP TABLE IF EXISTS meta;
"""


def _private(path: Path) -> None:
    """Create the index closed to others, whatever the umask (a command's
    own may be 022): it holds the text of every file.  SQLite gives its WAL and
    shared-memory files the database file's mode.

    An existing index is never opened here, only changed by path: closing
    any descriptor of the file drops every POSIX lock this process holds on
    it, SQLite's included, and a connection elsewhere (a CLI command) that
    then finds no other user at its close removes the WAL and shared-memory
    files under this process's connections ("disk I/O error" ever after)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        with contextlib.suppress(OSError):  # a reader that does not own it
            if os.stat(path).st_mode & 0o077:
                os.chmod(path, 0o600)
        return
    except OSError:
        return  # a reader without write access: sqlite says why
    os.close(fd)  # new: no connection of this process has it open yet


def _key(h: str, parser: str) -> str:
    return f"{h}|{parser}"


@dataclass
class IndexStats:
    contents: int = 0  # parses newly indexed
    units: int = 0
    text_bytes: int = 0
    secs: float = 0.0
    paths: int = 0  # paths whose entry changed


@dataclass(frozen=True)
class _Scope:
    """The units one caller may read, and the statistics of those alone."""

    sizes: dict[int, int]  # unit id -> its text's length in bytes
    shown: dict[int, tuple[str, ...]]  # unit id -> the paths they may read it by
    made: float  # time.monotonic() when it was made
    generation: int  # of the index then

    @property
    def count(self) -> int:
        return len(self.sizes)

    @property
    def average(self) -> float:
        return sum(self.sizes.values()) / len(self.sizes) if self.sizes else 0.0


class SearchIndex:
    """The index of one workspace; the engine owns one.

    Its store can fail at run time (its files removed or overwritten under
    the daemon, a disk error): the indexer thread then logs it, says so in
    ``health()`` (``swfs status``, ``swfs check``), answers every search as
    unavailable (never as "no hits") and rebuilds the index from the parse
    cache, without a remount.  A reader (``as_reader``: a command beside a
    daemon) opens the index read-only and never changes its files."""

    # Set by the indexer thread, read by any: why the index cannot answer
    # (None: it can).  Connections made before a rebuild are not used after.
    _trouble: str | None = None
    _epoch = 0
    _readonly = False
    _files: tuple[int, ...] | None = None  # inodes of the database, its WAL and shm
    # The database, open for as long as its connections (closing a descriptor
    # of it would drop their locks: ``_private``): its header is read by it.
    _fd: int | None = None

    def __init__(
        self,
        ws: Indexed,
        access: Callable[[RelPath], Access | None],
        *,
        model: EmbedModel | None = None,
    ) -> None:
        self.ws = ws
        self._access = access  # who may read a path (the engine's evidence part)
        self.path = Path(ws.store_dir) / DB_NAME
        self.model = model
        self._local = threading.local()
        self._lock = threading.Lock()  # one writer at a time (indexer thread or catch_up)
        self._pending: set[str] = set()
        self._everything = True  # reconcile every path on the next pass
        self._wake = threading.Event()
        self._hurry = threading.Event()  # a query waits: no quiet period
        self._last = 0.0  # time.monotonic() of the last change notified
        self._passes = threading.Condition()
        self._begun = 0  # catch-up passes begun (under ``_passes``)
        self._done = 0  # the last of them ended
        self._syncing = 0  # passes between taking paths and committing them
        self._idle = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._generation = 0  # bumped after every indexer commit
        self._vec_cache: tuple[int, Any, Any] | None = None
        self._conns: list[sqlite3.Connection] = []
        self._scopes: dict[Caller, _Scope] = {}  # oldest first
        self._scopes_lock = threading.Lock()  # not the writers' lock: queries never wait on it
        self.text = TextIndex(self.path.with_name(TEXT_DIR))

    # -- connections

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "epoch", 0) != self._epoch:
            conn = None  # made before a rebuild (closed by it)
        if conn is None and self._readonly:
            conn = self._connect_readonly()
        if conn is None:
            _private(self.path)
            conn = sqlite3.connect(
                self.path, timeout=30, check_same_thread=False, factory=PathSafeConnection
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_CREATE)
            row = conn.execute("SELECT v FROM meta WHERE k='schema'").fetchone()
            if row is not None and str(row[0]) != str(SCHEMA):
                # An index of another layout: rebuilt from the parse cache.
                conn.executescript(_DROP + _CREATE)
                self.text.close()
                shutil.rmtree(self.text.directory, ignore_errors=True)
                row = None
            if row is None:
                with conn:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES('schema', ?)", (SCHEMA,))
            self._local.conn = conn
            self._local.epoch = self._epoch
            with self._lock:
                self._conns.append(conn)
        return conn

    def _connect_readonly(self) -> sqlite3.Connection:
        """A connection that only reads: it neither creates, checkpoints nor
        removes anything, so a daemon's index is safe from it."""
        uri = f"{self.path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(
            uri, uri=True, timeout=30, check_same_thread=False, factory=PathSafeConnection
        )
        self._local.conn, self._local.epoch = conn, self._epoch
        with self._lock:
            self._conns.append(conn)
        return conn

    # -- the store's health (swfs status, swfs check)

    def health(self) -> dict[str, Any]:
        """``{"state": "ok"}``, or ``{"state": "rebuilding", "reason": ...}``
        while the index is unavailable."""
        trouble = self._trouble
        return {"state": "ok"} if trouble is None else {"state": "rebuilding", "reason": trouble}

    def _stat_files(self) -> tuple[int, ...] | None:
        """The inodes of the database, its WAL and shared memory (by path:
        nothing is opened), or None when one is missing."""
        try:
            return tuple(os.stat(str(self.path) + suffix).st_ino for suffix in ("", "-wal", "-shm"))
        except OSError:
            return None

    def _check_files(self) -> str | None:
        """Why the index's files are not those the connections opened, or None."""
        if self._files is None:
            self._files = self._stat_files()  # after the first pass: every file exists
            if self._files is not None and self._fd is None:
                with contextlib.suppress(OSError):
                    self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            return None
        now = self._stat_files()
        if now is None:
            return "its files were removed under the daemon"
        if now != self._files:
            return "its files were replaced under the daemon"
        if self._fd is not None and os.pread(self._fd, 16, 0) != b"SQLite format 3\x00":
            return "its database file was overwritten under the daemon"
        return None

    def _failed(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the store failing (not a busy moment)."""
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc)
            return "locked" not in text and "busy" not in text
        # (ProgrammingError: a connection a rebuild closed under a late query)
        return isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.ProgrammingError
        )

    def _rebuild(self, reason: str) -> None:
        """*slow*, the indexer thread: drop every connection and file of the
        index and index every parse again (the search answers unavailable
        meanwhile)."""
        self._trouble = reason
        log.error("%s: search index unavailable (%s): rebuilding it", self.path, reason)
        with self._lock:
            self._epoch += 1
            for conn in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
            if self._fd is not None:  # after the connections: no lock of theirs is left
                os.close(self._fd)
                self._fd = None
            self.text.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(str(self.path) + suffix)
            shutil.rmtree(self.text.directory, ignore_errors=True)
            # A new object: a query that began before the rebuild may still
            # reopen the old one's index; this one starts empty.
            self.text = TextIndex(self.text.directory)
        self._files = None
        self._everything = True
        stats = self.catch_up()
        self._files = None  # taken again (and the database opened) by the next pass
        self._trouble = None
        log.warning(
            "%s: search index rebuilt (%d parses, %d units)", self.path, stats.contents, stats.units
        )

    def close(self) -> None:
        self.stop()
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            self._conns.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        self._local = threading.local()
        self.text.close()

    # -- change events (any thread)

    def notify(self, rel: RelPath) -> None:
        # Called on the request loop, several times a changed file: the
        # events are only touched when they change (their locks cost 15
        # times the rest).  The path is added first: a pass that clears
        # the wake-up after this looks takes it.
        self._pending.add(str(rel))
        self._last = time.monotonic()
        if self._idle.is_set():
            self._idle.clear()
        if not self._wake.is_set():
            self._wake.set()

    def notify_all(self) -> None:
        self._everything = True
        self._last = time.monotonic()
        self._idle.clear()
        self._wake.set()

    # -- the background indexer

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the index up to date in a thread until cancelled."""
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="swfs-search-index", daemon=True)
        self._thread.start()
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self._stop = True
            self._wake.set()
            self._hurry.set()
            thread = self._thread
            if thread is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(thread.join, 30)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        self._hurry.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(30)

    def _loop(self) -> None:
        failures = 0  # passes in a row that failed
        while not self._stop:
            self._wake.wait(1.0)
            if self._stop:
                break
            if self._wake.is_set():
                self._settle()
            self._wake.clear()
            try:
                trouble = self._trouble or self._check_files()
                if trouble is not None:
                    self._rebuild(trouble)
                self.catch_up()
                self.text.close_new_files()  # segments merged since the last commit
                failures = 0
            except Exception as exc:
                # A broken index must not take the daemon down; searching says so.
                log.exception("%s: indexing failed", self.path)
                if self._failed(exc):
                    self._trouble = f"{type(exc).__name__}: {exc}"
                    self._wake.set()  # rebuilt on the next pass
                # A store that keeps failing (a full disk) is tried again
                # less and less often: 1 s, 2 s, ... up to a minute.
                until = time.monotonic() + min(60.0, 2.0**failures)
                while not self._stop and time.monotonic() < until:
                    time.sleep(0.1)  # (a stop does not wait for the whole pause)
                failures += 1

    def _settle(self) -> None:
        """Wait for a pause in the changes: ``QUIET`` seconds without one,
        ``MAX_DELAY`` seconds at most, no longer once a query asks."""
        first = time.monotonic()
        while not self._stop and not self._hurry.is_set():
            left = min(self._last + QUIET, first + MAX_DELAY) - time.monotonic()
            if left <= 0:
                return
            self._hurry.wait(left)

    def _wait_for_pass(self, timeout: float) -> None:
        """Ask the indexer thread for a pass now and wait for it (a pass
        begun after this call indexes every change notified before it),
        ``timeout`` seconds at most."""
        thread = self._thread
        if self._readonly or thread is None or not thread.is_alive():
            return
        if thread is threading.current_thread():
            return  # (the indexer's own query would wait for itself)
        with self._passes:  # (a pass clears the hurry under it: none is lost)
            want = self._begun + 1
            self._hurry.set()
        self._wake.set()
        with self._passes:
            self._passes.wait_for(lambda: self._done >= want or self._stop, timeout)

    def wait_idle(self, timeout: float) -> bool:
        """True once every change notified so far is indexed."""
        return self._idle.wait(timeout)

    def as_reader(self) -> None:
        """Only query: another process (the daemon) keeps this index, and
        whether it is behind is not known here.  Its files are opened
        read-only: nothing here may disturb the daemon's connections."""
        self._everything = False
        self._pending.clear()
        self._readonly = True
        self.text.readonly = True

    @property
    def behind(self) -> bool:
        return bool(self._pending) or self._everything or self._syncing > 0

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> IndexStats:
        """Index what changed since the last pass (every path on the first)."""
        stats = IndexStats()
        t0 = time.perf_counter()
        with self._passes:
            self._begun += 1
            number = self._begun
            self._syncing += 1
            self._hurry.clear()  # this pass serves the queries that asked so far
        try:
            if self._everything:
                self._everything = False
                self._pending.clear()
                self._reconcile(stats, progress)
            # What is pending now: a change notified meanwhile (a burst goes
            # on) waits for the next pass, not a pass that never ends.
            left = len(self._pending)
            while left > 0 and self._pending:
                batch: list[str] = []
                while self._pending and len(batch) < min(left, PASS):
                    batch.append(self._pending.pop())
                left -= len(batch)
                self.sync_batch(batch, stats)
        finally:
            with self._passes:
                self._syncing -= 1
                self._done = max(self._done, number)
                self._passes.notify_all()
        stats.secs = time.perf_counter() - t0
        if not self._pending and not self._everything:
            self._idle.set()
        return stats

    def _view_key(self, rec: Any, txn: Any = None) -> str | None:
        """The parse a path's view shows now, or None (pending, failed,
        unsupported)."""
        if rec is None or not rec.parser:
            return None
        store = self.ws.store
        status = store.parse_status(rec.hash, rec.parser, txn)
        if status == "ok":
            return _key(rec.hash, rec.parser)
        if status is None and rec.view_hash and rec.view_parser:
            return _key(rec.view_hash, rec.view_parser)
        return None

    def _reconcile(self, stats: IndexStats, progress: Callable[[int, int], None] | None) -> None:
        conn = self._connect()
        with self.ws.store.read() as txn:
            wanted = {rel: self._view_key(rec, txn) for rel, rec in self.ws.store.iter_files(txn)}
        have = {
            path_of(raw): key
            for raw, key in conn.execute(
                "SELECT f.raw, c.key FROM files f JOIN contents c ON c.id = f.content"
            )
        }
        todo = [r for r in set(wanted) | set(have) if wanted.get(r) != have.get(r)]
        self._check_model(conn)
        for i in range(0, len(todo), BATCH):
            self.sync_batch(todo[i : i + BATCH], stats, wanted)
            if progress:
                progress(min(i + BATCH, len(todo)), len(todo))

    def _check_model(self, conn: sqlite3.Connection) -> None:
        """Vectors are kept for one model: another one (or none) drops them."""
        fp = self.model.fingerprint if self.model is not None else ""
        row = conn.execute("SELECT v FROM meta WHERE k='model'").fetchone()
        if row is not None and row[0] == fp:
            return
        with self._lock, conn:
            conn.execute("DELETE FROM vecs")
            conn.execute("INSERT OR REPLACE INTO meta VALUES('model', ?)", (fp,))
            if self.model is not None:
                contents = conn.execute("SELECT id, key FROM contents").fetchall()
                for cid, key in contents:
                    h, _, parser = key.partition("|")
                    units = self.ws.parse_units(h, parser) or []
                    ids = conn.execute(
                        "SELECT id FROM units WHERE content = ? ORDER BY id", (cid,)
                    ).fetchall()
                    for (uid,), (_name, _loc, text) in zip(ids, units, strict=False):
                        vec = self.model.embed(text).tobytes()
                        conn.execute("INSERT INTO vecs VALUES(?, ?)", (uid, vec))
        self._generation += 1

    def sync_batch(
        self, rels: Iterable[str], stats: IndexStats, wanted: dict[str, str | None] | None = None
    ) -> None:
        """*slow*, on the indexer's thread: one transaction (one tantivy
        commit) bringing ``rels`` up to date with their views."""
        conn = self._connect()
        keys: dict[str, str | None] = {}
        if wanted is not None:
            keys = {rel: wanted.get(rel) for rel in rels}
        else:
            store = self.ws.store
            with store.read() as txn:  # one read transaction for the batch
                keys = {rel: self._view_key(store.get_file(rel, txn), txn) for rel in rels}
        with self._lock, conn:
            orphans: set[int] = set()
            for rel, key in keys.items():
                raw = path_key(rel)
                row = conn.execute("SELECT content FROM files WHERE raw = ?", (raw,)).fetchone()
                old = row[0] if row else None
                new = None if key is None else self._content_id(conn, key, stats)
                if old == new:
                    continue
                stats.paths += 1
                if new is None:
                    conn.execute("DELETE FROM files WHERE raw = ?", (raw,))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO files(raw, rel, content) VALUES(?, ?, ?)",
                        (raw, rel, new),
                    )
                if old is not None:
                    orphans.add(old)
            for cid in orphans:
                if conn.execute("SELECT 1 FROM files WHERE content = ? LIMIT 1", (cid,)).fetchone():
                    continue
                ids = [r[0] for r in conn.execute("SELECT id FROM units WHERE content = ?", (cid,))]
                for i in ids:
                    self.text.delete(i)
                conn.executemany("DELETE FROM vecs WHERE unit = ?", ((i,) for i in ids))
                conn.execute("DELETE FROM units WHERE content = ?", (cid,))
                conn.execute("DELETE FROM contents WHERE id = ?", (cid,))
            # The text first: a crash before the SQLite commit leaves text no
            # unit row names (ignored; ids are never reused), never a unit
            # without its text.
            self.text.commit()
        self._generation += 1

    def _content_id(self, conn: sqlite3.Connection, key: str, stats: IndexStats) -> int | None:
        row = conn.execute("SELECT id FROM contents WHERE key = ?", (key,)).fetchone()
        if row is not None:
            return int(row[0])
        h, _, parser = key.partition("|")
        units = self.ws.parse_units(h, parser)
        if units is None:
            return None
        cur = conn.execute("INSERT INTO contents(key) VALUES(?)", (key,))
        cid = int(cur.lastrowid or 0)
        for name, locator, text in units:
            size = len(text.encode("utf-8", "surrogateescape"))
            cur = conn.execute(
                "INSERT INTO units(content, name, locator, size) VALUES(?, ?, ?, ?)",
                (cid, name, locator, size),
            )
            uid = int(cur.lastrowid or 0)
            self.text.add(uid, escaped(text))
            if self.model is not None:
                conn.execute(
                    "INSERT INTO vecs VALUES(?, ?)", (uid, self.model.embed(text).tobytes())
                )
            stats.units += 1
            stats.text_bytes += size
        stats.contents += 1
        return cid

    # -- queries (any thread)

    @property
    def generation(self) -> int:
        """Bumped after every indexer commit."""
        return self._generation

    def search(self, text: str, caller: Caller, limit: int = DEFAULT_LIMIT) -> SearchResult:
        try:
            query = parse_query(text)
        except QueryError as exc:
            return SearchResult(text, error=str(exc))
        limit = max(1, min(limit, MAX_LIMIT))
        check = AccessCheck(self._access, caller)
        if self._trouble is not None:
            return SearchResult(text, unavailable=f"{self._trouble}; it is being rebuilt")
        if self.behind:
            self._wait_for_pass(QUERY_WAIT)  # not the rest of a quiet period
        try:
            self._connect()  # an index of another layout is dropped before tantivy opens it
            if self._readonly:
                self.text.index  # noqa: B018 (opened, never made, by a reader)
        except (sqlite3.Error, ValueError) as exc:
            return SearchResult(text, unavailable=str(exc))
        try:
            scope = None if self._sees_all(caller) else self._scope(check)
            want = limit if self.model is None else CANDIDATES
            if scope is None:
                bm25 = self._bm25(query, check, want)
            else:
                bm25 = self._bm25_within(query, check, want, scope)
            if self.model is None:
                hits = bm25
                mode = "bm25"
            else:
                vec = self._vector(query, check, CANDIDATES, scope)
                hits = _fuse(bm25, vec, limit)
                mode = "hybrid"
        except (sqlite3.Error, ValueError) as exc:
            if isinstance(exc, sqlite3.Error) and self._failed(exc):
                # The store failed, not the query: the indexer rebuilds it.
                if not self._readonly:
                    self._trouble = self._trouble or f"{type(exc).__name__}: {exc}"
                    self._wake.set()
                return SearchResult(text, unavailable=f"{exc}; it is being rebuilt")
            # A query the index refuses (the syntax check above should catch all).
            return SearchResult(text, error=f"the index refused the query: {exc}")
        return SearchResult(text, tuple(hits[:limit]), mode=mode, behind=self.behind)

    def _sees_all(self, caller: Caller) -> bool:
        """Root and the store's owner: ranked over the whole index."""
        if caller.root:
            return True
        try:
            return os.stat(self.ws.store_dir).st_uid == caller.uid
        except OSError:
            return False

    def _scope(self, check: AccessCheck) -> _Scope:
        """The units of the contents some path the caller may read shows.
        Kept for a caller's queries of the next ``SCOPE_KEPT`` seconds while
        the index does not change: a unit added since is in none (the
        caller's own new units count from the next), and one whose file
        was closed to them since is one they could read until then."""
        now = time.monotonic()
        with self._scopes_lock:
            kept = self._scopes.get(check.caller)
        if (
            kept is not None
            and kept.generation == self._generation
            and now - kept.made < SCOPE_KEPT
        ):
            return kept
        conn = self._connect()
        readable: dict[int, list[str]] = {}  # content id -> paths
        for raw, cid in conn.execute("SELECT raw, content FROM files"):
            rel = path_of(raw)
            if check.may_read(rel):
                readable.setdefault(cid, []).append(rel)
        by_content = {cid: tuple(sorted(rels)) for cid, rels in readable.items()}
        sizes: dict[int, int] = {}
        shown: dict[int, tuple[str, ...]] = {}
        for uid, cid, size in conn.execute("SELECT id, content, size FROM units"):
            rels = by_content.get(cid)
            if rels is not None:
                sizes[uid], shown[uid] = size, rels
        scope = _Scope(sizes, shown, now, self._generation)
        with self._scopes_lock:
            self._scopes[check.caller] = scope
            while len(self._scopes) > SCOPES_KEPT:
                del self._scopes[next(iter(self._scopes))]
        return scope

    def _bm25_within(
        self, query: Query, check: AccessCheck, limit: int, scope: _Scope
    ) -> list[Hit]:
        """``_bm25`` for a caller who may read only ``scope``: the same tiers
        and score, every number counted among the scope's units alone (their
        number, average length, each term's document frequency), so that
        nothing shown depends on a unit the caller may not read."""
        if not scope.count:
            return []
        searcher = self.text.searcher()
        text = self.text
        terms = sorted({t for w in (*query.words, *query.phrases) for t in self._terms(w)})
        units = text.units(scope.sizes)
        n, avg = scope.count, scope.average
        term_queries = {t: text.term(t) for t in terms}
        holding = {  # term -> the scope's documents holding it
            t: {(a.segment_ord, a.doc) for a in text.matching(searcher, text.within(q, units), n)}
            for t, q in term_queries.items()
        }
        df = {t: len(holding[t]) for t in terms}
        idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
        # Every match in the scope is scored (the order tantivy finds them
        # in is by its own statistics); which of them are shown is decided
        # after, in the order of these scores.
        pool: list[tuple[int, float, str, int, Any]] = []
        done: set[int] = set()
        for k, expr in _tiers(query):
            addrs = text.matching(searcher, text.within(text.parse(expr), units), n)
            for uid, addr in zip(text.units_at(searcher, addrs), addrs, strict=True):
                if uid in done:
                    continue
                done.add(uid)
                rels = [r for r in scope.shown.get(uid, ()) if _under(r, query.paths)]
                if not rels:
                    continue
                norm = K1 * (1.0 - B + B * scope.sizes.get(uid, 0) / avg) if avg else K1
                score = 0.0
                at = (addr.segment_ord, addr.doc)
                for t in terms:
                    if at in holding[t]:
                        tf = text.frequency(searcher, t, term_queries[t], addr)
                        score += idf[t] * tf * (K1 + 1.0) / (tf + norm)
                pool.extend((k, score, rel, uid, addr) for rel in rels)
            if len(pool) >= limit:
                break
        pool.sort(key=lambda p: (-p[0], -p[1], p[2], p[3]))
        weights = {t: 1.0 / (1.0 + df[t]) for t in terms if df[t]}
        out: list[Hit] = []
        seen: set[tuple[str, int]] = set()
        for first in range(0, len(pool), limit):
            # Names, locators and parses for the best first: a batch at a time.
            batch = pool[first : first + limit]
            rows = {
                (uid, rel): (name, locator, key)
                for uid, found in self._units(query, [p[3] for p in batch]).items()
                for name, locator, key, rel in found
            }
            for k, bm25, rel, uid, addr in batch:
                row = rows.get((uid, rel))
                if row is None:
                    continue  # gone since the scope was made
                name, locator, key = row
                fresh = self._hit_of(check, rel, key, seen, uid)
                if fresh is None:
                    continue  # closed since the scope was made
                passage = text.highlight(text.text_at(searcher, addr), weights, SNIPPET_CHARS)
                out.append(
                    Hit(
                        rel,
                        name,
                        f"{escaped(rel)}#{locator}",
                        k + bm25 / (bm25 + 1.0),
                        fresh,
                        _flatten(passage),
                    )
                )
                if len(out) >= limit:
                    return out
        return out

    def _terms(self, tokens: Sequence[str]) -> list[str]:
        """The index's terms for one word or phrase of a query."""
        return self.text.analyze(" ".join(tokens))

    def _units(self, query: Query, ids: Sequence[int]) -> dict[int, list[tuple[Any, ...]]]:
        """unit id -> [(name, locator, content key, path), ...] within the
        query's folders (a content shown by several paths: one row each)."""
        if not ids:
            return {}
        marks, padded = in_list(ids)  # few statement shapes (swfs.sqlitetext)
        where, params = "", list[Any](padded)
        if query.paths:
            conds = []
            for p in query.paths:
                conds.append("(f.rel >= ? AND f.rel < ?)")
                params += [p + "/", p + "0"]  # '0' sorts right after '/'
            where = " AND (" + " OR ".join(conds) + ")"
        out: dict[int, list[tuple[Any, ...]]] = {}
        for uid, name, locator, key, raw in self._connect().execute(
            "SELECT u.id, u.name, u.locator, c.key, f.raw FROM units u "
            "JOIN contents c ON c.id = u.content JOIN files f ON f.content = u.content "
            f"WHERE u.id IN {marks}{where}",
            params,
        ):
            out.setdefault(uid, []).append((name, locator, key, path_of(raw)))
        return out

    def _hit_of(
        self, check: AccessCheck, rel: str, key: str, seen: set[tuple[str, int]], uid: int
    ) -> Freshness | None:
        """The hit's freshness if the caller may see it, else None."""
        if (rel, uid) in seen or not check.may_read(rel):
            return None
        rec = self.ws.store.get_file(rel)
        if rec is None:
            return None  # gone; the indexer will drop it
        seen.add((rel, uid))
        h, _, parser = key.partition("|")
        if h == rec.hash and parser == rec.parser and self.ws.settled(RelPath(rel)):
            return Freshness.CURRENT  # (not while the file holds unrecorded bytes)
        return Freshness.STALE

    def _bm25(self, query: Query, check: AccessCheck, limit: int) -> list[Hit]:
        """Units matching more of the words first (one search per tier: all
        words, then fewer), then by BM25; the score shown is the number of
        words matched plus BM25 scaled into [0, 1)."""
        searcher = self.text.searcher()
        pool: list[tuple[int, float, int, Any, str, str, str, Freshness]] = []
        seen: set[tuple[str, int]] = set()
        for k, expr in _tiers(query):
            parsed = self.text.parse(expr)
            want, done = max(limit, CANDIDATES), 0
            while len(pool) < limit:
                found = searcher.search(parsed, want, count=False).hits
                batch = found[done:]
                docs = [(score, addr, int(searcher.doc(addr)["unit"][0])) for score, addr in batch]
                rows = self._units(query, [uid for _, _, uid in docs])
                for score, addr, uid in docs:
                    for name, locator, key, rel in rows.get(uid, ()):
                        fresh = self._hit_of(check, rel, key, seen, uid)
                        if fresh is not None:
                            pool.append((k, float(score), uid, addr, rel, name, locator, fresh))
                if len(found) < want:
                    break
                done, want = len(found), want * 4
            if len(pool) >= limit:
                break
        pool.sort(key=lambda p: (-p[0], -p[1], p[4]))
        snippets = self.text.snippets(searcher, self.text.parse(query.match_expr()), SNIPPET_CHARS)
        out: list[Hit] = []
        for k, bm25, _uid, addr, rel, name, locator, fresh in pool[:limit]:
            score = k + bm25 / (bm25 + 1.0)
            snippet = _flatten(self.text.snippet(searcher, snippets, addr))
            out.append(Hit(rel, name, f"{escaped(rel)}#{locator}", score, fresh, snippet))
        return out

    def _vectors(self) -> tuple[Any, Any]:
        import numpy as np

        gen = self._generation
        cached = self._vec_cache
        if cached is not None and cached[0] == gen:
            return cached[1], cached[2]
        conn = self._connect()
        row = conn.execute("SELECT v FROM meta WHERE k='model'").fetchone()
        if self.model is None or row is None or row[0] != self.model.fingerprint:
            # Vectors of another model (a reader given a model the daemon
            # was not): words alone rank.
            rows = []
        else:
            rows = conn.execute("SELECT unit, v FROM vecs ORDER BY unit").fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        dim = self.model.dim if self.model is not None else 0
        mat = (
            np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), dim)
            if rows
            else np.zeros((0, dim), dtype=np.float32)
        )
        self._vec_cache = (gen, ids, mat)
        return ids, mat

    def _vector(
        self, query: Query, check: AccessCheck, limit: int, scope: _Scope | None = None
    ) -> list[Hit]:
        """Units by cosine similarity (each unit's own figure); with a
        ``scope``, among its units only, so that how many units of the
        caller's make the cut does not depend on the others."""
        import numpy as np

        assert self.model is not None
        qv = self.model.embed(" ".join(query.all_tokens()))
        if not np.any(qv):
            return []
        ids, mat = self._vectors()
        if scope is not None and len(ids):
            keep = np.isin(ids, np.fromiter(scope.sizes, dtype=np.int64, count=scope.count))
            ids, mat = ids[keep], mat[keep]
        if not len(ids):
            return []
        sims = mat @ qv
        order = np.argsort(-sims)
        searcher = self.text.searcher()
        out: list[Hit] = []
        seen: set[tuple[str, int]] = set()
        for i in order[: limit * 4]:
            if sims[i] < MIN_SIMILARITY:
                break
            uid = int(ids[i])
            for name, locator, key, rel in self._units(query, [uid]).get(uid, ()):
                fresh = self._hit_of(check, rel, key, seen, uid)
                if fresh is None:
                    continue
                words = _flatten(self.text.text_of(searcher, uid)[:400]).split(" ")
                snippet = " ".join(words[:SNIPPET_TOKENS]) + (" …" if len(words) > 14 else "")
                out.append(
                    Hit(rel, name, f"{escaped(rel)}#{locator}", float(sims[i]), fresh, snippet)
                )
            if len(out) >= limit:
                break
        return out

    # -- figures

    def sizes(self) -> dict[str, int]:
        """Bytes of the index (SQLite and tantivy) and of the text it holds."""
        conn = self._connect()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        total = sum(
            p.stat().st_size
            for p in (self.path, self.path.with_name(DB_NAME + "-wal"))
            if p.exists()
        )
        units, text = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM units").fetchone()
        files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
        return {
            "index_bytes": total + self.text.size(),
            "text_index_bytes": self.text.size(),
            "units": units,
            "text_bytes": text,
            "files": files,
        }


def _tiers(query: Query) -> list[tuple[int, str]]:
    """(words matched, tantivy query) from all the words down to one; a
    middle tier is left out where it would take too many combinations (its
    units then count as matching fewer words)."""

    def quote(tokens: Sequence[str]) -> str:
        return '"' + " ".join(tokens) + '"'

    must = [quote(p) for p in query.phrases]
    n = len(query.words)
    if n == 0:
        return [(0, " AND ".join(must))]
    out = []
    for k in range(n, 0, -1):
        if 1 < k < n and math.comb(n, k) > 20:
            continue
        groups = [
            "(" + " AND ".join(quote(w) for w in combo) + ")"
            for combo in itertools.combinations(query.words, k)
        ]
        out.append((k, " AND ".join([*must, "(" + " OR ".join(groups) + ")"])))
    return out


def _under(rel: str, folders: Sequence[str]) -> bool:
    """Whether ``rel`` is under one of ``folders`` (a query's ``path:``;
    none: anywhere), as ``SearchIndex._units`` filters."""
    return not folders or any(rel.startswith(f + "/") for f in folders)


def _fuse(bm25: list[Hit], vec: list[Hit], limit: int) -> list[Hit]:
    """Reciprocal rank fusion: a unit high in either ranking ranks high."""
    score: dict[tuple[str, str], float] = {}
    best: dict[tuple[str, str], Hit] = {}
    for ranking in (bm25, vec):
        for rank, h in enumerate(ranking):
            k = (h.rel, h.unit)
            score[k] = score.get(k, 0.0) + 1.0 / (RRF_K + rank + 1)
            best.setdefault(k, h)  # BM25's snippet shows the matched words
    order = sorted(score, key=lambda k: -score[k])[:limit]
    return [
        Hit(
            best[k].rel,
            best[k].unit,
            best[k].locator,
            score[k] * 100,
            best[k].freshness,
            best[k].snippet,
        )
        for k in order
    ]
