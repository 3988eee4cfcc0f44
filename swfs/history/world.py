"""A world: the workspace, read-only, as it was at a snapshot or submission
(``swfs mount --at NAME``).

The engine side of a world answers what the engine API answers for the
generated trees, from the snapshot's manifest instead of the live file
table: ``.parsed`` serves the parses of the manifest's hashes from the
hash-keyed parse cache (a hash the cache lacks is parsed on demand from its
blob, and the result is kept in this process only), ``.review`` compares the
snapshot with the baseline that was in force when the snapshot was taken.

A world runs beside the live daemon of the same store.  It never writes
the store: the LMDB environment is opened with ``MDB_RDONLY``
(``swfs.store.readonly``), it takes no daemon lock and serves no control
socket.  File bytes come from the blob store (reassembled into its
disposable ``cache/``) or, for a baseline file whose bytes were never
copied, from SRC while the live file still has that hash.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import trio

from swfs import permissions
from swfs.api import (
    Access,
    FileState,
    Freshness,
    Hash,
    RelPath,
    Service,
    SharedFiles,
    UnitTooLarge,
    Version,
    WorkspaceError,
)
from swfs.history import snapshots as history
from swfs.history.config import Config
from swfs.review.reviews import Reviewable, Reviews
from swfs.store.blobreads import BlobReads
from swfs.store.blobs import BlobStore, Manifest
from swfs.store.fsutil import hash_fd, open_to_read, write_all_at
from swfs.store.hashform import label as short_hash
from swfs.store.readonly import ReadOnlyStore
from swfs.store.records import (
    FileRecord,
    ParseRecord,
    Store,
    StoreError,
    UnitInfo,
    UnitText,
    stat_signature,
)
from swfs.store.reserve import is_no_space
from swfs.views import files as views
from swfs.views.parsework import FAILED, OK, ParseOutcome, ParsePool
from swfs.views.ranged import PartialParse
from swfs.views.serving import Views

log = logging.getLogger(__name__)

# Files up to this size are served from memory (see World._open_blob_bytes).
MEMORY_FILE_MAX = 64 << 20
# The memory files kept between opens, least recently used out beyond this.
MEMORY_CACHE_BYTES = 256 << 20
_PAGE = 4096
_HASH_AT = len(b'{"h":"')  # where a file record's hash starts, after its signature line


@dataclass(frozen=True)
class WorldInfo:
    name: str  # as given: a snapshot, a submission or "baseline"
    kind: str  # snapshot, submission, baseline
    at: float | None  # when it was taken
    files: int
    baseline: str  # the name of the baseline .review compares with
    baseline_at: float | None


class _Writes:
    """The write protocol of a world: every change is EROFS."""

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def _refuse(*_: Any, **__: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    begin_write = adopt_new = adopt_unnamed = named = unlink = rename = truncate = _refuse

    @contextmanager
    def changing(self, rel: str) -> Iterator[None]:
        yield

    def busy(self, rels: Iterable[str]) -> set[str]:
        return set()

    def drain(self) -> None:
        """Nothing is ever queued in a world."""

    def queued_for(self, rel: str | None) -> bool:
        return False

    def drain_for(self, rel: str | None) -> None:
        """Nothing is ever queued in a world."""

    @staticmethod
    def check_behind(rel: str, check: Callable[[RelPath], object]) -> bool:
        check(RelPath(rel))
        return True

    def report(self) -> list[str]:
        return [f"world {self.name}: read-only, no write sessions"]


class _StoreView:
    """The store as ``swfs.review.changes`` reads it in a world: the file table is the
    snapshot's, the baseline is the one of then."""

    def __init__(self, store: ReadOnlyStore, world: World) -> None:
        self._store, self._world = store, world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def all_files(self) -> dict[str, FileRecord]:
        return dict(self._world.records)

    def get_file(self, rel: str, txn: Any = None) -> FileRecord | None:
        return self._world.records.get(rel)

    def get_file_hash(self, rel: str) -> str | None:
        rec = self._world.records.get(rel)
        return None if rec is None else rec.hash

    def get_meta(self, key: str, default: Any = None) -> Any:
        if key == "baseline_at":
            return self._world.info.baseline_at
        if key == "baseline_dir_modes" and self._world.info.baseline != history.BASELINE:
            return default  # the present baseline's folders, not those of then
        return self._store.get_meta(key, default)


class World(BlobReads):
    """Implements ``swfs.api.EngineAPI`` for a read-only world."""

    def __init__(self, src: Path, store_dir: Path, name: str, *, config: Config | None = None):
        self.src = Path(src).resolve()
        self.store_dir = Path(store_dir).resolve()
        self.config = config or Config()
        # A world parses nothing through a shared cache, and runs no parse job.
        self.shared_cache: SharedFiles | None = None
        self.parse_runs = 0
        try:
            self.store = ReadOnlyStore(self.store_dir)
        except StoreError as exc:
            raise WorkspaceError(str(exc)) from None
        try:
            self.blobs = BlobStore(self.store_dir / "blobs")
            self._open(name)
        except BaseException:
            self.store.close()
            raise
        self.writes = _Writes(name)
        self.memory = MemoryFiles(MEMORY_CACHE_BYTES)
        self._view = _StoreView(self.store, self)
        self._parsed: dict[tuple[str, str], ParseOutcome] = {}  # parsed here, on demand
        self._parses = _WorldParses(self.store, self._parsed)
        self._wanted: dict[str, trio.Event] = {}
        self._send: trio.MemorySendChannel[str] | None = None
        self._landed = 0  # parses made here so far: the views and the review move with it
        # The engine's parts (swfs.api.EngineAPI): the views are the live
        # workspace's code over the snapshot's records; the rest is the world.
        self.views = Views(
            _WorldSource(self), progress=self._progress, wait=self._wait_view, world=name
        )
        self.reviews = Reviews(self._as_ws(), self.access, header=self._review_header)
        self.workspace = self.history = self.evidence = self

    # -- what the world is
    def _open(self, name: str) -> None:
        store = self.store
        if name == history.BASELINE:
            manifest = store.get_meta("baseline")
            if manifest is None:
                raise WorkspaceError("baseline: this workspace has no baseline yet")
            kind, at = history.KIND_BASELINE, store.get_meta("baseline_at")
            dirs = store.get_meta("baseline_dirs") or []
            dir_modes = store.get_meta("baseline_dir_modes")
        else:
            snap = name
            manifest = store.get_snapshot(name)
            if manifest is None:
                sub = history.get_submission(cast("history.Recorded", self), name)
                if sub is not None:
                    snap, manifest = sub.snapshot, store.get_snapshot(sub.snapshot)
            if manifest is None:
                raise WorkspaceError(
                    f"{name!r}: no such snapshot or submission "
                    "(`swfs snapshots` and `swfs submissions` list them; `baseline` is one too)"
                )
            info = history.snapshot_info(cast("history.Recorded", self), snap)
            kind, at, dirs = str(info.get("kind")), info.get("at"), list(info.get("dirs") or [])
            dir_modes = info.get("dir_modes")
        self.manifest: dict[str, list[Any]] = manifest
        self.dirs: list[str] = dirs
        # Owner, group and mode of every file and folder as the snapshot
        # recorded them; owner-only where it recorded none (swfs.permissions).
        self.accesses = history.recorded_accesses(
            manifest, dir_modes, functools.partial(permissions.owner_only, self.store_dir)
        )
        for d in dirs:
            head = d
            while head and head not in self.accesses:
                self.accesses[head] = permissions.owner_only(self.store_dir, directory=True)
                head = head.rpartition("/")[0]
        base_name, base_at, base = self._baseline_of(name, kind, at)
        self.baseline = base
        self.info = WorldInfo(name, kind, at, len(manifest), base_name, base_at)
        self.records = self._records(manifest, at)

    def _baseline_of(
        self, name: str, kind: str, at: float | None
    ) -> tuple[str, float | None, dict[str, list[Any]]]:
        """The baseline in force when the world was taken: the present one if
        it is older, else the latest former baseline kept before then."""
        store = self.store
        if kind == history.KIND_BASELINE:
            return name, at, self.manifest  # a baseline against itself
        present_at = store.get_meta("baseline_at")
        present = store.get_meta("baseline") or {}
        if at is None or present_at is None or present_at <= at:
            return history.BASELINE, present_at, present
        best: tuple[float, str] | None = None
        for snap in store.snapshot_names():
            info = history.snapshot_info(cast("history.Recorded", self), snap)
            t = info.get("at")
            if info.get("kind") == history.KIND_BASELINE and t is not None and t <= at:
                best = max(best or (t, snap), (t, snap))
        if best is None:  # none kept from then: the present one, said in SUMMARY.md
            return history.BASELINE, present_at, present
        return best[1], best[0], store.get_snapshot(best[1]) or {}

    def _records(self, manifest: dict[str, list[Any]], at: float | None) -> dict[str, FileRecord]:
        """File records for the manifest.  A manifest keeps no times: a file
        gets the modification time of the live file if that still has the
        same content, else the time its version was recorded, else the
        snapshot's time.  One pass over the file table that decodes only each
        record's stat signature and hash (a world of 11,000 files opens in
        a fraction of a second); versions are read for changed files only."""
        live = self._live_times()
        default_ns = int((at or time.time()) * 1e9)
        out = {}
        for rel, (h, size, mode, uid, gid, parser, *_) in manifest.items():
            cur = live.get(rel)
            if cur is not None and cur[0] == h:
                mtime_ns = cur[1]
            else:
                mtime_ns = default_ns
                for _, vh, recorded_at, *_ in self.store.get_versions(rel):
                    if vh == h and (at is None or recorded_at <= at + 1.0):
                        mtime_ns = int(recorded_at * 1e9)
            out[rel] = FileRecord(
                hash=h, size=int(size or 0), mtime_ns=mtime_ns, ctime_ns=mtime_ns, ino=0,
                mode=mode, uid=uid, gid=gid, parser=parser,
            )  # fmt: skip
        return out

    def _live_times(self) -> dict[str, tuple[str, int]]:
        """path -> (hash, mtime_ns) of the live file table."""
        out: dict[str, tuple[str, int]] = {}
        with self.store.read() as txn:
            for key, raw in txn.cursor(db=self.store.dbs["files"]):
                data = bytes(raw)
                nl = data.find(b"\n")
                start = nl + 1 + _HASH_AT
                h = data[start : start + 64].decode("ascii", "replace")
                try:
                    mtime_ns = int(data[:nl].split(b",")[1])
                except (IndexError, ValueError):
                    continue
                out[Store.file_path_of(key, raw)] = (h, mtime_ns)
        return out

    # -- the engine's optional features a world has not (swfs.api.EngineAPI)
    search_index = None
    staging = None

    @property
    def world_name(self) -> str:
        return self.info.name

    def attach_journal(
        self, health: Callable[[], dict[str, Any]], acknowledge: Callable[[], None]
    ) -> None:
        pass  # a world's engine keeps no journal: it serves no control socket

    def abspath(self, rel: str) -> str:
        return os.path.join(self.src, rel) if rel else str(self.src)

    def other_names(self, rel: str, st: os.stat_result) -> list[str]:
        return []  # no staged layer asks

    def close(self) -> None:
        self.memory.close()
        self.store.close()

    # -- native bytes
    def open_file(self, rel: str) -> int:
        """*slow*: a read-only descriptor holding ``rel``'s bytes as of the world."""
        rec = self.records.get(rel)
        if rec is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), rel)
        if self.blobs.has(rec.hash):
            return self._open_blob_bytes(rec.hash, rec.size)
        # A baseline file never copied: the live file, while it has that hash.
        live = self.store.get_file(rel)
        if live is not None and live.hash == rec.hash:
            fd = open_to_read(os.path.join(self.src, rel), os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                if stat_signature(st) == live.signature() or hash_fd(fd) == rec.hash:
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        log.warning("%s: bytes of %s as of %s are not kept", rel, short_hash(rec.hash), self.info)
        raise OSError(errno.EIO, f"{rel}: its bytes as of {self.info.name} are not kept")

    def _open_blob_bytes(self, h: str, size: int) -> int:
        """*slow*: blob ``h`` in an anonymous memory file, reassembled from
        its chunks (each checked against its hash as it is read), holes left
        as holes, and kept for the next open (``MemoryFiles``).  The blob
        store's ``cache/`` is not used for these: a tree walk would
        reassemble thousands of files there.  Large blobs are opened from
        the blob store as ``.versions`` opens them."""
        fd = self.memory.get(h)
        if fd is not None:
            return fd
        manifest = self.blobs.manifest(h)
        if size > MEMORY_FILE_MAX:
            try:
                return self.blobs.open(h)
            except OSError as exc:
                if not is_no_space(exc):
                    raise
            # No room on the disk to reassemble it: in memory for this open
            # only (reading history never needs free space).
            return self._reassemble(h, manifest)
        return self.memory.put(h, manifest.size, self._reassemble(h, manifest))

    def _reassemble(self, h: str, manifest: Manifest) -> int:
        reader = self.blobs.reader(h)
        fd = os.memfd_create(f"swfs-world-{h[:16]}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, manifest.size)
            for e in manifest.extents:
                write_all_at(fd, reader.pread(e.length, e.offset), e.offset)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def dir_times(self) -> float:
        return self.info.at or time.time()

    # -- native files (EngineAPI)
    def file_state(self, rel: RelPath) -> FileState | None:
        rec = self.records.get(rel)
        if rec is None:
            return None
        base = self.baseline.get(rel)
        return FileState(
            rel=rel,
            hash=Hash(rec.hash),
            freshness=self.views.freshness_now(rel, rec),
            versions=0,
            baseline_hash=Hash(base[0]) if base else None,
        )

    def freshness(self, rel: RelPath) -> Freshness | None:
        rec = self.records.get(rel)
        return None if rec is None else self.views.freshness_now(rel, rec)

    def settled(self, rel: RelPath) -> bool:
        """A world never changes: its files hold what their records name."""
        return rel in self.records

    def is_unchanged(self, rel: RelPath, st: os.stat_result) -> bool:
        return True

    def unchanged_hash(self, rel: RelPath, st: os.stat_result) -> str | None:
        rec = self.records.get(rel)
        return None if rec is None else str(rec.hash)

    def check_file(self, rel: RelPath) -> FileState | None:
        return self.file_state(rel)

    def recorded_hash(self, rel: RelPath) -> str | None:
        rec = self.records.get(rel)
        return None if rec is None else str(rec.hash)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    preserve = preserve_inode = record_write = record_rename = record_unlink = _refuse
    preserve_freeing = _refuse

    def pin_version(self, rel: RelPath) -> None:
        pass

    def access(self, rel: RelPath) -> Access | None:
        """The owner, group and mode the snapshot recorded for file or folder
        ``rel``, narrowed by those of the live path if it still exists: only
        who could read it then and can now (swfs.permissions).  None for a
        path the world does not hold."""
        then = self.accesses.get(rel)
        if then is None:
            return None
        try:
            now = permissions.of_stat(os.lstat(os.path.join(self.src, rel) if rel else self.src))
        except OSError:
            now = None  # gone since: what the snapshot recorded
        return permissions.narrowed(then, now)

    def content_access(self, rel: RelPath, h: str | None) -> Access:
        return self.access(rel) or permissions.owner_only(self.store_dir)

    # -- what swfs.review reads of a workspace (duck-typed; see _StoreView)
    def baseline_manifest(self) -> dict[str, list[Any]]:
        return self.baseline

    def get_record(self, rel: str) -> FileRecord | None:
        return self.records.get(rel)

    def parse_units(self, h: str, parser: str) -> list[tuple[str, str, str]] | None:
        return views.ok_units(self._parses, h, parser)

    def _as_ws(self) -> Reviewable:
        view = _WorkspaceView(self)
        return cast("Reviewable", view)

    # -- .review: swfs.review.reviews.Reviews over the snapshot (``reviews``)
    def _review_header(self) -> str:
        """SUMMARY.md of a world starts by saying which world, and which
        baseline its changes are counted from."""
        i = self.info
        taken = "unknown" if i.at is None else _utc(i.at)
        base_taken = "never" if i.baseline_at is None else _utc(i.baseline_at)
        if i.baseline == i.name:
            against = "itself (a world of a baseline shows no change)"
        elif i.baseline == history.BASELINE:
            against = "the present baseline, which was already in force then"
        else:
            against = f"{i.baseline}, the baseline in force then (kept when re-baselined)"
        return (
            f'<!-- swfs world="{_esc(i.name)}" kind="{i.kind}" taken="{taken}" '
            f'baseline="{_esc(i.baseline)}" baseline_taken="{base_taken}" read-only -->\n'
            f"World {i.name}: the workspace as it was at {taken}, read-only. "
            f"Changes are counted from {against}.\n\n"
        )

    # -- .versions (a world shows none: it is one state)
    def versioned_paths(self) -> Iterable[RelPath]:
        return []

    def has_versions(self, rel: RelPath) -> bool:
        return bool(self.versions(rel))

    def versions(self, rel: RelPath) -> Sequence[Version]:
        return []

    def version_file(self, rel: RelPath, number: int) -> str | None:
        return None

    def version_ref(self, rel: RelPath, number: int) -> str | None:
        return None

    def snapshots(self) -> Sequence[str]:
        return []

    def snapshot_manifest(self, name: str) -> dict[RelPath, Hash]:
        return {}

    def snapshot_accesses(self, name: str) -> dict[RelPath, Access]:
        return {}

    # blob_path, blob_ref, blob_size, open_blob: swfs.blobreads.BlobReads

    # -- background work: on-demand parses of hashes the cache lacks
    def add_listener(self, fn: Callable[[RelPath], None]) -> None:
        pass  # nothing in a world changes

    def queue_report(self) -> list[str]:
        return [f"world {self.info.name}: {len(self._wanted)} parse(s) on demand"]

    def scan(self) -> object:
        return None

    def control_server(self) -> Service:
        """A world serves no control socket: the daemon never starts one for
        it (mountd.launch), and the CLI names the live workspace instead."""
        raise WorkspaceError(f"world {self.info.name}: no control socket")

    async def run_background(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        send, receive = trio.open_memory_channel[str](1000)
        self._send = send
        try:
            async with ParsePool.open(self.config.limits) as pool, trio.open_nursery() as nursery:
                task_status.started()
                limiter = trio.CapacityLimiter(self.config.limits.workers)
                async with receive:
                    async for rel in receive:
                        nursery.start_soon(self._parse_one, pool, limiter, rel)
        finally:
            self._send = None

    async def _parse_one(self, pool: ParsePool, limiter: trio.CapacityLimiter, rel: str) -> None:
        rec = self.records[rel]
        try:
            async with limiter:
                path = await trio.to_thread.run_sync(self.blobs.readable_path, rec.hash)
                outcome = await pool.parse(str(path), rel)
        except Exception as exc:
            outcome = ParseOutcome(FAILED, hash=rec.hash, parser=rec.parser, error=str(exc))
        if outcome.hash not in (None, rec.hash):  # the cache file is not what it names
            outcome = ParseOutcome(FAILED, hash=rec.hash, parser=rec.parser, error="bad blob")
        if outcome.status in (OK, FAILED):
            self._parsed[(rec.hash, rec.parser or "")] = outcome
        else:
            log.info("%s: on-demand parse: %s %s", rel, outcome.status, outcome.error)
            self._parsed[(rec.hash, rec.parser or "")] = ParseOutcome(
                FAILED, hash=rec.hash, parser=rec.parser, error=outcome.error or outcome.status
            )
        self._landed += 1
        event = self._wanted.pop(rel, None)
        if event is not None:
            event.set()

    def _progress(self, rel: str) -> str:
        return "parsing now, in this world" if rel in self._wanted else "not parsed yet"

    async def _wait_view(self, rel: RelPath, limit: float, unit: str | None = None) -> None:
        """Parse ``rel``'s content here, on demand, if the cache lacks it
        (``Views.wait_view``)."""
        rec = self.records.get(rel)
        if rec is None or rec.parser is None or self._send is None or not self.blobs.has(rec.hash):
            return
        parser = rec.parser
        status = await trio.to_thread.run_sync(self._parses.parse_status, rec.hash, parser)
        if status is not None:
            return
        event = self._wanted.get(rel)
        if event is None:
            event = self._wanted[rel] = trio.Event()
            self._send.send_nowait(rel)
        with trio.move_on_after(limit):
            await event.wait()


class _WorldParses:
    """The parses a world's views read (``swfs.views.files.ParseReads``): the
    store's, and those parsed here on demand, kept in this process only."""

    def __init__(self, store: ReadOnlyStore, made: dict[tuple[str, str], ParseOutcome]) -> None:
        self._store, self._made = store, made

    def get_parse(self, h: str, parser: str, txn: Any = None) -> ParseRecord | None:
        record = self._store.get_parse(h, parser, txn)
        mine = self._made.get((h, parser))
        if record is not None or mine is None:
            return record
        return ParseRecord(mine.status, mine.error, mine.secs, units=len(mine.units))

    def parse_status(self, h: str, parser: str, txn: Any = None) -> str | None:
        status = self._store.parse_status(h, parser, txn)
        mine = self._made.get((h, parser))
        return status if status is not None or mine is None else mine.status

    def _mine(self, h: str, parser: str) -> ParseOutcome | None:
        mine = self._made.get((h, parser))
        return mine if mine is not None and mine.status == OK else None

    def unit_names(self, h: str, parser: str, txn: Any = None) -> list[UnitInfo]:
        mine = self._mine(h, parser)
        if mine is None:
            return self._store.unit_names(h, parser, txn)
        return [
            UnitInfo(name, locator, len(views.encode_text(text)), text.endswith("\n"))
            for name, locator, text in mine.units
        ]

    def parse_units(self, h: str, parser: str, txn: Any = None) -> list[UnitText]:
        mine = self._mine(h, parser)
        return self._store.parse_units(h, parser, txn) if mine is None else list(mine.units)

    def get_unit(
        self, h: str, parser: str, name: str, txn: Any = None, *, limit: int | None = None
    ) -> UnitText | None:
        mine = self._mine(h, parser)
        if mine is None:
            return self._store.get_unit(h, parser, name, txn, limit=limit)
        found = next((u for u in mine.units if u[0] == name), None)
        if found is not None and limit is not None and len(found[2]) > limit:
            raise UnitTooLarge(f"{name}: {len(found[2])} characters")
        return found


class _WorldSource:
    """A world as its views read it (``swfs.views.serving.ViewSource``): the
    snapshot's records, read only, whose files never change."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.parses = world._parses

    def read(self) -> contextlib.AbstractContextManager[Any]:
        return self._world.store.read()

    def record(self, rel: str) -> FileRecord | None:
        return self._world.records.get(rel)

    def records(self, txn: Any) -> Iterator[tuple[str, FileRecord]]:
        return iter(self._world.records.items())

    def generation(self) -> int:
        """The store's (the live daemon parses), plus this world's parses."""
        store = self._world.store
        with store.read() as txn:
            raw = txn.get(b"gen", db=store.dbs["meta"])
        return int(bytes(raw or b"0")) + self._world._landed

    def busy(self) -> set[str]:
        return set()

    def settled(self, rel: str, rec: FileRecord, busy: set[str] | None = None) -> bool:
        return True  # a world never changes: its files hold what their records name

    def partial(self, h: str, parser: str) -> PartialParse | None:
        return None  # a world parses whole files


class _WorkspaceView:
    """A world as the reviews part (``swfs.review.reviews``) reads a
    workspace: the world's own members, over the snapshot's file table."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.store = world._view
        self.config = world.config

    def generation(self) -> int:
        return self._world._landed  # a world changes only as its parses land

    def __getattr__(self, name: str) -> Any:
        return getattr(self._world, name)


def _esc(value: str) -> str:
    return views.escape_attr(value)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@contextmanager
def open_world(
    src: Path, store_dir: Path, name: str, *, config: Config | None = None
) -> Iterator[World]:
    world = World(src, store_dir, name, config=config)
    try:
        yield world
    finally:
        world.close()


class MemoryFiles:
    """Reassembled blobs kept between opens, by hash: a world never changes,
    so a file opened again is a ``dup`` of the memory file of its last open
    (the bytes already there, the kernel's pages of it still warm), not
    another reassembly.  Least recently used out beyond ``limit`` bytes
    (sizes rounded up to pages).  Thread-safe: opens run in worker threads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.hits = self.misses = 0
        self._files: OrderedDict[str, tuple[int, int]] = OrderedDict()  # hash -> (fd, bytes)
        self._lock = threading.Lock()

    def get(self, h: str) -> int | None:
        """A new descriptor of blob ``h``'s memory file (the caller closes
        it), or None if none is kept."""
        with self._lock:
            got = self._files.get(h)
            if got is None:
                self.misses += 1
                return None
            self._files.move_to_end(h)
            self.hits += 1
            return os.dup(got[0])

    def put(self, h: str, size: int, fd: int) -> int:
        """Keep ``fd`` (``h``'s memory file, now owned here) and return a
        descriptor of it for the caller; a file beyond the limit is not kept."""
        used = -(-max(size, 1) // _PAGE) * _PAGE
        if used > self.limit:
            return fd
        with self._lock:
            old = self._files.get(h)
            if old is not None:  # reassembled twice at once: keep the first
                os.close(fd)
                return os.dup(old[0])
            try:
                out = os.dup(fd)
            except BaseException:
                os.close(fd)
                raise
            self._files[h] = (fd, used)
            self.used += used
            while self.used > self.limit:
                _, (old_fd, old_used) = self._files.popitem(last=False)
                os.close(old_fd)
                self.used -= old_used
            return out

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._files.values():
                os.close(fd)
            self._files.clear()
            self.used = 0
