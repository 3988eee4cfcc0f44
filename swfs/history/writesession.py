"""The write protocol: one owner for a native file's history while it changes.

The daemon (or anything else that changes native files on the engine's
behalf) holds no policy; it calls these objects and does what they say:

- ``begin_write(rel, opener, truncate=)`` at an open for writing: notices a
  change made behind the mount first, preserves the recorded bytes before an
  O_TRUNC, then opens.  ``adopt_new(rel, fd)`` for a file the caller has just
  created (nothing recorded to keep).
- ``adopt_unnamed(fd)`` for a file created without a name (O_TMPFILE):
  nothing is recorded of it unless ``named(session, rel)`` says it was
  linked in, after which it is recorded like a new file.
- ``session.write`` / ``session.truncate`` / ``session.fallocate`` (one
  that punches a hole, zeroes a range or grows the file): before the first
  in-place change since the last recorded version, the recorded bytes are
  preserved.  The change goes through ``swfs.store.treecache``, which notes the
  1 MiB leaves it touched, so the record rehashes those only.  If they
  cannot be (disk full, a file that never holds still), OSError ENOSPC
  or EIO is raised and nothing is written: history is never lost silently.
  A change that frees space (an unlink, an O_TRUNC, a truncate that
  shrinks) is the exception: it always goes on, so that a full disk can be
  freed; the engine spends its reserve to keep the bytes and, where even
  that is not enough, records them as not kept (``preserve_freeing``).
  ``needs_preserve`` / ``preserve()`` let an async caller do that slow step
  in a worker thread before a write.
- ``session.flush`` (close(2) of one of the writer's descriptors),
  ``session.sync`` (fsync, which makes the bytes durable first) and
  ``session.release`` settle: the file is
  rehashed, a version is recorded when the hash changed, its view turns
  stale and a re-parse is queued (all by the engine's ``record_write``).
- ``unlink(rel)``, ``rename(old, new)``, ``truncate(rel)``: a ``Change``
  whose ``prepare`` keeps what the change destroys (the inode that goes, by
  hard link; a file's bytes before a path truncate), whose ``commit`` records
  it, and which tells the change feed and the rescan to leave the paths to
  it meanwhile.
- ``busy(rels)``: which paths a session or a change is changing right now
  (written and not yet recorded, or in the middle of a change): the change
  feed and the rescan skip them, since the session records them itself.
  ``unrecorded(rel)`` asks the same of one path: no view of it is current
  meanwhile, from the first write that reaches the daemon until its record.

``InPlaceWrites`` is the implementation for a mount that writes through to
SRC.  A staged mount (writes held in the store until commit) is another
implementation of ``swfs.api.WriteProtocol`` / ``WriteSession``: its sessions
would open a staged copy and never preserve.

The protocol is built only on the history primitives of ``WorkspaceAPI``
(``check_file``, ``preserve``, ``preserve_inode``, ``record_write``,
``record_unlink``, ``record_rename``), so the real engine and a test double
share it.  Its methods are synchronous; the ones marked *slow* hash or copy
and belong in a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar

from swfs.api import FileState, RecordedHash, RelPath, WriteSession
from swfs.history.recorder import MAX_DELAY, QUIET, Held, Recorder
from swfs.store import treecache
from swfs.store.fsutil import fallocate, fallocate_changes, reopen_to_read
from swfs.store.reserve import NO_SPACE

log = logging.getLogger(__name__)

T = TypeVar("T")


class History(Protocol):
    """What the write protocol needs of the engine."""

    def abspath(self, rel: str) -> str:
        """Where ``rel`` lives now."""
        ...

    def check_file(self, rel: RelPath) -> FileState | None: ...
    def preserve(self, rel: RelPath) -> str | None:
        """The hash of the recorded version whose bytes are kept now, or None
        when nothing needed keeping (or nothing can be said of it)."""
        ...

    def recorded_hash(self, rel: RelPath) -> str | None:
        """Cheap: the hash the record of ``rel`` names now."""
        ...

    def preserve_freeing(self, rel: RelPath, *, link: bool) -> str | None:
        """``preserve`` (``link``: ``preserve_inode``) before a change that
        frees space: never ENOSPC; on a full disk the version is recorded as
        not kept instead.  The hash of the version dealt with."""
        ...

    def preserve_inode(self, rel: RelPath) -> None: ...
    def record_write(self, rel: RelPath, *, fd: int | None = None) -> FileState | None: ...
    def record_rename(self, old: RelPath, new: RelPath) -> None: ...
    def record_unlink(self, rel: RelPath) -> None: ...
    def held_dir(self) -> str | None:
        """Where an unlink or a rename over holds the file it destroys
        until ``keep_held`` keeps its bytes (None: keep them first)."""
        ...

    def keep_held(self, rel: RelPath, path: str) -> None:
        """*slow*: what ``preserve_inode(rel)`` would have kept before the
        change, from ``path``, the link held to the file then."""
        ...

    def keep_held_orphan(self, path: str) -> None:
        """*slow*: keep the bytes at ``path``, held by a daemon that was
        killed before it recorded its change (under their own hash)."""
        ...

    def writer_if_free(self) -> AbstractContextManager[bool]:
        """The store's writer lock if no other thread holds it (True), else
        nothing (False): a record made on the daemon's loop must not wait."""
        ...

    def deferring_syncs(self) -> AbstractContextManager[None]:
        """A block whose kept bytes are fsynced at its end, not one by one
        (``BlobStore.deferring_syncs``)."""
        ...


@dataclass
class _Kept:
    """Shared by every session on one inode: whether the bytes an in-place
    change would destroy are kept.  A record of a new version resets it:
    the engine's notice for the file finds the record naming another hash
    than ``hash``, the version whose bytes were kept (notices for views, or
    late ones for the very record that was kept, leave it alone)."""

    preserved: bool = False
    hash: str | None = None


def _moved(rel: str, old: str, new: str) -> str | None:
    """``rel`` after ``old`` was renamed to ``new`` (a file or a directory),
    or None when the rename does not touch it."""
    if rel == old:
        return new
    if rel.startswith(old + "/"):
        return new + rel[len(old) :]
    return None


_STRIPES = 64

# Fault injection for the crash tests (tests/mounted/test_keep_crash_mounted.py):
# ``kept:REL`` kills this process right after the recorded bytes of REL were
# kept before an in-place write, ``written:REL`` right after that write,
# ``queued:REL`` right after an unlink of REL (or a rename onto it) was made
# and its record queued (swfs.history.recorder).
KILL_AT_ENV = "SWFS_TEST_KILL_AT"
_KILL_AT = os.environ.get(KILL_AT_ENV, "")


# A file is held (kept after its unlink or rename over, off the reply path)
# only where the file system has this much room beside twice its size.
HOLD_ROOM = 64 << 20

# For the crash tests (tests/mounted/test_deferred_records_mounted.py): how
# long the queue of records waits for a pause in the changes (seconds), so a
# test can kill the daemon while records are still queued.
RECORD_QUIET_ENV = "SWFS_TEST_RECORD_QUIET"


def _fault(step: str, rel: str | None) -> None:
    if _KILL_AT and f"{step}:{rel}" == _KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


# At most this many closes' records wait in the queue at once, each holding a
# descriptor of its file: past it a close records in a worker thread, as an
# fsync does (the queue is drained first).
MAX_QUEUED_RECORDS = 1024


class QueuedRecord:
    """A close's record in the queue (``swfs.api.RecordedHash``)."""

    WAIT = 300.0  # seconds ``wait`` gives the queue before it gives up

    def __init__(self) -> None:
        self.hash: str | None = None
        self._done = threading.Event()

    def made(self, h: str | None) -> None:
        self.hash = h
        self._done.set()

    def wait(self) -> None:
        if not self._done.wait(self.WAIT):
            log.warning("a queued record was not made within %.0f s", self.WAIT)


class InPlaceSession:
    """One open-for-writing of one native file, written in place in SRC."""

    def __init__(
        self,
        writes: InPlaceWrites,
        rel: str | None,
        fd: int,
        key: tuple[int, int],
        kept: _Kept,
        *,
        dirty: bool,
    ) -> None:
        self._writes = writes
        self.key = key  # (st_dev, st_ino): sessions on one inode share ``kept``
        self.rel: str | None = rel  # its present name (renames through the protocol move it)
        self.fd = fd
        self._kept = kept
        # Changed since the last record, an O_TRUNC open included: a
        # release or fsync records it.
        self.dirty = dirty
        # Changed by write, truncate or fallocate since the last record: a
        # close (flush) records it too.  Not an O_TRUNC open alone: a shell's
        # `> f` closes its first fd before writing, and that empty file is no
        # version.
        self.record_on_flush = False
        self.closed = False
        self.queued: RecordedHash | None = None  # the last record a close queued

    # -- changing bytes

    @property
    def needs_preserve(self) -> bool:
        """Cheap: the next in-place change would first have to keep bytes."""
        return not self._kept.preserved and self.rel is not None

    def preserve(self, *, freeing: bool = False) -> None:
        """*slow*: keep the recorded bytes before they are changed in place.
        OSError (ENOSPC, EIO) when they cannot be kept: do not write then.
        ``freeing``: for a change that frees space (a truncate that
        shrinks), which goes on without them on a full disk (never ENOSPC;
        ``History.preserve_freeing``)."""
        if self._kept.preserved or self.rel is None:
            # Nothing to keep (a file this mount created, or bytes kept
            # already): queued records of the path (the unlink of the file
            # that had its name before) change no bytes of this inode, so
            # the write need not wait for them.
            return
        self._writes.drain_for(self.rel)
        rel = self.rel
        if self._kept.preserved or rel is None:
            return
        history = self._writes.history
        with self._writes.changing(rel):
            if freeing:
                kept = _keep_freeing(history, RelPath(rel), link=False)
            else:
                kept = history.preserve(RelPath(rel))
        self._writes.kept(self._kept, rel, kept)

    def write(self, off: int, buf: bytes) -> int:
        self.preserve()  # a no-op unless a record came in since needs_preserve
        _fault("kept", self.rel)
        self._dirty()
        # Through the leaf cache, which notes what changed: the record at
        # close rehashes only that (swfs.treecache).
        n = treecache.CACHE.write(self.key, self.fd, off, buf)
        self.record_on_flush = True
        _fault("written", self.rel)
        return n

    def truncate(self, size: int) -> None:
        """*slow* when ``needs_preserve``.  One that shrinks the file always
        succeeds: it frees space (``preserve(freeing=True)``)."""
        if self.needs_preserve:
            self.preserve(freeing=size < os.fstat(self.fd).st_size)
        self._dirty()
        treecache.CACHE.truncate(self.key, self.fd, size)
        self.record_on_flush = True  # recorded on close (flush), release or fsync

    def fallocate_changes(self, mode: int, off: int, length: int) -> bool:
        """Cheap (one fstat): whether ``fallocate(mode, off, length)`` would
        change what the file reads as, so that it is a write to history."""
        return fallocate_changes(mode, off, length, os.fstat(self.fd).st_size)

    def fallocate(self, mode: int, off: int, length: int) -> None:
        """fallocate(2).  One that changes what the file reads as (a hole
        punched, a range zeroed, the size grown) is a write: the recorded
        bytes are kept first and a version is recorded at close.  An
        allocation within the size is none."""
        if not self.fallocate_changes(mode, off, length):
            fallocate(self.fd, mode, off, length)
            return
        self.preserve()
        self._dirty()
        treecache.CACHE.fallocate(self.key, self.fd, mode, off, length)
        self.record_on_flush = True

    def _dirty(self) -> None:
        """Busy from before the first byte changes: a check of a change behind
        the mount either ends before it (and sees the old bytes) or skips the
        file (``InPlaceWrites.check_behind``); it never hashes a torn state."""
        if not self.dirty and self.rel is not None:
            with self._writes.stripe(self.rel):
                self.dirty = True
        self.dirty = True

    # -- settling

    def flush(self) -> None:
        """*slow*: close(2) of one of the writer's descriptors.  Unlike release,
        the kernel waits for it, so recording here orders the write before
        whatever the writer does next (an editor's rename of its temp file)."""
        os.close(os.dup(self.fd))  # close() semantics of the backing fs (NFS write errors)
        if self.record_on_flush:
            # Not after a mere O_TRUNC: a shell's `> f` closes its first fd
            # before writing, and the empty file in between is no version.
            self.settle()

    def flush_later(self) -> bool:
        """``flush`` on the caller's thread (the daemon's loop), without
        waiting: what the writer changed is recorded off the reply path, by
        the recorder (``InPlaceWrites.record_later``).  False, with nothing
        done, where it must be recorded in a worker thread (``flush``).

        A close is no point of durability of the bytes (fsync is), and its
        record needs no waiting: the recorder makes it in order with the
        changes of names queued around it, from a descriptor of this file
        (not from whatever its name holds by then), and until it is made
        the path is busy, its view not current, and any step that reads
        its record (a write that must keep the bytes, an fsync, a look at
        its history) waits for it."""
        if self.record_on_flush and not self._writes.record_later(self):
            return False
        os.close(os.dup(self.fd))  # close() semantics of the backing fs (NFS write errors)
        return True

    def sync(self, datasync: bool) -> None:
        """*slow*: the bytes are made durable and recorded.  Their version is
        a burst's like any write's (``swfs.history.versioning``): a database
        that fsyncs at every commit leaves one version per interval, not one
        per transaction."""
        (os.fdatasync if datasync else os.fsync)(self.fd)
        self.settle()

    def release(self) -> None:
        """*slow*: the last descriptor is gone: record and end the session."""
        if self.closed:
            return
        self.closed = True
        try:
            os.close(self.fd)
            self.settle()
        finally:
            self._writes.ended(self)

    def release_later(self) -> bool:
        """``release`` on the caller's thread, its record queued as
        ``flush_later``'s; False, nothing done, where it cannot be."""
        if self.closed:
            return True
        if self.dirty and not self._writes.record_later(self):
            return False
        self.closed = True
        try:
            os.close(self.fd)
        finally:
            self._writes.ended(self)
        return True

    def settle(self) -> None:
        """*slow*: record what this session changed since the last record."""
        self._writes.drain_for(self.rel)
        rel = self.rel
        if not self.dirty:
            return
        if rel is None:
            self._kept.preserved = False
            self.dirty = self.record_on_flush = False
            return
        with self._writes.changing(rel):
            self._settle_busy(rel)

    def _settle_busy(self, rel: str) -> None:
        """``settle``, ``rel`` marked busy by the caller."""
        if not self.dirty:
            return
        self._kept.preserved = False  # the bytes are a recorded version now: keep them first
        try:
            self._writes.history.record_write(RelPath(rel))
        except Exception:
            # The bytes are on disk whatever happens here: failing close()
            # would only scare the writer.  The next flush, release or
            # check_file records them.
            log.exception("record_write(%r) failed", rel)
            return
        self.dirty = self.record_on_flush = False


class Change:
    """One change of names (unlink, rename) or a path truncate: ``prepare``
    keeps what it destroys, ``commit`` records it.  The paths are busy from
    creation to commit or abort."""

    def __init__(
        self,
        writes: InPlaceWrites,
        rels: Iterable[str],
        prepare: Callable[[], None],
        commit: Callable[[], None],
        needs_prepare: Callable[[], bool] = lambda: True,
        *,
        done: Callable[[], None] = lambda: None,
        cleanup: Callable[[], None] = lambda: None,
    ) -> None:
        self._writes = writes
        self._rels = list(rels)
        self._prepare, self._commit = prepare, commit
        self._needs_prepare = needs_prepare
        self._done_now, self._cleanup = done, cleanup
        self._done = False
        writes.enter(self._rels)

    def needs_prepare(self) -> bool:
        """*fast*: whether ``prepare`` has anything to do now; a caller may
        skip it (and the thread hop it costs) when not."""
        return self._needs_prepare()

    def prepare(self) -> None:
        """*slow*: OSError (ENOSPC, EIO) when what goes cannot be kept; the
        change must not happen then (call ``abort``)."""
        self._writes.drain()
        self._prepare()

    def commit(self) -> None:
        """*slow*: the change happened; record it."""
        self.changed()
        self._record()

    def changed(self) -> None:
        """*fast*: the change happened; the protocol's own state (the names
        of open sessions) follows it at once."""
        self._done_now()

    def commit_later(self) -> None:
        """*fast*: the change happened (``changed`` is called here); its
        record is queued (``swfs.history.recorder``): the paths stay busy
        until it is made."""
        self.changed()
        self._writes.recorder.submit(self._record)
        _fault("queued", self._rels[-1])

    def _record(self) -> None:
        try:
            self._commit()
        finally:
            self._finish()

    def abort(self) -> None:
        try:
            self._cleanup()
        finally:
            self._finish()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._writes.leave(self._rels)

    def run(self, do: Callable[[], T]) -> T:
        """*slow*: prepare, ``do`` the change, commit (one thread hop for all)."""
        try:
            self.prepare()
            out = do()
        except BaseException:
            self.abort()
            raise
        self.commit()
        return out


class InPlaceWrites:
    """The write protocol of a mount that writes through to SRC."""

    def __init__(self, history: History) -> None:
        self.history = history
        self._lock = threading.Lock()
        self._sessions: set[InPlaceSession] = set()
        self._kept: dict[tuple[int, int], _Kept] = {}  # (st_dev, st_ino) -> shared state
        self._inflight: Counter[str] = Counter()
        self._queued_records = 0  # closes' records queued, not made yet (record_later)
        # Per-path locks, striped: held by a check of a change behind the mount
        # for as long as it reads the file, and taken by whatever is about to
        # change a path's bytes (check_behind).
        self._stripes = tuple(threading.Lock() for _ in range(_STRIPES))
        # Records of changes of names, made off the reply path, in order
        # (swfs.history.recorder); the hard links that hold what they destroy.
        quiet = float(os.environ.get(RECORD_QUIET_ENV) or QUIET)
        self.recorder = Recorder(quiet=quiet, max_delay=max(MAX_DELAY, quiet), batch=self._batch)
        self._batch_drops = threading.local()  # held links a batch drops at its end
        self._held: Held | None = None
        self._held_known = False

    def drain(self) -> None:
        """*slow*: wait until every queued record is made (before a step
        that reads records, and before an fsync: what it makes durable
        includes the records of the changes before it)."""
        self.recorder.drain()

    def queued_for(self, rel: str | None) -> bool:
        """Cheap: whether a queued record may change what the store says of
        ``rel``: one of a change of ``rel``, of a folder above it or of a
        path below it (those paths are busy until recorded)."""
        if not self.recorder.pending:
            return False
        if rel is None:
            return True
        with self._lock:
            busy = list(self._inflight)
        return any(p == rel or rel.startswith(p + "/") or p.startswith(rel + "/") for p in busy)

    def drain_for(self, rel: str | None) -> None:
        """*slow*: ``drain`` where a queued record may concern ``rel``."""
        if self.queued_for(rel):
            self.drain()

    def close(self) -> None:
        self.recorder.close()

    def record_later(self, session: InPlaceSession) -> bool:
        """*fast*: queue the record of what ``session`` changed since its last
        one (``InPlaceSession.flush_later``).  The path is busy from now
        until it is made; the next change of the file's bytes keeps them
        first (after the record: ``preserve`` waits for the queue).  False,
        with nothing done, where it cannot be queued now: too many queued
        already, a check of a change behind the mount reading the path, or
        no descriptor to read the file by."""
        rel = session.rel
        if not session.dirty:
            return True
        if rel is None:  # no name, nothing to record (until ``named``)
            with self._lock:
                session._kept.preserved = False
            session.dirty = session.record_on_flush = False
            return True
        with self._lock:
            if self._queued_records >= MAX_QUEUED_RECORDS:
                return False
        try:
            fd = reopen_to_read(session.fd)
        except OSError:
            return False
        if not self.try_enter(rel):
            os.close(fd)
            return False
        with self._lock:
            self._queued_records += 1
            session._kept.preserved = False  # a recorded version from now on: keep it first
        session.dirty = session.record_on_flush = False
        history = self.history
        queued = QueuedRecord()
        session.queued = queued

        def record() -> None:
            h = None
            try:
                history.record_write(RelPath(rel), fd=fd)
                h = history.recorded_hash(RelPath(rel))
            except Exception:
                # The bytes are in SRC whatever happens here: the next
                # record of the file (or the next scan) records them.
                log.exception("record_write(%r) failed", rel)
            finally:
                queued.made(h)
                os.close(fd)
                with self._lock:
                    self._queued_records -= 1
                self.leave([rel])

        self.recorder.submit(record)
        _fault("record-queued", rel)
        return True

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """Around each batch of queued records (on the recorder's thread):
        the bytes its changes keep are fsynced once, at its end, and only
        then are the links that held them dropped, so that until they are
        durable in the store they are durable in ``held/``."""
        drops: list[str] = []
        self._batch_drops.paths = drops
        try:
            with self.history.deferring_syncs():
                yield
        finally:
            self._batch_drops.paths = None
        for path in drops:
            Held.drop(path)

    def _drop_held(self, path: str | None) -> None:
        """Drop a held link: at the end of the batch on the recorder's
        thread, at once elsewhere (an aborted change)."""
        drops: list[str] | None = getattr(self._batch_drops, "paths", None)
        if drops is None or path is None:
            Held.drop(path)
        else:
            drops.append(path)

    def _holder(self) -> Held | None:
        if not self._held_known:
            where = self.history.held_dir()
            self._held = None if where is None else Held(where)
            self._held_known = True
        return self._held

    def recover_held(self) -> int:
        """*slow*: keep the bytes of files a killed daemon held (``Held``);
        how many."""
        held = self._holder()
        if held is None:
            return 0
        return held.recover(self.history.keep_held_orphan)

    def _hold(self, target: tuple[int, str, os.stat_result] | None) -> str | None:
        """Hold (hard-link into the store) the file ``target`` names,
        ``(dir_fd, name, its lstat)``, which a change is about to destroy,
        where that is safe: a regular file with one name and no session
        writing it (whose writes would change the held bytes before they
        are kept).  Not a file with other names: the held link would show
        in their link count (``st_nlink``) until the record drops it.  The
        held path, or None (keep it first, the slow way)."""
        held = self._holder()
        if held is None or target is None:
            return None
        pfd, name, st = target
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            return None
        key = (st.st_dev, st.st_ino)
        with self._lock:
            if key in self._kept:
                return None
        try:
            vfs = os.fstatvfs(pfd)
        except OSError:
            return None
        if vfs.f_bavail * vfs.f_frsize < HOLD_ROOM + 2 * st.st_size:
            # Nearly full: a delete must free its space now, and keeping
            # the bytes needs room (``_keep_freeing`` knows what to do).
            return None
        return held.hold(name, pfd)

    # -- sessions

    def begin_write(self, rel: str, opener: Callable[[], int], *, truncate: bool) -> InPlaceSession:
        """*slow*: open ``rel`` for writing (``opener`` returns the descriptor;
        with ``truncate`` it truncates, so the recorded bytes are kept first)."""
        self.drain_for(rel)
        with self.changing(rel):
            try:
                self.history.check_file(RelPath(rel))
            except Exception:
                # Advisory: a failure here must not keep anyone from their file.
                log.exception("check_file(%r) failed", rel)
            # An O_TRUNC frees space: it goes on even on a full disk.
            kept = _keep_freeing(self.history, RelPath(rel), link=False) if truncate else None
            fd = opener()
            try:
                # check_file above may just have recorded a change made behind
                # the mount: a write must keep that version first.
                s = self._session(rel, fd, preserved=False, dirty=truncate)
                if truncate:
                    self.kept(s._kept, rel, kept)
                return s
            except BaseException:
                os.close(fd)
                raise

    def adopt_new(self, rel: str, fd: int) -> InPlaceSession:
        """A file the caller has just created: nothing recorded to keep."""
        return self._session(rel, fd, preserved=True, dirty=True)

    def adopt_unnamed(self, fd: int) -> InPlaceSession:
        """A file without a name the caller has just created (O_TMPFILE):
        nothing recorded to keep, and nothing to record until ``named``."""
        return self._session(None, fd, preserved=True, dirty=False)

    def named(self, session: WriteSession, rel: str) -> None:
        """The unnamed file of ``session`` was linked in as ``rel``
        (linkat of an O_TMPFILE file): from now on it is an ordinary new
        file, recorded at the writer's next close, fsync or release.  What
        it holds is new under that name: there is nothing to keep first."""
        assert isinstance(session, InPlaceSession)
        with self.stripe(rel):
            session.rel = rel
            session.dirty = session.record_on_flush = True
        with self._lock:
            session._kept.preserved, session._kept.hash = True, None

    def _session(self, rel: str | None, fd: int, *, preserved: bool, dirty: bool) -> InPlaceSession:
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = _Kept()
            kept.preserved, kept.hash = preserved, None
            s = InPlaceSession(self, rel, fd, key, kept, dirty=dirty)
            self._sessions.add(s)
        return s

    def ended(self, session: InPlaceSession) -> None:
        with self._lock:
            self._sessions.discard(session)
            if not any(s.key == session.key for s in self._sessions):
                self._kept.pop(session.key, None)

    def kept(self, kept: _Kept, rel: str, h: str | None) -> None:
        """A preserve of ``rel`` kept the bytes of version ``h`` (None: nothing
        needed keeping).  Kept for good only while the record still names
        ``h``: a record that landed meanwhile sent its notice (``changed``)
        before this check, so its bytes are kept by the next change's own
        preserve.  Any record after the check sends a notice after it."""
        with self._lock:
            if h is None:
                kept.preserved, kept.hash = True, None
                return
            now = self.history.recorded_hash(RelPath(rel))
            kept.preserved = now == h
            kept.hash = h if kept.preserved else None

    def changed(self, rel: str) -> None:
        """The engine recorded something new for ``rel`` (a listener, any
        thread): the next in-place change must keep those bytes first,
        unless they are the ones kept already."""
        with self._lock:
            if not any(s.rel == rel for s in self._sessions):
                return
        # Read before the lock, never under it: the record this notice is
        # for is in the store already, and a later record sends its own.
        try:
            now = self.history.recorded_hash(RelPath(rel))
        except Exception:
            log.exception("recorded_hash(%r) failed", rel)
            now = None
        with self._lock:
            sessions = [s for s in self._sessions if s.rel == rel]
            # Not while the mount is changing the file (a session dirty since
            # its last record): nobody else records it meanwhile, so what
            # changed is a view (a parse landing, say), not the bytes.  Keeping
            # "again" then would take the writer's own half-written state for
            # a change behind the mount and record it (after an O_TRUNC, the
            # empty file) as a version.
            if any(s.dirty for s in sessions):
                return
            for s in sessions:
                if now is None or s._kept.hash != now:
                    s._kept.preserved = False

    # -- changes of names

    def unlink(self, rel: str, target: tuple[int, str, os.stat_result] | None = None) -> Change:
        """An unlink frees space: it goes on even on a full disk, its bytes
        recorded as not kept when they cannot be (``preserve_freeing``).
        ``target``: ``(dir_fd, name, lstat)`` of the file, so that it can be
        held (``_hold``) instead of kept first; ``needs_prepare`` says
        whether it was (or there is nothing to keep)."""
        r = RelPath(rel)
        regular = target is None or stat.S_ISREG(target[2].st_mode)
        held = self._hold(target) if regular else None
        gone = self._drop_held

        def commit() -> None:
            if held is not None:
                try:
                    self.history.keep_held(r, held)
                finally:
                    gone(held)
            self.history.record_unlink(r)

        def prepare() -> None:
            _keep_freeing(self.history, r, link=True)

        def needs_prepare() -> bool:
            return regular and held is None

        return Change(
            self,
            [rel],
            prepare,
            commit,
            needs_prepare,
            done=lambda: self._renamed(rel, None),
            cleanup=lambda: gone(held),
        )

    def rename(
        self,
        old: str,
        new: str,
        *,
        replaces_file: bool,
        exchange: bool = False,
        target: tuple[int, str, os.stat_result] | None = None,
    ) -> Change:
        """``replaces_file``: ``new`` is a file (not a directory) the rename
        replaces; ``target``, its ``(dir_fd, name, lstat)``, lets it be held
        instead of kept first (``_hold``).  ``exchange``: RENAME_EXCHANGE
        (both names stay)."""
        over = replaces_file and not exchange
        held = self._hold(target) if over else None
        gone = self._drop_held

        def prepare() -> None:
            # What was written under either name must be recorded before the
            # rename (a release may still be on its way from the kernel).
            for s in self._dirty_sessions(old, new):
                s.settle()
            if over and held is None:
                self.history.preserve_inode(RelPath(new))

        def done() -> None:
            if exchange:
                self._exchanged(old, new)
            else:
                self._renamed(new, None)  # sessions on the replaced file lose their name
                self._renamed(old, new)

        def commit() -> None:
            if held is not None:
                try:
                    self.history.keep_held(RelPath(new), held)
                finally:
                    gone(held)
            if exchange:
                # Both names still exist, each with the other's bytes.
                for rel in (old, new):
                    try:
                        self.history.check_file(RelPath(rel))
                    except Exception:
                        log.exception("check_file(%r) failed", rel)
                return
            self.history.record_rename(RelPath(old), RelPath(new))

        def needs_prepare() -> bool:
            # Nothing to keep (or it is held) and nothing written under either
            # name: a plain rename goes straight to the kernel (no hop to a
            # thread first).
            return (over and held is None) or bool(self._dirty_sessions(old, new))

        return Change(
            self, [old, new], prepare, commit, needs_prepare, done=done, cleanup=lambda: gone(held)
        )

    def truncate(self, rel: str, size: int | None = None) -> Change:
        """A truncate by path (no open descriptor) to ``size``: one that
        shrinks the file frees space and goes on even on a full disk."""
        r = RelPath(rel)

        def prepare() -> None:
            if size is not None and self._shrinks(rel, size):
                _keep_freeing(self.history, r, link=False)
            else:
                self.history.preserve(r)

        def commit() -> None:
            self.changed(rel)
            try:
                self.history.record_write(r)
            except Exception:
                # Truncated whatever happens here (a store that cannot take
                # the record now): the rescan records it.
                log.exception("record_write(%r) after a truncate failed", rel)

        return Change(self, [rel], prepare, commit)

    def _shrinks(self, rel: str, size: int) -> bool:
        try:
            return size < os.lstat(self.history.abspath(rel)).st_size
        except OSError:
            return False

    def _dirty_sessions(self, *rels: str) -> list[InPlaceSession]:
        with self._lock:
            return [s for s in self._sessions if s.dirty and s.rel in rels]

    def _renamed(self, old: str, new: str | None) -> None:
        with self._lock:
            for s in self._sessions:
                if s.rel is None:
                    continue
                if new is None:
                    if s.rel == old:
                        s.rel = None
                    continue
                moved = _moved(s.rel, old, new)
                if moved is not None:
                    s.rel = moved

    def _exchanged(self, a: str, b: str) -> None:
        with self._lock:
            for s in self._sessions:
                if s.rel is None:
                    continue
                to_b, to_a = _moved(s.rel, a, b), _moved(s.rel, b, a)
                s.rel = to_b if to_b is not None else (to_a if to_a is not None else s.rel)

    # -- who is changing what

    def stripe(self, rel: str) -> threading.Lock:
        return self._stripes[hash(rel) % _STRIPES]

    @contextlib.contextmanager
    def quiet(self) -> Iterator[set[str]]:
        """Every stripe held: nothing through the mount starts changing a file
        (or records one) meanwhile.  Yields the paths being changed right now,
        which the caller leaves alone.  For a short batch commit only."""
        with contextlib.ExitStack() as stack:
            for lock in self._stripes:  # in order, like every other taker
                stack.enter_context(lock)
            yield self.busy_paths()

    def try_enter(self, rel: str) -> bool:
        """``enter([rel])`` if its stripe is free now (no check of a change
        behind the mount is reading a file of it); False, nothing done, if not."""
        lock = self.stripe(rel)
        if not lock.acquire(blocking=False):
            return False
        try:
            self._busy(rel)
        finally:
            lock.release()
        return True

    def enter(self, rels: Iterable[str]) -> None:
        for rel in rels:
            with self.stripe(rel):  # waits out a check_behind of ``rel``
                self._busy(rel)

    def _busy(self, rel: str) -> None:
        with self._lock:
            self._inflight[rel] += 1

    def check_behind(self, rel: str, check: Callable[[RelPath], object]) -> bool:
        """*slow*: ``check(rel)`` for a change seen behind the mount, unless the
        mount is changing ``rel`` right now (it records that itself).  Nothing
        through the mount starts changing ``rel`` while the check reads it, so
        the check never records a state that is half a write through the
        mount.  Whether the check ran."""
        with self.stripe(rel):
            if rel in self.busy_paths():
                return False
            check(RelPath(rel))
            return True

    def leave(self, rels: Iterable[str]) -> None:
        with self._lock:
            self._inflight.subtract(rels)
            for r in [r for r, n in self._inflight.items() if n <= 0]:
                del self._inflight[r]

    def changing(self, rel: str) -> _Changing:
        return _Changing(self, rel)

    def busy(self, rels: Iterable[str]) -> set[str]:
        """Which of ``rels`` are being changed right now (the caller records
        them when done): the change feed and the rescan leave them alone."""
        now = self.busy_paths()
        return {r for r in rels if r in now}

    def busy_paths(self) -> set[str]:
        with self._lock:
            out = set(self._inflight)
            out.update(s.rel for s in self._sessions if s.dirty and s.rel is not None)
        return out

    def unrecorded(self, rel: str) -> bool:
        """Cheap: whether the mount holds changes to ``rel`` that are not
        recorded yet (a session written since its last record, or a change
        in the middle of being made).  A view of ``rel`` is not current
        meanwhile (``Workspace.settled``)."""
        with self._lock:
            if self._inflight.get(rel, 0) > 0:
                return True
            return any(s.dirty and s.rel == rel for s in self._sessions)

    def open_paths(self) -> set[str]:
        """Paths open for writing now (written to or not)."""
        with self._lock:
            return {s.rel for s in self._sessions if s.rel is not None}

    def report(self) -> list[str]:
        """Open sessions, for the daemon's SIGUSR1 dump."""
        with self._lock:
            lines = [f"write sessions: {len(self._sessions)} open, {len(self._inflight)} changing"]
            lines += [
                f"  {s.rel} dirty={s.dirty} preserved={s._kept.preserved}"
                for s in list(self._sessions)[:50]
            ]
        lines.append(treecache.CACHE.report())
        return lines


def _keep_freeing(history: History, rel: RelPath, *, link: bool) -> str | None:
    """Keep ``rel``'s bytes before a change that frees space (an unlink with
    ``link``, a truncate that shrinks): as any other change would, and on a
    full disk through ``preserve_freeing``, which never fails for want of
    space (it spends the store's reserve, or records the bytes as not kept)."""
    try:
        if link:
            history.preserve_inode(rel)
            return None
        return history.preserve(rel)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
    return history.preserve_freeing(rel, link=link)


class _Changing:
    """``with writes.changing(rel):`` marks ``rel`` busy for a block."""

    def __init__(self, writes: InPlaceWrites, rel: str) -> None:
        self._writes, self._rel = writes, rel

    def __enter__(self) -> None:
        self._writes.enter([self._rel])

    def __exit__(self, *exc: object) -> None:
        self._writes.leave([self._rel])
