"""The workspace engine: file table, freshness, versions, baseline, views.

Synchronous and usable without FUSE.  Methods that hash or copy file contents
are marked *slow*; async callers run them in a thread.  Every mutation of the
file table happens inside one LMDB write transaction that also appends its
state log event, so a killed process leaves the table and log consistent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from parsers import registry
from parsers._base import FileInfo
from swfs.api import (
    RESERVED_ROOTS,
    STORE_NAME,
    Cause,
    FileState,
    Freshness,
    Hash,
    RelPath,
    WorkspaceError,
)
from swfs.history import snapshots as history
from swfs.history import staging, versioning
from swfs.history.config import Config
from swfs.history.writesession import InPlaceWrites
from swfs.ignore import IgnoreRules
from swfs.store import cacheopen, sharedcache, treecache
from swfs.store.blobreads import BlobReads
from swfs.store.blobs import BlobStore, HashMismatch
from swfs.store.fsutil import open_dir_noatime, open_to_read
from swfs.store.records import (
    FileRecord,
    ParseRecord,
    Store,
    mark_not_kept,
    signature_bytes,
    stat_signature,
    version_not_kept,
)
from swfs.store.reserve import Reserve, is_no_space
from swfs.views import files as views
from swfs.views import ranged
from swfs.views.parsework import FAILED, OK, UNSUPPORTED, ParseOutcome

log = logging.getLogger(__name__)

T = TypeVar("T")

_HASH_THREADS = 4
_PRESERVE_TRIES = 5  # a file that changes under every try fails the write (EIO)
NOT_KEPT_DISK_FULL = "disk full"  # why a version's bytes were not kept (Version.not_kept)


def _store_oserror(rel: str, exc: lmdb.Error) -> OSError:
    """An LMDB failure while keeping ``rel``'s history, as the errno the
    writer gets: ENOSPC for a full disk or map, EIO for anything else."""
    text = str(exc)
    full = isinstance(exc, lmdb.MapFullError) or "No space left" in text
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, f"{rel}: not written: the store cannot record its history ({text})")


@dataclass
class ScanStats:
    files: int = 0
    hashed: int = 0
    added: int = 0
    changed: int = 0
    removed: int = 0
    skipped: int = 0
    secs: float = 0.0


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


class Workspace(BlobReads):
    """One workspace folder and its store."""

    def __init__(self, src: Path, store_dir: Path | None = None, *, config: Config | None = None):
        src = src.resolve()
        if not src.is_dir():
            raise WorkspaceError(f"{src}: not a directory")
        self.src = src
        self.store_dir = (store_dir or src / STORE_NAME).resolve()
        # The store's place inside SRC as a relative path ("." for SRC
        # itself), or None when it lies outside: every record asks.
        try:
            self._store_rel: str | None = str(self.store_dir.relative_to(src))
        except ValueError:
            self._store_rel = None
        self.config = config or Config()
        try:
            self.store = Store(self.store_dir)
        except OSError as exc:
            what = "open" if self.store_dir.exists() else "create"
            hint = ""
            if what == "open" and exc.errno in (errno.EACCES, errno.EPERM):
                hint = " (it belongs to another user: run this as its owner, or through the mount)"
            raise WorkspaceError(
                f"{self.store_dir}: cannot {what} the store: {exc.strerror}{hint}"
            ) from exc
        self.blobs = BlobStore(self.store_dir / "blobs")
        # Filled by the daemon as it starts (Engine), spent by the changes
        # that free space when the disk is full (preserve_freeing, gc).
        self.reserve = Reserve(self.store_dir, self.config.reserve_bytes)
        self.ignore = IgnoreRules.load(src)
        self._listeners: list[Callable[[RelPath], None]] = []
        self._parse_requests: list[Callable[[RelPath, bool], None]] = []
        self._view_lock = threading.Lock()
        self._review_cache: tuple[int, Any] | None = None
        # The write protocol (swfs.writesession): paths it is changing (written,
        # not yet recorded) are left to it by the rescan, which must not record
        # half-written bytes as an external change.
        self.writes = InPlaceWrites(self)
        self._listeners.append(self.writes.changed)
        # The burst windows (swfs.history.versioning): whether a rewrite
        # replaces the last version; the history part pins and closes them.
        self.windows = versioning.VersionWindows()
        # Inode number -> paths whose record names it, built on first need:
        # the other names a write through one hard link changed.  A superset
        # (entries are confirmed by lstat before use), so deletes need no care.
        self._names_by_ino: dict[int, set[str]] | None = None
        self._ino_lock = threading.Lock()
        # Parses under way range by range, shown until stored (swfs.ranged).
        self.partials = ranged.Partials()
        # A --staged mount's layer over SRC: every path is read through it.
        self.staging = staging.Staging.load(src, self.store_dir)
        # The shared parse cache (swfs.store.sharedcache), if any, and how
        # many parse jobs ran here (the engine counts them; swfs status).
        try:
            self.shared_cache = cacheopen.for_store(self.store_dir, self.config.cache_dir)
        except sharedcache.CacheError as exc:
            self.close()
            raise WorkspaceError(f"--cache: {exc}") from None
        self.parse_runs = 0
        try:  # swfs.history.recorder: bytes a killed daemon held
            self.writes.recover_held()
        except OSError as exc:
            log.warning("%s: held files not kept yet: %s", self.store_dir, exc)

    def close(self) -> None:
        self.writes.close()  # the queued records first (swfs.history.recorder)
        if self.staging is not None:
            self.staging.close()
        self.store.close()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ paths
    def abspath(self, rel: str) -> str:
        if self.staging is not None:
            return self.staging.resolve(rel) or self.staging.gone_path(rel)
        return os.path.join(self.src, rel) if rel else str(self.src)

    def _hidden(self, rel: str) -> bool:
        """Paths that are never part of the workspace."""
        top = rel.split("/", 1)[0]
        if top == STORE_NAME or top in RESERVED_ROOTS:
            return True
        inside = self._store_rel  # by SRC's name (a staged copy lives in the store)
        if inside is None:
            return False
        return inside == "." or rel == inside or rel.startswith(inside + "/")

    def is_hidden(self, rel: str) -> bool:
        """Never part of the workspace: the store, a reserved root."""
        return self._hidden(rel)

    # -------------------------------------------------------------- listeners
    def add_listener(self, fn: Callable[[RelPath], None]) -> None:
        self._listeners.append(fn)

    def add_sync_listener(self, fn: Callable[[RelPath], None]) -> None:
        """``fn(rel)`` called at once, in the thread that recorded the change
        (an engine's ``add_listener`` may defer its listeners to the loop)."""
        self._listeners.append(fn)

    def notify_changed(self, rel: str) -> None:
        """Tell the listeners what the engine shows for ``rel`` changed."""
        self._changed(rel)

    def bump_generation(self, txn: lmdb.Transaction) -> None:
        """In a write ``txn`` that changed the file table: a new generation."""
        self._bump(txn)

    def add_parse_request_handler(self, fn: Callable[[RelPath, bool], None]) -> None:
        self._parse_requests.append(fn)

    def _changed(self, rel: str) -> None:
        for fn in self._listeners:
            fn(RelPath(rel))

    def _request_parse(self, rel: str, front: bool = False) -> None:
        for fn in self._parse_requests:
            fn(RelPath(rel), front)

    def _bump(self, txn: lmdb.Transaction) -> None:
        meta = self.store.dbs["meta"]
        raw = txn.get(b"gen", db=meta)
        txn.put(b"gen", str(int(raw or b"0") + 1).encode(), db=meta)

    def generation(self) -> int:
        with self.store.read() as txn:
            raw = txn.get(b"gen", db=self.store.dbs["meta"])
        return int(bytes(raw or b"0"))

    # ----------------------------------------------------------------- hashing
    def _examine(
        self, rel: str, given: int | None = None
    ) -> tuple[os.stat_result, str, str | None] | None:
        """*slow*: stat, hash and pick a parser for one file, without following
        symlinks (``given``: a readable descriptor of it, read instead of
        the path, and left open).  None if it is not (or no longer) a
        regular file."""
        if given is not None:
            fd = given
        else:
            try:
                fd = open_to_read(self.abspath(rel), os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO):
                    log.warning("%s: cannot read: %s", rel, exc.strerror)
                return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            h = treecache.hash_fd(fd)  # by what changed, where that is known
            head = os.pread(fd, 4096, 0)
            if stat_signature(os.fstat(fd)) != stat_signature(st):
                # Written while we read it: these bytes were never a version.
                # The writer's close (or the next scan) records the result.
                return None
        finally:
            if given is None:
                os.close(fd)
        info = FileInfo(
            name=rel, extension=os.path.splitext(rel)[1].lower(), size=st.st_size, head=head
        )
        parser = registry.select(info)
        return st, h, parser.cache_key(info) if parser else None

    # ----------------------------------------------------------------- scanning
    def walk(self) -> Iterator[tuple[str, os.stat_result]]:
        """Every regular file under SRC, never following symlinks."""
        if self.staging is not None:
            yield from staging.walk(self.staging, frozenset({STORE_NAME, *RESERVED_ROOTS}))
            return
        stack = [""]
        while stack:
            rel_dir = stack.pop()
            try:
                dfd = open_dir_noatime(self.abspath(rel_dir))
            except OSError as exc:
                log.warning("%s: cannot list: %s", rel_dir or ".", exc.strerror)
                continue
            try:
                with os.scandir(dfd) as it:
                    for entry in it:
                        rel = _join(rel_dir, entry.name)
                        if not rel_dir and (
                            entry.name == STORE_NAME or entry.name in RESERVED_ROOTS
                        ):
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            if Path(self.abspath(rel)) != self.store_dir:
                                stack.append(rel)
                        elif stat.S_ISREG(st.st_mode):
                            yield rel, st
            finally:
                os.close(dfd)

    def scan(self, progress: Callable[[int, int], None] | None = None) -> ScanStats:
        """*slow*: bring the file table up to date with SRC.

        A stat signature decides whether a file is rehashed, so a rescan of an
        unchanged tree hashes nothing.  Returns what changed; parses are
        requested for every file without a cached parse.
        """
        t0 = time.monotonic()
        stats = ScanStats()
        known = self.store.file_signatures()
        seen: set[str] = set()
        todo: list[str] = []
        busy = self.writes.busy_paths()
        # New parsers (an upgrade, LibreOffice installed) re-examine every
        # file once: a record keeps the parser key it got when it was hashed.
        parsers_now = registry.fingerprint()
        reselect = bool(known) and self.store.get_meta("parsers") != parsers_now
        if reselect:
            log.info("parsers changed since the last scan: re-examining every file")
        for rel, st in self.walk():
            seen.add(rel)
            sig = signature_bytes(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            if (reselect or known.get(rel) != sig) and rel not in busy:
                todo.append(rel)
        stats.files = len(seen)
        first = self.store.get_meta("baseline") is None
        results: list[tuple[str, tuple[os.stat_result, str, str | None]]] = []
        if todo:
            with ThreadPoolExecutor(_HASH_THREADS) as pool:
                for i, (rel, res) in enumerate(
                    zip(todo, pool.map(self._examine, todo), strict=True)
                ):
                    if res is not None:
                        results.append((rel, res))
                    if progress:
                        progress(i + 1, len(todo))
        stats.hashed = len(results)
        gone = [rel for rel in known if rel not in seen and rel not in busy]
        cause = Cause.BASELINE if first else Cause.EXTERNAL
        if results or gone:
            self.store.ensure_room(1024 * (len(results) + len(gone)))
            # The walk and the hashing took a while: a write through the mount
            # may have recorded newer bytes meanwhile, which these results
            # must not replace (that recorded the old bytes as a new version
            # and left the record behind the file).  With every write held
            # off, keep only the results that still describe the file.
            with self.writes.quiet() as busy_now, self.store.write() as txn:
                results = [
                    (rel, res)
                    for rel, res in results
                    if rel not in busy_now and self._still(rel, res[0], known.get(rel), txn)
                ]
                gone = [
                    rel
                    for rel in gone
                    if rel not in busy_now and self._still(rel, None, known.get(rel), txn)
                ]
                for rel, (st, h, parser) in results:
                    old = self.store.get_file(rel, txn)
                    if old is None:
                        stats.added += 1
                    elif old.hash != h:
                        stats.changed += 1
                    self._put_record(txn, rel, st, h, parser, old, cause)
                for rel in gone:
                    stats.removed += 1
                    self.store.delete_file(txn, rel)
                    history.forget_ephemeral(self, txn, rel)
                    self.store.append_state_log(txn, "unlink", path=rel, cause="external")
                self.store.append_state_log(
                    txn,
                    "scan",
                    files=stats.files,
                    hashed=stats.hashed,
                    added=stats.added,
                    changed=stats.changed,
                    removed=stats.removed,
                )
                self._bump(txn)
        if first:
            history.set_baseline(self)
        if self.store.get_meta("parsers") != parsers_now:
            self.store.put_meta("parsers", parsers_now)
        for rel, _ in results:
            self._changed(rel)
        for rel in gone:
            self._changed(rel)
        # Only what this scan changed: whoever starts the parse queue asks
        # needs_parse() once for the rest, and an unchanged rescan stays cheap.
        for rel, (_, h, parser) in results:
            if parser and self.store.parse_status(h, parser) is None:
                self._request_parse(rel)
        stats.secs = time.monotonic() - t0
        return stats

    def _still(
        self, rel: str, st: os.stat_result | None, sig: bytes | None, txn: lmdb.Transaction
    ) -> bool:
        """Whether a scan's finding for ``rel`` (its stat ``st``, None for
        gone) still holds: nobody recorded ``rel`` since the scan read the
        file table (signature ``sig``), and the file is as the scan saw it."""
        old = self.store.get_file(rel, txn)
        if (signature_bytes(*old.signature()) if old else None) != sig:
            return False
        try:
            now = os.lstat(self.abspath(rel))
        except OSError:
            return st is None
        return st is not None and stat_signature(now) == stat_signature(st)

    def _put_record(
        self,
        txn: lmdb.Transaction,
        rel: str,
        st: os.stat_result,
        h: str,
        parser: str | None,
        old: FileRecord | None,
        cause: Cause,
    ) -> FileRecord:
        """Write a file record and, when the content changed, a version."""
        view_hash, view_parser = (old.view_hash, old.view_parser) if old else (None, None)
        if old is not None and old.parser and old.hash != h:
            prev = self.store.get_parse(old.hash, old.parser, txn)
            if prev is not None and prev.ok:
                view_hash, view_parser = old.hash, old.parser
        if parser and self.store.has_parse(txn, h, parser):
            prev = self.store.get_parse(h, parser, txn)
            if prev is not None and prev.ok:
                view_hash, view_parser = h, parser
        rec = FileRecord(
            hash=h,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            ctime_ns=st.st_ctime_ns,
            ino=st.st_ino,
            mode=st.st_mode,
            uid=st.st_uid,
            gid=st.st_gid,
            parser=parser,
            view_hash=view_hash,
            view_parser=view_parser,
        )
        self.store.put_file(txn, rel, rec)
        self._index_inode(rel, st.st_ino)
        if old is None or old.hash != h:
            self._append_version(txn, rel, h, st, cause)
            if old is not None:
                self.store.append_state_log(
                    txn, "write", path=rel, before=old.hash, after=h, cause=cause.value
                )
            else:
                self.store.append_state_log(txn, "add", path=rel, after=h, cause=cause.value)
        return rec

    def _append_version(
        self, txn: lmdb.Transaction, rel: str, h: str, st: os.stat_result, cause: Cause
    ) -> None:
        versions = self.store.get_versions(rel, txn)
        if versions and versions[-1][1] == h:
            return
        number = versions[-1][0] + 1 if versions else 1
        if (
            versions
            and self.windows.decide(
                rel,
                last_hash=versions[-1][1],
                last_cause=versions[-1][3],
                cause=cause,
                interval=self.config.version_interval,
            )
            # Bytes kept already (an unlink inside the burst kept them, or a
            # write the burst did not foresee): that version stays, or its
            # bytes would be referenced by nothing.
            and not self.blobs.has(versions[-1][1])
            # Nor one whose bytes were lost (disk full): its history says so.
            and version_not_kept(versions[-1]) is None
        ):
            # A rewrite in the same burst: this version replaces the last one
            # (a new number all the same: a number never names other bytes).
            versions.pop()
        versions.append(
            [number, h, time.time(), cause.value, st.st_size, st.st_mode, st.st_uid, st.st_gid]
        )
        self.store.put_versions(txn, rel, versions)

    # --------------------------------------------------------- single files
    def get_record(self, rel: str) -> FileRecord | None:
        return self.store.get_file(rel)

    def check_file(
        self,
        rel: RelPath,
        *,
        cause: Cause = Cause.EXTERNAL,
        force: bool = False,
        fd: int | None = None,
    ) -> FileState | None:
        """*slow*: stat-check one file against the table; rehash when its stat
        signature moved (or ``force``), record the change.  ``fd``: a
        readable descriptor of the file to record as ``rel`` (``record_write``)."""
        if self._hidden(rel):
            return None
        try:
            st = os.lstat(self.abspath(rel)) if fd is None else os.fstat(fd)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            rec = self.store.get_file(rel)
            if rec is not None:
                with self.store.write() as txn:
                    self.store.delete_file(txn, rel)
                    history.forget_ephemeral(self, txn, rel)
                    self.store.append_state_log(txn, "unlink", path=rel, cause=cause.value)
                    self._bump(txn)
                self._changed(rel)
            return None
        if not force:  # (a forced check reads the record once, in its transaction)
            rec = self.store.get_file(rel)
            if rec is not None and rec.signature() == stat_signature(st):
                return self._state(rel, rec)
        res = self._examine(rel, fd)
        if res is None:
            return None
        st, h, parser = res
        with self.store.write() as txn:
            old = self.store.get_file(rel, txn)
            rec = self._put_record(txn, rel, st, h, parser, old, cause)
            self._bump(txn)
        if old is None or old.hash != h or old.parser != parser:
            self._changed(rel)
            if parser and self.store.get_parse(h, parser) is None:
                self._request_parse(rel)
        if st.st_nlink > 1 and (old is None or old.hash != h):
            # The same bytes changed under every other name of this inode:
            # each records its own version now, so none of their views keeps
            # claiming the old content as current.
            for other in self.other_names(rel, st):
                self.check_file(RelPath(other), cause=cause)
        # A record made from a descriptor is a queued one: nobody waits for
        # the state (whose freshness and version count cost a third of it).
        return self._state(rel, rec) if fd is None else None

    def other_names(self, rel: str, st: os.stat_result) -> list[str]:
        """The other recorded paths that are hard links to ``rel``'s inode
        (``st``), confirmed by lstat."""
        with self._ino_lock:
            if self._names_by_ino is None:
                index: dict[int, set[str]] = {}
                with self.store.read() as txn:
                    for path, rec in self.store.iter_files(txn):
                        index.setdefault(rec.ino, set()).add(path)
                self._names_by_ino = index
            candidates = sorted(self._names_by_ino.get(st.st_ino, set()) - {rel})
        out = []
        for other in candidates:
            try:
                ost = os.lstat(self.abspath(other))
            except OSError:
                continue
            if (ost.st_dev, ost.st_ino) == (st.st_dev, st.st_ino):
                out.append(other)
        return out

    def _index_inode(self, rel: str, ino: int) -> None:
        with self._ino_lock:
            if self._names_by_ino is not None:
                self._names_by_ino.setdefault(ino, set()).add(rel)

    def is_unchanged(self, rel: RelPath, st: os.stat_result) -> bool:
        return self.unchanged_hash(rel, st) is not None

    def unchanged_hash(self, rel: RelPath, st: os.stat_result) -> str | None:
        # Every open of a native file asks: the record's head, not its JSON.
        head = self.store.file_head(rel)
        if head is None or head[0] != signature_bytes(*stat_signature(st)):
            return None
        return head[1]

    def _state(self, rel: str, rec: FileRecord) -> FileState:
        baseline = self._baseline_manifest().get(rel)
        return FileState(
            rel=RelPath(rel),
            hash=Hash(rec.hash),
            freshness=self._freshness_now(rel, rec),
            versions=len(self.store.get_versions(rel)),
            baseline_hash=Hash(baseline[0]) if baseline else None,
        )

    def file_state(self, rel: RelPath) -> FileState | None:
        """*slow*: what the record of ``rel`` says (after its queued record,
        if a close's or a change of names' is queued: ``InPlaceWrites``)."""
        self.writes.drain_for(rel)
        rec = self.store.get_file(rel)
        return None if rec is None else self._state(rel, rec)

    def freshness(self, rel: RelPath) -> Freshness | None:
        rec = self.store.get_file(rel)
        return None if rec is None else self._freshness_now(rel, rec)

    # A freshness claim is derived on every request, never remembered: a
    # view is current only while its hash is the record's, no writer holds
    # unrecorded changes to the file (the write protocol knows its sessions),
    # and SRC's stat signature is the one recorded with the hash (a change
    # behind the mount, or a writer the daemon never sees, such as a kernel
    # passthrough, moves it before its record lands).
    def settled(self, rel: RelPath) -> bool:
        """Cheap (a lock, one record head, one lstat): whether ``rel``'s
        bytes are surely the ones its record names."""
        head = self.store.file_head(rel)
        return head is not None and self._settled(rel, head[0])

    def _settled(self, rel: str, signature: bytes, busy: set[str] | None = None) -> bool:
        """``settled`` for a record whose stat signature is ``signature``
        (``busy``: the write protocol's busy paths, asked once by a caller
        that checks many files)."""
        if self.writes.unrecorded(rel) if busy is None else rel in busy:
            return False
        try:
            st = os.lstat(self.abspath(rel))
        except OSError:
            return False
        return signature_bytes(*stat_signature(st)) == signature

    def _freshness_now(
        self,
        rel: str,
        rec: FileRecord,
        txn: lmdb.Transaction | None = None,
        busy: set[str] | None = None,
    ) -> Freshness:
        """The freshness of ``rel``'s view now (``swfs.views.files.freshness_now``:
        the rule the views part and a world follow too)."""
        fresh = views.content_freshness(self.store, rec, txn)
        signature = signature_bytes(*rec.signature())
        return views.freshness_now(fresh, lambda: self._settled(rel, signature, busy))

    # ------------------------------------------------------------- preserving
    def _keeps_bytes(self, rel: str, size: int) -> bool:
        if size > self.config.max_preserve_bytes:
            # The blob store keeps holes as nothing: a sparse file costs
            # what is allocated, not its apparent size.
            with contextlib.suppress(OSError):
                size = min(size, os.lstat(self.abspath(rel)).st_blocks * 512)
        return size <= self.config.max_preserve_bytes and not self.ignore.ignored(rel)

    def preserve(self, rel: RelPath) -> str | None:
        """*slow*: keep the bytes of ``rel``'s recorded version before they are
        overwritten in place.  OSError (ENOSPC...) if they cannot be kept.
        Returns the hash of the version kept, None when none needed keeping."""
        return self._preserve(rel, link=False)

    def recorded_hash(self, rel: RelPath) -> str | None:
        """The hash ``rel``'s record names now (one store lookup, from the
        record's head: every record of a file a session holds asks)."""
        return self.store.get_file_hash(rel)

    def preserve_inode(self, rel: RelPath, *, keep_temp: bool = False) -> None:
        """*slow*: keep the bytes of ``rel`` before it is unlinked or renamed over
        (a temp file's only if ``keep_temp``: see ``history.is_ephemeral``)."""
        self._preserve(rel, link=True, keep_temp=keep_temp)

    def preserve_freeing(self, rel: RelPath, *, link: bool) -> str | None:
        """*slow*: keep ``rel``'s bytes before a change that frees space (an
        unlink with ``link``, a truncate without), which must go on even on
        a full disk: then the store's reserve is spent to keep them, and
        when even that is not enough, their version is recorded as not kept
        (``Version.not_kept``, a "not-kept" state log event) and the change
        goes on without them.  Never ENOSPC; EIO as ``preserve``.  The hash
        of the version kept or recorded as lost, None when none needed
        keeping."""
        try:
            return self._preserve(rel, link=link)
        except OSError as exc:
            if not is_no_space(exc):
                raise
        with self.room():
            try:
                return self._preserve(rel, link=link)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
            return self._record_not_kept(rel, NOT_KEPT_DISK_FULL)

    def _record_not_kept(self, rel: str, why: str) -> str | None:
        """Record that the bytes of ``rel``'s present version are about to be
        destroyed unkept (``why``).  A store that cannot take even that is
        logged, never raised: the delete or truncate goes on regardless."""
        rec = self.store.get_file(rel)
        if rec is None:
            return None
        log.warning("%s: its bytes (b3:%s) are not kept: %s", rel, rec.hash[:16], why)
        access = (rec.mode, rec.uid, rec.gid)
        try:
            with self.store.write() as txn:
                versions = self.store.get_versions(rel, txn)
                marked = [v for v in versions if v[1] == rec.hash]
                for v in marked:
                    mark_not_kept(v, why, access)
                if marked:
                    self.store.put_versions(txn, rel, versions)
                self.store.append_state_log(
                    txn,
                    "not-kept",
                    path=rel,
                    version=marked[-1][0] if marked else None,
                    hash=rec.hash,
                    why=why,
                )
                self._bump(txn)
        except lmdb.Error as exc:
            log.error("%s: the store could not record that its bytes were not kept: %s", rel, exc)
        self._changed(rel)
        return rec.hash

    def spending_reserve(self, fn: Callable[[], T]) -> T:
        """``fn()``, a store write for a change that freed space; on a full
        disk again with room made (``room``)."""
        try:
            return fn()
        except lmdb.Error as exc:
            if not is_no_space(exc):
                raise
        with self.room():
            return fn()

    @contextlib.contextmanager
    def room(self) -> Iterator[None]:
        """For a change that frees space on a full disk: the store's
        reserve spent (filled again after the block) and its disposable
        cache of reassembled blobs dropped."""
        with self.reserve.spent():
            freed = self.blobs.clear_cache()
            if freed:
                log.warning("disk full: dropped %d bytes of reassembled versions", freed)
            yield

    def _preserve(self, rel: RelPath, *, link: bool, keep_temp: bool = False) -> str | None:
        """Keep the bytes ``rel`` holds now, or raise OSError: ENOSPC (or
        another errno) when the store cannot take them, EIO when the file
        never held still long enough to keep one version of it.  The caller
        must not go on with the write then: the history would lose a version."""
        try:
            for _attempt in range(_PRESERVE_TRIES):
                done, kept = self._preserve_once(rel, link=link, keep_temp=keep_temp)
                if done:
                    return kept
        except lmdb.Error as exc:
            raise _store_oserror(rel, exc) from exc
        log.warning("%s: could not preserve a stable version (the file kept changing)", rel)
        raise OSError(
            errno.EIO, f"{rel}: not written: its bytes kept changing while swfs tried to keep them"
        )

    def _preserve_once(
        self, rel: RelPath, *, link: bool, keep_temp: bool = False
    ) -> tuple[bool, str | None]:
        """One try: (True, hash of the version kept) when its bytes are kept,
        (True, None) when none need keeping, (False, None) when the file
        changed meanwhile and the caller should try again."""
        state = self.check_file(rel)
        if state is None:
            # Gone or not a regular file: nothing to keep.  Otherwise it was
            # written while being hashed, and no version of it is known yet.
            return not self._is_regular(rel), None
        rec = self.store.get_file(rel)
        if rec is None:
            return False, None
        if not self._keeps_bytes(rel, rec.size):
            return True, None
        if link and not keep_temp and history.is_ephemeral(self, rel, self.store.get_versions(rel)):
            return True, None  # a temp file deleted or renamed over keeps no history, nor bytes
        if not link and self._replaced_soon(rel, rec.hash):
            return True, None  # a burst's last version is replaced, not kept (swfs.versioning)
        path = Path(self.abspath(rel))
        if link and self.staging is not None and not self.staging.in_upper(rel):
            link = False  # SRC's inode lives on until a commit: the blob gets a copy
        if self.blobs.has(rec.hash):
            return True, rec.hash
        try:
            if link:
                self.blobs.link_in(path, expected=rec.hash)
            else:
                fd = open_to_read(path, os.O_NOFOLLOW)
                try:
                    # A reflink where the file system can (swfs.store.blobs)
                    if not self.blobs.clone_fd(fd, expected=rec.hash):
                        self.blobs.put_fd(fd, expected=rec.hash)
                finally:
                    os.close(fd)
        except HashMismatch:
            # Changed behind our back since the last check: record that
            # version first, then keep its bytes.
            self.check_file(rel, force=True)
            return False, None
        except FileNotFoundError:
            return True, None  # unlinked meanwhile: no write can reach these bytes
        return True, rec.hash

    # ---- held bytes (swfs.history.recorder): kept after the change, in order
    def held_dir(self) -> str | None:
        """Where an unlink or a rename over through the mount holds the file
        it destroys until ``keep_held``; None on a staged mount (SRC's
        inode lives on there: ``_preserve_once`` copies)."""
        return None if self.staging is not None else str(self.store_dir / "held")

    def keep_held(self, rel: RelPath, path: str) -> None:
        """*slow*: what ``preserve_inode(rel)`` would have kept, from the link
        ``path`` held to ``rel``'s file before it was unlinked or renamed
        over; ``rel``'s record is still the one of before the change.  On a
        full disk the version is recorded as not kept (the change that
        freed space went on, as ``preserve_freeing``)."""
        rec = self.store.get_file(rel)
        if rec is None or not self._keeps_bytes(rel, rec.size):
            return
        if history.is_ephemeral(self, rel, self.store.get_versions(rel)):
            return  # a temp file deleted or renamed over keeps no history, nor bytes
        if self.blobs.has(rec.hash):
            return
        try:
            self._keep_held(rel, rec.hash, path)
            return
        except OSError as exc:
            if not is_no_space(exc):
                raise
        with self.room():
            try:
                self._keep_held(rel, rec.hash, path)
                return
            except OSError as exc:
                if not is_no_space(exc):
                    raise
        self._record_not_kept(rel, NOT_KEPT_DISK_FULL)

    def _keep_held(self, rel: str, h: str, path: str) -> None:
        try:
            self.blobs.link_in(Path(path), expected=h)
        except HashMismatch:
            # Changed behind the mount since its last record: its bytes are
            # kept under their own hash; those of the record were gone already.
            log.warning("%s: changed since its last record (b3:%s): kept as found", rel, h[:16])
            self.blobs.link_in(Path(path))

    def keep_held_orphan(self, path: str) -> None:
        """*slow*: keep the bytes a killed daemon held (under their hash)."""
        self.blobs.link_in(Path(path))

    def deferring_syncs(self) -> contextlib.AbstractContextManager[None]:
        """A block whose kept bytes are fsynced at its end
        (``BlobStore.deferring_syncs``)."""
        return self.blobs.deferring_syncs()

    def _replaced_soon(self, rel: str, h: str) -> bool:
        """Whether the in-place write about to happen makes a version that
        replaces ``rel``'s present one (``h``), so its bytes need no keeping
        (swfs.versioning)."""
        versions = self.store.get_versions(rel)
        if not versions or versions[-1][1] != h or self.blobs.has(h):
            return False
        return self.windows.skip_keep(
            rel,
            last_hash=h,
            last_cause=versions[-1][3],
            interval=self.config.version_interval,
        )

    def _is_regular(self, rel: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(self.abspath(rel)).st_mode)
        except OSError:
            return False

    # ------------------------------------------------------- writes via mount
    def record_write(self, rel: RelPath, *, fd: int | None = None) -> FileState | None:
        """*slow*: after a written file is closed, released or fsynced (``fd``:
        ``WorkspaceAPI.record_write``; None is returned then)."""
        return self.check_file(rel, cause=Cause.WRITE, force=True, fd=fd)

    def writer_if_free(self) -> contextlib.AbstractContextManager[bool]:
        """``Store.writer_if_free``: whether a record can be made now
        without waiting on another thread's write."""
        return self.store.writer_if_free()

    def record_rename(self, old: RelPath, new: RelPath) -> None:
        """After ``old`` was renamed to ``new`` (a file or a directory)."""
        moved: list[tuple[str, str]] = []
        with self.store.write() as txn:
            rec = self.store.get_file(old, txn)
            if rec is not None:
                moved.append((old, new))
            else:
                prefix = old + "/"
                for rel, _ in self.store.iter_files(txn):
                    if rel.startswith(prefix):
                        moved.append((rel, new + rel[len(old) :]))
            for src_rel, dst_rel in moved:
                self._move_one(txn, src_rel, dst_rel)
            self.store.append_state_log(txn, "rename", path=old, to=new)
            self._bump(txn)
        for src_rel, dst_rel in moved:
            self._changed(src_rel)
            self._changed(dst_rel)
            # The stat signature changes (ctime): refresh without a new
            # version, if the name still holds the file that was moved.  A
            # record made after the change (off the reply path: the queue)
            # may find another file under it already, whose own record is
            # queued behind this one: that one records it.
            self._refresh_moved(RelPath(dst_rel))
        if not moved:
            # Renamed something we never saw: look at it now.
            self.check_file(new, cause=Cause.WRITE)

    def _refresh_moved(self, rel: RelPath) -> None:
        rec = self.store.get_file(rel)
        try:
            st = os.lstat(self.abspath(rel))
        except OSError:
            st = None
        if rec is not None and st is not None:
            if st.st_ino != rec.ino:
                return
            if rec.signature() == stat_signature(st):
                # Recorded after the rename already (a close's record, made
                # from its descriptor): the bytes are known, but the parser
                # was picked by the old name.
                self._reselect_parser(rel, rec, st)
                return
        self.check_file(rel, cause=Cause.RENAME)

    def _reselect_parser(self, rel: str, rec: FileRecord, st: os.stat_result) -> None:
        try:
            fd = open_to_read(self.abspath(rel), os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        try:
            head = os.pread(fd, 4096, 0)
        finally:
            os.close(fd)
        info = FileInfo(
            name=rel, extension=os.path.splitext(rel)[1].lower(), size=st.st_size, head=head
        )
        found = registry.select(info)
        parser = found.cache_key(info) if found else None
        if parser == rec.parser:
            return
        with self.store.write() as txn:
            old = self.store.get_file(rel, txn)
            if old is None or old.hash != rec.hash:
                return
            self._put_record(txn, rel, st, old.hash, parser, old, Cause.RENAME)
            self._bump(txn)
        self._changed(rel)
        if parser and self.store.get_parse(rec.hash, parser) is None:
            self._request_parse(rel)

    def _move_one(self, txn: lmdb.Transaction, src: str, dst: str) -> None:
        rec = self.store.get_file(src, txn)
        if rec is None:
            return
        self.store.delete_file(txn, src)
        target = self.store.get_file(dst, txn)
        src_versions = self.store.get_versions(src, txn)
        dst_versions = self.store.get_versions(dst, txn)
        if target is not None or dst_versions:
            # Renamed over an existing path: the editor save pattern.  The
            # target keeps its history and gains one version; a short-lived
            # source (a temp file) leaves no history of its own.
            temp = len(src_versions) <= 1 or history.is_ephemeral(self, src, src_versions)
            cause = Cause.WRITE if temp else Cause.RENAME
            if not dst_versions or dst_versions[-1][1] != rec.hash:
                number = dst_versions[-1][0] + 1 if dst_versions else 1
                kept = [rec.size, rec.mode, rec.uid, rec.gid]  # the access it had then
                dst_versions.append([number, rec.hash, time.time(), cause.value, *kept])
            self.store.put_versions(txn, dst, dst_versions)
            if target is not None and rec.view_hash is None:
                prev = self.store.get_parse(target.hash, target.parser or "", txn)
                if prev is not None and prev.ok:
                    rec = dataclasses.replace(rec, view_hash=target.hash, view_parser=target.parser)
            if temp:
                history.drop_history(self, txn, src, src_versions)
        else:
            self.store.put_versions(txn, dst, src_versions)
            self.store.put_versions(txn, src, [])
        self.store.put_file(txn, dst, rec)
        self._index_inode(dst, rec.ino)

    def record_unlink(self, rel: RelPath) -> None:
        """After ``rel`` was unlinked (its space freed: a full disk spends
        the store's reserve to record it)."""
        self.spending_reserve(lambda: self._record_unlink(rel))

    def _record_unlink(self, rel: RelPath) -> None:
        with self.store.write() as txn:
            if self.store.get_file(rel, txn) is None:
                return
            self.store.delete_file(txn, rel)
            history.forget_ephemeral(self, txn, rel)
            self.store.append_state_log(txn, "unlink", path=rel, cause="write")
            self._bump(txn)
        self._changed(rel)

    # ---------------------------------------------------------------- parses
    def apply_parse(
        self, rel: RelPath, outcome: ParseOutcome, *, queued_hash: str, queued_parser: str
    ) -> bool:
        """Store a worker's outcome.  Returns True when ``rel`` needs another
        parse (it changed meanwhile)."""
        if outcome.part is not None:
            # Ranges live in memory until they add up to the whole parse
            # (swfs.ranged): one stored as a parse would hide the rest.
            raise ValueError(f"{rel}: a range of units offered as a whole parse")
        if outcome.status == UNSUPPORTED and outcome.hash == queued_hash:
            # Selected by extension and magic, declined after a closer look.
            outcome = ParseOutcome(
                UNSUPPORTED,
                hash=outcome.hash,
                parser=queued_parser,
                error=outcome.error,
                secs=outcome.secs,
            )
        elif outcome.status not in (OK, FAILED):
            if outcome.status == UNSUPPORTED or outcome.hash != queued_hash:
                # Changed while it was parsed.  If that is a write through the
                # mount, still going on, the session records it: a check now
                # could record its half-written state (after an O_TRUNC, the
                # empty file) as a version.
                self.writes.check_behind(rel, lambda r: self.check_file(r, force=True))
                rec = self.store.get_file(rel)
                return bool(
                    rec and rec.parser and self.store.get_parse(rec.hash, rec.parser) is None
                )
            return False
        h = outcome.hash or queued_hash
        parser = outcome.parser or queued_parser
        record = ParseRecord(
            status=outcome.status, error=outcome.error, secs=round(outcome.secs, 4), at=time.time()
        )
        self.store.ensure_room(sum(len(u[2]) for u in outcome.units) * 4 + 4096)
        with self.store.write() as txn:
            self.store.write_parse(txn, h, parser, record, outcome.units)
            self.store.append_state_log(
                txn,
                "parse",
                path=rel,
                hash=h,
                parser=parser,
                status=outcome.status,
                secs=round(outcome.secs, 4),
                error=outcome.error,
            )
            rec = self.store.get_file(rel, txn)
            if rec is not None and rec.hash == h and outcome.status == OK:
                self.store.put_file(
                    txn, rel, dataclasses.replace(rec, view_hash=h, view_parser=parser)
                )
            self._bump(txn)
        self._changed(rel)
        if rec is None:
            return False
        if rec.hash != h:
            return bool(rec.parser) and self.store.get_parse(rec.hash, rec.parser or "") is None
        return False

    def parse_units(self, h: str, parser: str) -> list[tuple[str, str, str]] | None:
        return views.ok_units(self.store, h, parser)

    # --------------------------------------------------------------- status
    def not_preserved(self) -> int:
        """How many files keep hashes only (too large, or in .swfsignore)."""
        return sum(
            1 for rel, rec in self.store.all_files().items() if not self._keeps_bytes(rel, rec.size)
        )

    # ------------------------------------------------------------- baseline
    def _baseline_manifest(self) -> dict[str, list[Any]]:
        # Keyed by the baseline's own generation: decoding the manifest of a
        # large tree after every write would cost more than the write.
        with self.store.read() as txn:
            raw = txn.get(b"baseline_gen", db=self.store.dbs["meta"])
        gen = int(bytes(raw or b"0"))
        if self._review_cache is not None and self._review_cache[0] == gen:
            return self._review_cache[1]
        manifest = self.store.get_meta("baseline") or {}
        self._review_cache = (gen, manifest)
        return manifest

    def manifest(self) -> dict[str, list[Any]]:
        return {rel: rec.manifest_entry() for rel, rec in self.store.all_files().items()}

    def baseline_manifest(self) -> dict[str, list[Any]]:
        return self._baseline_manifest()


class LiveSource:
    """The live workspace as its views read it (``swfs.views.serving.ViewSource``):
    the file table, the store's parses, and whether a file holds the bytes
    its record names now (``Workspace.settled``)."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self.parses = ws.store

    def read(self) -> contextlib.AbstractContextManager[lmdb.Transaction]:
        return self._ws.store.read()

    def record(self, rel: str) -> FileRecord | None:
        return self._ws.store.get_file(rel)

    def records(self, txn: lmdb.Transaction) -> Iterator[tuple[str, FileRecord]]:
        return self._ws.store.iter_files(txn)

    def generation(self) -> int:
        return self._ws.generation()

    def busy(self) -> set[str]:
        return self._ws.writes.busy_paths()

    def settled(self, rel: str, rec: FileRecord, busy: set[str] | None = None) -> bool:
        return self._ws._settled(rel, signature_bytes(*rec.signature()), busy)

    def partial(self, h: str, parser: str) -> ranged.PartialParse | None:
        return self._ws.partials.get(h, parser)
