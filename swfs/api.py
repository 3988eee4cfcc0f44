"""The engine's public contract: the types the daemon, the CLI and tests use.

``mountd`` only ever talks to the engine through these types: ``EngineAPI``
and its parts, ``WorkspaceAPI`` (``engine.workspace``), ``ViewsAPI``
(``engine.views``), ``ReviewsAPI`` (``engine.reviews``) and
``SearchIndexAPI`` (``engine.search_index``).  A world
(``swfs.history.world``) offers the same parts.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NewType, Protocol

Hash = NewType("Hash", str)  # lowercase hex blake3, 64 characters
RelPath = NewType("RelPath", str)  # '/'-separated, relative to the workspace root, no '..'

XATTR_PREFIX = "user.sw."
STORE_NAME = ".swfs"  # a workspace's store, inside SRC unless --store says otherwise
# The generated trees' names at the mount's root: never part of the workspace.
RESERVED_ROOTS = frozenset({".parsed", ".review", ".versions", ".search", ".render", ".tab"})
BASELINE = "baseline"  # the name of the present baseline wherever a snapshot is named


def world_of(path: str | os.PathLike[str]) -> str | None:
    """The world a mount point shows (its root's ``user.sw.world``), or None."""
    try:
        return os.getxattr(path, XATTR_PREFIX + "world").decode("utf-8", "surrogateescape")
    except OSError:
        return None


class WorkspaceError(Exception):
    """A user-facing error: names the path and the cause."""


class Freshness(enum.StrEnum):
    CURRENT = "current"
    STALE = "stale"
    PENDING = "pending"
    FAILED = "failed"
    UNSUPPORTED = "unsupported"


class ChangeStatus(enum.StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"


class Cause(enum.StrEnum):
    BASELINE = "baseline"
    WRITE = "write"
    RENAME = "rename"
    UNLINK = "unlink"
    EXTERNAL = "external"
    RESTORE = "restore"
    SCAN = "scan"


@dataclass(frozen=True)
class FileState:
    """A native file as the engine last saw it."""

    rel: RelPath
    hash: Hash | None  # None: not hashed (e.g. not a regular file)
    freshness: Freshness
    versions: int
    baseline_hash: Hash | None


@dataclass(frozen=True)
class Access:
    """Owner and mode bits a synthetic node inherits from its source file
    (last known ones for a file that is gone)."""

    uid: int
    gid: int
    mode: int  # st_mode permission bits (& 0o7777)


class UnitTooLarge(Exception):
    """``view_unit(..., limit=N)``: the unit's stored text is longer than N
    bytes; the caller reads it where a long read harms nobody."""


@dataclass(frozen=True)
class RenderedUnit:
    """One file under ``.parsed/<rel>/``: its bytes are final (header included)."""

    name: str
    locator: str  # '<rel>#page=7'
    content: bytes
    # The state the unit was rendered with, where it is not its view's: a
    # unit of a view parsed range by range is current once parsed, pending
    # before (swfs.ranged); its header and xattrs say so.
    state: ViewState | None = None


@dataclass(frozen=True)
class ParsedView:
    """Everything ``.parsed/<rel>/`` shows, consistent with one file-table state."""

    rel: RelPath
    freshness: Freshness
    current_hash: Hash | None
    source_hash: Hash | None  # the hash the units were made from (None: no view)
    parser: str | None  # 'pdf@1'
    error: str | None  # the one-line reason when failed
    units: Sequence[RenderedUnit] = field(default_factory=tuple)


@dataclass(frozen=True)
class ViewState:
    """What ``.parsed/<rel>/`` is, without its units: enough to list them
    (``view_unit_names``) and to serve one (``view_unit``) at a cost that does
    not grow with the document."""

    rel: RelPath
    freshness: Freshness
    current_hash: Hash | None
    source_hash: Hash | None  # the hash the units were made from (None: no view)
    parser: str | None  # the parser key of that parse
    error: str | None  # the one-line reason when failed
    # Pending, parsed range by range and some ranges in (swfs.ranged): its
    # units are listed, each current once parsed.
    partial: bool = False


@dataclass(frozen=True)
class ReviewEntry:
    rel: RelPath  # current path (the baseline path for a deletion)
    status: ChangeStatus
    baseline_hash: Hash | None
    current_hash: Hash | None
    old_rel: RelPath | None = None  # for renames


@dataclass(frozen=True)
class Version:
    number: int  # 1-based, per path
    hash: Hash
    recorded_at: float  # unix time
    cause: Cause
    available: bool  # bytes exist (current file or a blob)
    size: int | None = None
    # The file's owner, group and mode when this version was recorded
    # (owner-only when the record kept none: swfs.permissions).
    access: Access | None = None
    # Why its bytes were not kept, when a change that frees space (a delete
    # or truncate on a full disk) went on without them: "disk full".
    not_kept: str | None = None


class BlobBytes(Protocol):
    """Random access to a blob's bytes without a file of them
    (``swfs.store.blobs.BlobReader``)."""

    size: int

    def pread(self, size: int, offset: int) -> bytes: ...


class RecordedHash(Protocol):
    """The record a close queued (``WriteSession.flush_later``): made off the
    reply path; ``hash`` is what it recorded once ``wait`` returns."""

    hash: str | None

    def wait(self) -> None:
        """*slow*: until the record is made (or it failed: ``hash`` None)."""
        ...


class WriteSession(Protocol):
    """One open-for-writing of a native file (``swfs.history.writesession``): the
    daemon calls it for every change and holds no history policy itself."""

    rel: str | None  # the file's present name (None once unlinked)
    fd: int  # what reads and fstat go to
    dirty: bool  # changed since the last record, by an O_TRUNC open too
    record_on_flush: bool  # written since the last record: a close records it
    queued: RecordedHash | None  # the last record a close queued (None: none queued)

    @property
    def needs_preserve(self) -> bool:
        """Cheap: the next write must first keep bytes (call ``preserve``)."""
        ...

    def preserve(self) -> None:
        """*slow*; OSError (ENOSPC, EIO) when the bytes cannot be kept."""
        ...

    def write(self, off: int, buf: bytes) -> int: ...
    def truncate(self, size: int) -> None: ...
    def fallocate_changes(self, mode: int, off: int, length: int) -> bool:
        """Cheap: whether ``fallocate`` would change what the file reads as
        (then it must keep bytes first, as a write: ``needs_preserve``)."""
        ...

    def fallocate(self, mode: int, off: int, length: int) -> None:
        """fallocate(2); as a write where it changes what the file reads as."""
        ...

    def flush(self) -> None:
        """*slow*: one of the writer's descriptors was closed: record a write."""
        ...

    def flush_later(self) -> bool:
        """``flush`` on the calling thread, without waiting: the close's
        record is queued, made off the reply path in order with the changes
        of names around it; False, nothing done, where it cannot be (then
        ``flush`` in a worker thread)."""
        ...

    def sync(self, datasync: bool) -> None:
        """*slow*: fsync, then record."""
        ...

    def release(self) -> None:
        """*slow*: the last descriptor is gone: close, record, end."""
        ...

    def release_later(self) -> bool:
        """``release`` on the calling thread, its record queued as
        ``flush_later``'s; False, nothing done, where it cannot be."""
        ...


class Change(Protocol):
    """An unlink, a rename or a truncate by path (``swfs.history.writesession.Change``)."""

    def needs_prepare(self) -> bool:
        """*fast*: whether ``prepare`` has anything to do now."""
        ...

    def prepare(self) -> None: ...
    def commit(self) -> None: ...
    def commit_later(self) -> None:
        """*fast*: the change happened; its record is queued, made in order
        off the reply path (``swfs.history.recorder``)."""
        ...

    def abort(self) -> None: ...
    def run(self, do: Callable[[], Any]) -> Any: ...


class WriteProtocol(Protocol):
    """The engine's owner of a native file's history while it changes."""

    def begin_write(self, rel: str, opener: Callable[[], int], *, truncate: bool) -> WriteSession:
        """*slow*"""
        ...

    def adopt_new(self, rel: str, fd: int) -> WriteSession: ...
    def adopt_unnamed(self, fd: int) -> WriteSession:
        """A file created without a name (O_TMPFILE): nothing recorded."""
        ...

    def named(self, session: WriteSession, rel: str) -> None:
        """``session``'s unnamed file was linked in as ``rel``: a new file."""
        ...

    def unlink(self, rel: str, target: tuple[int, str, os.stat_result] | None = None) -> Change:
        """``target``: the file's ``(dir_fd, name, lstat)``, so that what it
        holds can be held by a hard link instead of kept first."""
        ...

    def rename(
        self,
        old: str,
        new: str,
        *,
        replaces_file: bool,
        exchange: bool = False,
        target: tuple[int, str, os.stat_result] | None = None,
    ) -> Change: ...
    def drain(self) -> None:
        """*slow*: wait until every queued record is made (before an fsync)."""
        ...

    def queued_for(self, rel: str | None) -> bool:
        """Cheap: whether a queued record may change what the store says of
        ``rel`` (a close's or a change of names', made after its reply)."""
        ...

    def drain_for(self, rel: str | None) -> None:
        """*slow*: ``drain`` where a queued record may concern ``rel``."""
        ...

    def truncate(self, rel: str, size: int | None = None) -> Change:
        """A truncate by path to ``size`` (None: not known): one that
        shrinks the file always succeeds (``preserve_freeing``)."""
        ...

    def changing(self, rel: str) -> AbstractContextManager[None]:
        """Marks ``rel`` as being changed for a block (the change feed and the
        rescan leave it to the caller's record)."""
        ...

    def busy(self, rels: Iterable[str]) -> set[str]: ...
    def check_behind(self, rel: str, check: Callable[[RelPath], object]) -> bool:
        """*slow*: ``check(rel)`` unless the mount is changing ``rel``; nothing
        through the mount starts changing it meanwhile."""
        ...

    def report(self) -> list[str]: ...


class SharedFiles(Protocol):
    """What the render cache asks of a shared cache (swfs.store.sharedcache)."""

    def get_file(self, h: str, name: str) -> bytes | None: ...
    def put_file(self, h: str, name: str, data: bytes) -> None: ...
    def describe(self) -> str: ...


class WorkspaceAPI(Protocol):
    """What the daemon calls.  All methods are synchronous and fast unless noted;
    the ones marked *slow* may hash or copy file contents and must be run in a
    thread by async callers."""

    @property
    def src(self) -> Path:
        """The workspace root."""
        ...

    @property
    def store_dir(self) -> Path:
        """Where the workspace's store lives (SRC/.swfs unless --store)."""
        ...

    @property
    def shared_cache(self) -> SharedFiles | None:
        """The shared parse cache (``--cache``), if any (docs/scale.md)."""
        ...

    @property
    def writes(self) -> WriteProtocol:
        """The write protocol: every change the daemon makes to a native file
        goes through it (``swfs.history.writesession``)."""
        ...

    def abspath(self, rel: str) -> str:
        """The file whose bytes the mount serves for ``rel`` (a staged
        mount's staged copy)."""
        ...

    def other_names(self, rel: str, st: os.stat_result) -> list[str]:
        """The workspace's other names of the file ``st`` (hard links)."""
        ...

    def scan(self) -> object:
        """*slow*: bring the file table up to date with SRC (the rescan)."""
        ...

    # -- native files
    def file_state(self, rel: RelPath) -> FileState | None: ...
    def freshness(self, rel: RelPath) -> Freshness | None:
        """``file_state(rel).freshness`` without counting versions: what every
        open in ``.parsed`` asks."""
        ...

    def settled(self, rel: RelPath) -> bool:
        """Cheap (no hashing): whether ``rel`` surely holds the bytes its
        record names: no writer holds unrecorded changes to it and its stat
        signature is the recorded one.  No view of it is current otherwise."""
        ...

    def is_unchanged(self, rel: RelPath, st: os.stat_result) -> bool:
        """Fast (no hashing): does ``st`` match the stat signature the engine
        recorded for ``rel``?  If not, the caller runs ``check_file``."""
        ...

    def unchanged_hash(self, rel: RelPath, st: os.stat_result) -> str | None:
        """Fast (no hashing): the content hash recorded for ``rel`` when ``st``
        matches the stat signature recorded with it, else None (then the
        caller runs ``check_file``).  An open asks this once, and the access
        journal takes the hash from it rather than looking it up again."""
        ...

    def check_file(self, rel: RelPath) -> FileState | None:
        """*slow*: stat-check ``rel`` against the file table; rehash and record an
        external change if the stat signature moved.  None if not a regular file."""
        ...

    def preserve(self, rel: RelPath) -> str | None:
        """*slow*: before bytes of ``rel`` are overwritten in place or truncated,
        make sure its recorded version's bytes are kept.  Raises OSError
        (ENOSPC) if they cannot be.  Returns the hash of the version kept,
        None when none needed keeping."""
        ...

    def recorded_hash(self, rel: RelPath) -> str | None:
        """The hash ``rel``'s record names now (cheap: one store lookup)."""
        ...

    def preserve_freeing(self, rel: RelPath, *, link: bool) -> str | None:
        """*slow*: ``preserve`` (``link``: ``preserve_inode``) before a change
        that frees space (a delete, a truncate), which always goes on: on a
        full disk the store's reserve is spent to keep the bytes, and when
        even that is not enough the version is recorded as not kept (disk
        full) instead of failing.  The hash of the version dealt with."""
        ...

    def preserve_inode(self, rel: RelPath) -> None:
        """*slow*: before ``rel`` is unlinked or renamed over: keep its bytes (by
        hard link where possible)."""
        ...

    def record_write(self, rel: RelPath, *, fd: int | None = None) -> FileState | None:
        """*slow*: after a written file is closed, released or fsynced: rehash,
        record a version if the hash changed, mark the view stale and queue a
        re-parse.  ``fd``: a readable descriptor of the file, which is read
        instead of whatever ``rel`` names now (a record made later, off the
        reply path, records the bytes of the file that was written; nobody
        waits for its state, and None is returned)."""
        ...

    def record_rename(self, old: RelPath, new: RelPath) -> None: ...
    def record_unlink(self, rel: RelPath) -> None: ...

    def blob_path(self, h: Hash) -> str | None:
        """*slow*: a readable path holding blob ``h``, or None if not kept."""
        ...

    def blob_ref(self, h: Hash) -> str | None:
        """Like ``blob_path`` but cheap (see ``version_ref``)."""
        ...

    def blob_size(self, h: Hash) -> int | None:
        """The size of blob ``h`` without reading it; None if not kept."""
        ...

    def open_blob(self, path: str) -> int:
        """*slow*: a read-only descriptor on a path ``version_ref`` or
        ``blob_ref`` gave (a chunked blob is reassembled on first use)."""
        ...

    def open_blob_reading(self, path: str) -> int | BlobBytes:
        """*slow*: ``open_blob``, or on a disk too full to reassemble the
        blob, a reader of its chunks (``pread(size, offset)``): reading
        history never needs free space."""
        ...


class HistoryAPI(Protocol):
    """Versions and snapshots as the daemon reads them (``.versions``,
    ``.snapshots``): the engine's ``history`` part
    (``swfs.history.part.History``, which also takes snapshots, sets the
    baseline and restores for the CLI and the control socket)."""

    def versioned_paths(self) -> Iterable[RelPath]: ...
    def has_versions(self, rel: RelPath) -> bool:
        """Cheap (one record): ``rel`` is among ``versioned_paths``."""
        ...

    def versions(self, rel: RelPath) -> Sequence[Version]: ...
    def version_file(self, rel: RelPath, number: int) -> str | None:
        """*slow*: a readable path holding that version's bytes (a blob), or
        None when its bytes are not kept.  For the current version this may be
        a preserved blob or None; the daemon then serves the native file."""
        ...

    def snapshots(self) -> Sequence[str]: ...
    def snapshot_manifest(self, name: str) -> dict[RelPath, Hash]: ...
    def version_ref(self, rel: RelPath, number: int) -> str | None:
        """Like ``version_file`` but cheap, for lookups: the path may not
        exist until ``open_blob`` opens it (a chunked blob is reassembled
        then, in the daemon's worker thread, not on its loop)."""
        ...

    def pin_version(self, rel: RelPath) -> None:
        """Keep ``rel``'s present version even if the same burst of rewrites
        goes on (see ``swfs.history.versioning``); an fsync no longer pins."""
        ...


class EvidenceAPI(Protocol):
    """Who may read what the mount shows, now and as recorded in the past,
    and the mount's access journal: the engine's ``evidence`` part
    (``swfs.evidence.part.Evidence``)."""

    def access(self, rel: RelPath) -> Access | None:
        """Owner and permission bits for synthetic nodes derived from ``rel``;
        for '' (the workspace root) those of the root directory."""
        ...

    def content_access(self, rel: RelPath, h: str | None) -> Access:
        """Owner and bits for content ``h`` of ``rel`` that may be older than
        the file (a stale view's units): who could read it when it was
        recorded and can now (swfs.permissions)."""
        ...

    def snapshot_accesses(self, name: str) -> dict[RelPath, Access]:
        """Owner, group and mode of every file and folder ('' the root) of
        snapshot ``name`` as it recorded them; owner-only where it recorded
        none.  Not narrowed by the present ones (swfs.permissions does)."""
        ...

    def attach_journal(
        self, health: Callable[[], dict[str, Any]], acknowledge: Callable[[], None]
    ) -> None:
        """The mount's access journal, for the control socket to ask after
        (a world's engine keeps none and ignores it)."""
        ...


class Service(Protocol):
    """Background work the daemon's lifecycle starts with
    ``nursery.start(service.run)`` and ends with ``stop()``."""

    async def run(self, *, task_status: Any) -> None: ...
    def stop(self) -> None: ...


class SearchIndexAPI(Protocol):
    """The search index as the daemon sees it (``swfs.find.search.SearchIndex``)."""

    @property
    def generation(self) -> int:
        """Bumped after every commit of the index: an answer kept from an
        older generation is stale."""
        ...


class ViewsAPI(Protocol):
    """The parsed views (``.parsed``): the engine's ``views`` part."""

    def parsed_paths(self) -> Iterable[RelPath]:
        """Every file that has a directory under .parsed (supported formats)."""
        ...

    def parsed_view(self, rel: RelPath) -> ParsedView | None:
        """The view with every unit rendered (``swfs show``); the daemon
        serves units one at a time with the three methods below."""
        ...

    def view_state(self, rel: RelPath) -> ViewState | None:
        """``parsed_view`` without its units: what serving one unit needs.
        Costs the same for a 40-page and a 24,000-page document."""
        ...

    def view_unit_names(self, view: ViewState, *, limit: int | None = None) -> Sequence[str]:
        """The names of the units ``view`` shows, in document order.  With
        ``limit``, UnitTooLarge when there are more than that."""
        ...

    def view_unit(
        self, view: ViewState, name: str, *, limit: int | None = None
    ) -> RenderedUnit | None:
        """One unit of ``view``, rendered, read without the others.  With
        ``limit``, UnitTooLarge when its stored text is longer than that."""
        ...

    def parse_progress(self, rel: str) -> str:
        """How far the parse of ``rel`` has got, in words."""
        ...

    async def wait_view(self, rel: RelPath, limit: float, unit: str | None = None) -> None:
        """Move ``rel`` to the front of the parse queue and wait, at most
        ``limit`` seconds, until its view is neither pending nor stale; or
        for a view parsed range by range, until its units are listed and,
        with ``unit``, that one is parsed."""
        ...


class ReviewsAPI(Protocol):
    """The change set against the baseline (``.review``): the engine's
    ``reviews`` part."""

    def review(self) -> Sequence[ReviewEntry]: ...
    def review_summary(self) -> bytes: ...
    def review_all_diff(self) -> bytes: ...
    def review_diff(self, rel: RelPath) -> bytes | None: ...
    def review_lists(self, rel: RelPath) -> bool:
        """Cheap (no change set is computed): ``rel`` is a file whose bytes
        are not the baseline's at that path, so ``.review`` lists its diff
        under its own path (added, modified or renamed to it).  False when
        it may not (deleted, unchanged, reverted, unknown)."""
        ...

    def review_access(self) -> Access:
        """Owner and bits for SUMMARY.md and ALL.diff: the root's, narrowed so
        that only those who may read every diff (``review_diff_access``)
        may read them."""
        ...

    def review_diff_access(self, rel: RelPath) -> Access:
        """Owner and bits for ``.review/<rel>.diff``: who could read the file
        at the baseline and can now (swfs.permissions)."""
        ...


class EngineAPI(Protocol):
    """The workspace plus its background work, as the daemon drives it: its
    parts, each behind its own interface, and what runs them."""

    @property
    def src(self) -> Path:
        """The workspace root."""
        ...

    @property
    def store_dir(self) -> Path:
        """Where the workspace's store lives (SRC/.swfs unless --store)."""
        ...

    @property
    def workspace(self) -> WorkspaceAPI:
        """Native files, their records, the write protocol, kept bytes."""
        ...

    @property
    def history(self) -> HistoryAPI:
        """Versions, snapshots, the baseline and restore."""
        ...

    @property
    def evidence(self) -> EvidenceAPI:
        """Who may read what, and the mount's access journal."""
        ...

    @property
    def views(self) -> ViewsAPI:
        """The parsed views."""
        ...

    @property
    def reviews(self) -> ReviewsAPI:
        """The change set against the baseline."""
        ...

    # -- optional features, declared, never probed: None where this engine
    # has none.  A world (one fixed past state) has no search index, no staged
    # layer and keeps no access journal of its own; the live engine is no world.
    @property
    def search_index(self) -> SearchIndexAPI | None:
        """The search index; when there is one, ``search(query, caller,
        limit)`` answers from it."""
        ...

    @property
    def staging(self) -> object | None:
        """The staged layer of a ``--staged`` mount
        (``swfs.history.staging.Staging``)."""
        ...

    @property
    def world_name(self) -> str | None:
        """The world shown (``swfs mount --at``); None for the live workspace."""
        ...

    async def run_background(self, *, task_status: Any = ...) -> None:
        """Parse workers, the re-parse queue and the periodic rescan.  Runs until
        cancelled; calls ``task_status.started()`` once ready."""
        ...

    def control_server(self) -> Service:
        """The control socket as background work (``run()``/``stop()``),
        started by the daemon's lifecycle once ``run_background`` is ready."""
        ...

    def add_listener(self, fn: Callable[[RelPath], None]) -> None:
        """``fn(rel)`` is called from the trio thread whenever what the engine
        shows for ``rel`` changed (new hash, new view, new freshness), so the
        daemon can invalidate kernel caches."""
        ...

    def queue_report(self) -> list[str]:
        """The parse queue as lines of text (the daemon's SIGUSR1 dump)."""
        ...

    def scan(self) -> object:
        """*slow*: bring the file table up to date with SRC (the rescan)."""
        ...
