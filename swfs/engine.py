"""The engine as the daemon and the CLI drive it: the workspace plus its
background work (the re-parse queue, parse workers, the periodic rescan), and
the control socket as an object the daemon's lifecycle starts
(``control_server``).

The queue coalesces per path: a path is in it at most once, however often it
is written; a path asked for by a reader (``wait_view``) moves to the front.
Workers take a path, look up its record, parse it in a worker process and
store the outcome from a thread: no LMDB transaction is ever held across an
``await``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import trio

from swfs.api import (
    Freshness,
    RelPath,
)
from swfs.control import ControlServer
from swfs.evidence.part import Evidence
from swfs.find.search import SearchIndex
from swfs.history.part import History
from swfs.history.staging import Staging
from swfs.review.reviews import Reviews
from swfs.store.records import FLUSH_INTERVAL
from swfs.views import ranged
from swfs.views.executor import ParseExecutor, open_executor
from swfs.views.parsework import FAILED, INTERNAL, OK, ParseOutcome
from swfs.views.scheduler import ParseQueue, ParseScheduler
from swfs.views.serving import Views
from swfs.workspace import Config, LiveSource, ScanStats, Workspace, WorkspaceError

log = logging.getLogger(__name__)

# The periodic rescan is a backstop (the change feed sees changes behind the
# mount within a second): it may take at most 1/RESCAN_DUTY of the daemon's
# time.  A scan of a large tree is a second or more of Python under the GIL,
# and every FUSE request that comes in meanwhile waits for the GIL, so after a
# scan that took T seconds the next waits at least RESCAN_DUTY * T.
RESCAN_DUTY = 50
# A parse whose machinery failed (``parsework.INTERNAL``) is tried this many
# times, waiting INTERNAL_RETRY_DELAY seconds more each time, before the
# file's view records the failure and names it.
INTERNAL_TRIES = 3
INTERNAL_RETRY_DELAY = 1.0


class Engine:
    """Implements ``swfs.api.EngineAPI``: holds its parts, each behind its own
    interface, and runs their background work.

    ``workspace`` (``swfs.workspace.Workspace``): the file table, the write
    protocol, preserved bytes.
    ``history``: versions, snapshots, the baseline, restore (``History``).
    ``evidence``: who may read what, the mount's access journal (``Evidence``).
    ``views``: the parsed views and the wait for them (``swfs.views.serving.Views``
    over the workspace's records).
    ``reviews``: the change set against the baseline (``Reviews``).
    ``search_index``: the search index (``swfs.find.search``)."""

    world_name: str | None = None  # the live workspace, no world (swfs.history.world)

    def __init__(self, src: Path, store_dir: Path | None = None, *, config: Config | None = None):
        self.workspace = ws = Workspace(src, store_dir, config=config)
        self.queue: ParseQueue | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        ws.add_parse_request_handler(self._on_parse_request)
        self.history = History(ws)
        self.evidence = Evidence(ws)
        self.views = Views(
            LiveSource(ws), progress=self._parse_progress, wait=self._wait_view, hurry=self._hurry
        )
        self.reviews = Reviews(ws, self.evidence.access)
        self.search_index = SearchIndex(
            ws, self.evidence.access, model=_embed_model(ws.config.embed_model)
        )
        ws.add_listener(self.search_index.notify)  # from any thread: it only queues
        # rel -> set at its next change notice: readers waiting for a writer's record
        self._notices: dict[str, trio.Event] = {}
        self.add_listener(self._on_notice)
        # (rel, hash) -> parses of it whose machinery failed (INTERNAL_TRIES)
        self._internal_failures: dict[tuple[str, str], int] = {}
        # rel -> ordinals of units readers wait for, of its ranged parse under way
        self._wanted: dict[str, list[int]] = {}

    @classmethod
    @contextmanager
    def open(
        cls, src: Path, store: Path | None = None, *, config: Config | None = None
    ) -> Iterator[Engine]:
        engine = cls(src, store, config=config)
        try:
            yield engine
        finally:
            engine.close()

    def close(self) -> None:
        self.search_index.close()
        self.workspace.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what every caller names the workspace by
    @property
    def src(self) -> Path:
        return self.workspace.src

    @property
    def store_dir(self) -> Path:
        return self.workspace.store_dir

    @property
    def config(self) -> Config:
        return self.workspace.config

    @property
    def staging(self) -> Staging | None:
        return self.workspace.staging

    def scan(self, progress: Callable[[int, int], None] | None = None) -> ScanStats:
        """*slow*: bring the file table up to date with SRC."""
        return self.workspace.scan(progress)

    # -- listeners are called in the trio thread
    def add_listener(self, fn: Callable[[RelPath], None]) -> None:
        def in_trio(rel: RelPath) -> None:
            token = self._token
            if token is None or self._on_loop(token):
                # On the loop itself (a record the daemon made without a
                # thread): at once, so what it shows has moved before the
                # request that caused the change is answered.  From a worker
                # thread the notice reaches the loop before the thread's result.
                fn(rel)
                return
            with suppress(trio.RunFinishedError):
                token.run_sync_soon(fn, rel)

        self.workspace.add_listener(in_trio)

    @staticmethod
    def _on_loop(token: trio.lowlevel.TrioToken) -> bool:
        try:
            return trio.lowlevel.current_trio_token() is token
        except RuntimeError:  # a worker thread
            return False

    def _on_parse_request(self, rel: RelPath, front: bool) -> None:
        queue, token = self.queue, self._token
        if queue is None or token is None:
            return
        # A parse nobody waits for yet (a change) waits for a pause in the
        # changes (swfs.views.scheduler); a reader's goes first, at once.
        later = not front
        if self._on_loop(token):
            queue.submit(rel, front=front, later=later)
            return
        with suppress(trio.RunFinishedError):
            token.run_sync_soon(lambda: queue.submit(rel, front=front, later=later))

    def _hurry(self) -> None:
        """On the loop: the parses deferred to a pause in changes start now."""
        if self.queue is not None:
            self.queue.hurry()

    def _parse_progress(self, rel: str) -> str:
        queue = self.queue
        where = None if queue is None else queue.progress(rel)
        if where is None:
            return "not queued yet" if queue is not None else "no parse is running (no daemon)"
        state, secs = where
        if state == "parsing":
            return f"parsing since {secs:.0f} s"
        return f"queued, {len(queue or ())} file(s) in the queue"

    def queue_report(self) -> list[str]:
        queue = self.queue
        return ["parse queue: not running"] if queue is None else queue.report()

    # -- background work
    async def run_background(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self._daemon_lock():
            await self._run(task_status=task_status, drain=False)

    def control_server(self) -> ControlServer:
        """The control socket the CLI talks to while this engine runs in a
        daemon (started by the daemon's lifecycle, after run_background)."""
        return ControlServer(self)

    @contextmanager
    def _daemon_lock(self) -> Iterator[None]:
        """One daemon per store: a second mount of the same workspace would
        record every change twice and fight over the control socket."""
        path = self.store_dir / "daemon.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                raise WorkspaceError(
                    f"{self.src}: already served by another swfs daemon (pid {other})"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    async def drain(
        self, progress: Callable[[int, int], None] | None = None, *, scan: bool = True
    ) -> None:
        """Scan (unless the caller just did), then parse everything that needs
        it, then return (``swfs index``)."""
        await self._run(drain=True, progress=progress, scan=scan)

    async def _run(
        self,
        *,
        drain: bool,
        task_status: Any = trio.TASK_STATUS_IGNORED,
        progress: Callable[[int, int], None] | None = None,
        scan: bool = True,
    ) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.queue = queue = ParseQueue()
        limits = self.config.limits
        try:
            if drain and not scan and not await trio.to_thread.run_sync(self.views.needs_parse):
                return  # nothing to parse: no worker processes to start
            # Parse executor hook (swfs.views.executor): local pool or Ray.
            async with open_executor(limits) as pool, trio.open_nursery() as nursery:
                if not drain:
                    # Before anything is written: space for deletes, truncates
                    # and gc should the disk fill up (swfs.reserve).
                    await trio.to_thread.run_sync(self.workspace.reserve.fill)
                if scan:
                    await trio.to_thread.run_sync(self.scan)
                for rel in await trio.to_thread.run_sync(self.views.needs_parse):
                    queue.submit(rel)
                total = len(queue)
                parse_one = functools.partial(self._parse_one, pool)
                scheduler = ParseScheduler(queue, parse_one, workers=limits.workers)
                await nursery.start(scheduler.run)
                if not drain:
                    await nursery.start(self.search_index.run)
                    nursery.start_soon(self._rescan_loop)
                    nursery.start_soon(self._flush_loop)
                task_status.started()
                if drain:
                    while not queue.idle():
                        queue.hurry()  # nothing to wait for a pause of: `swfs index` waits
                        if progress:
                            progress(total - len(queue), total)
                        await trio.sleep(0.1)
                    if progress:
                        progress(total, total)
                    nursery.cancel_scope.cancel()
        finally:
            self.queue = None
            self._token = None

    async def _parse_one(self, pool: ParseExecutor, rel: str) -> bool:
        # Store reads in a thread: the loop also answers every FUSE request.
        # One thread call for both (each costs the loop a hand-off).
        found = await trio.to_thread.run_sync(self._to_parse, rel)
        if found is None:
            return False
        h, parser, cached = found
        if cached:
            # Another path with the same content was parsed meanwhile.
            await trio.to_thread.run_sync(self._adopt_cached, rel)
            return False
        try:
            return await self._parse_and_apply(pool, rel, h, parser)
        finally:
            if self.workspace.partials.get(h, parser) is not None:
                self.workspace.partials.drop(h, parser)
                self.workspace.notify_changed(
                    rel
                )  # its view turns back to pending.md, or on to the parse

    def _to_parse(self, rel: str) -> tuple[str, str, bool] | None:
        """``rel``'s recorded (hash, parser key) and whether a parse of them
        is stored already; None when it has nothing to parse."""
        store = self.workspace.store
        with store.read() as txn:
            rec = store.get_file(rel, txn)
            if rec is None or rec.parser is None:
                return None
            return rec.hash, rec.parser, store.parse_status(rec.hash, rec.parser, txn) is not None

    async def _parse_and_apply(self, pool: ParseExecutor, rel: str, h: str, parser: str) -> bool:
        try:
            # -- shared cache hooks: a hit runs no parse; a parse is published
            outcome = await self._shared_lookup(h, parser)
            if outcome is None:
                self.workspace.parse_runs += 1
                outcome = await self._parse_file(pool, rel, h, parser)
                await self._shared_publish(outcome)
        except Exception as exc:  # the pool's machinery, not the parser
            log.exception("%s: parse could not run", rel)
            outcome = ParseOutcome(INTERNAL, error=f"{type(exc).__name__}: {exc}")
        if outcome.status == INTERNAL:
            tries = self._internal_failures.get((rel, h), 0) + 1
            if tries < INTERNAL_TRIES:
                self._internal_failures[(rel, h)] = tries
                log.warning("%s: parse could not run (%s); trying again", rel, outcome.error)
                await trio.sleep(INTERNAL_RETRY_DELAY * tries)
                return True
            self._internal_failures.pop((rel, h), None)
            # Recorded as failed, naming the cause: a view pending forever
            # would hide it.  The next change of the file parses it afresh.
            outcome = ParseOutcome(
                FAILED,
                hash=h,
                parser=parser,
                error=f"swfs could not run its parser ({INTERNAL_TRIES} tries): {outcome.error}",
            )
        self._internal_failures.pop((rel, h), None)
        try:
            return await trio.to_thread.run_sync(
                lambda: self.workspace.apply_parse(
                    RelPath(rel), outcome, queued_hash=h, queued_parser=parser
                )
            )
        except Exception as exc:
            if outcome.status == FAILED:
                raise  # recording the failure itself failed: the scheduler logs it
            # A parse the engine cannot record (a bug of ours, a unit the
            # store refuses) is recorded as failed, naming the cause: a view
            # pending forever would hide it.  A full disk fails this too, and
            # the file stays queued for the next change.
            log.exception("%s: the parse could not be recorded", rel)
            failed = ParseOutcome(
                FAILED,
                hash=h,
                parser=parser,
                error=f"swfs could not record the parse: {type(exc).__name__}: {exc}",
            )
            return await trio.to_thread.run_sync(
                lambda: self.workspace.apply_parse(
                    RelPath(rel), failed, queued_hash=h, queued_parser=parser
                )
            )

    async def _shared_lookup(self, h: str, parser: str) -> ParseOutcome | None:
        """The parse of (``h``, ``parser``) another workspace put in the
        shared cache, as an outcome this workspace records as its own."""
        cache = self.workspace.shared_cache
        if cache is None:
            return None
        found = await trio.to_thread.run_sync(cache.lookup, h, parser)
        if found is None:
            return None
        return ParseOutcome(OK, hash=h, parser=parser, units=found.units, secs=found.secs)

    async def _shared_publish(self, outcome: ParseOutcome) -> None:
        cache = self.workspace.shared_cache
        if cache is None or outcome.status != OK or outcome.part is not None:
            return
        if not outcome.hash or not outcome.parser:
            return
        h, parser = outcome.hash, outcome.parser
        try:
            await trio.to_thread.run_sync(
                lambda: cache.publish(h, parser, outcome.units, secs=outcome.secs)
            )
        except (OSError, ValueError) as exc:  # the cache is an optimisation: never fatal
            log.warning("%s: cannot publish a parse of %s: %s", cache.describe(), h, exc)

    async def _parse_file(self, pool: ParseExecutor, rel: str, h: str, parser: str) -> ParseOutcome:
        """The outcome of parsing ``rel`` (recorded as ``h``): range by range
        where its parser can (swfs.ranged), its ranges shown as they come."""
        if not pool.limits.range_threshold:
            return await pool.parse(self.workspace.abspath(rel), rel)
        wanted = self._wanted.setdefault(rel, [])
        queue = self.queue

        def publish() -> None:
            self.workspace.notify_changed(rel)
            if queue is not None:
                queue.wake(rel)

        try:
            return await ranged.parse_ranged(
                pool,
                self.workspace.abspath(rel),
                rel,
                h=h,
                parser=parser,
                partials=self.workspace.partials,
                wanted=wanted,
                publish=publish,
            )
        finally:
            self._wanted.pop(rel, None)

    def _adopt_cached(self, rel: str) -> None:
        """The parse for ``rel``'s content exists (another path had the same
        bytes): make it ``rel``'s view.  No rehash: the record's hash is what
        the cached parse is keyed by."""
        with self.workspace.store.write() as txn:
            rec = self.workspace.store.get_file(rel, txn)
            if rec is None or rec.parser is None:
                return
            if self.workspace.store.parse_status(rec.hash, rec.parser, txn) == "ok":
                view = dataclasses.replace(rec, view_hash=rec.hash, view_parser=rec.parser)
                self.workspace.store.put_file(txn, rel, view)
            self.workspace.bump_generation(txn)
        self.workspace.notify_changed(rel)

    async def _flush_loop(self) -> None:
        while True:
            await trio.sleep(FLUSH_INTERVAL)
            try:
                await trio.to_thread.run_sync(self.workspace.store.flush)
            except Exception:
                log.exception("%s: flushing the store failed", self.store_dir)

    async def _rescan_loop(self) -> None:
        interval = self.config.rescan_interval
        if not math.isfinite(interval) or interval <= 0:
            return
        took = 0.0
        while True:
            await trio.sleep(rescan_wait(interval, took))
            start = time.monotonic()
            try:
                stats = await trio.to_thread.run_sync(self.scan)
            except Exception:
                log.exception("periodic rescan failed")
                continue
            finally:
                took = time.monotonic() - start
            if stats.added or stats.changed or stats.removed:
                log.info(
                    "rescan: %d added, %d changed, %d removed",
                    stats.added,
                    stats.changed,
                    stats.removed,
                )

    async def _wait_view(self, rel: RelPath, limit: float, unit: str | None = None) -> None:
        """Wait up to ``limit`` seconds for ``rel``'s view to be current: for
        its parse, and first for its record when the file holds bytes not
        recorded yet (a writer's: its close or fsync records them; a change
        behind the mount: recorded here).  A pending view parsed range by
        range (swfs.ranged) is waited for until its units are known, and
        with ``unit``, until that unit is parsed (its range goes first)."""
        queue = self.queue
        if queue is None:
            return
        checked = False
        with trio.move_on_after(limit):
            while True:
                notice = self._notice(rel)  # before the look: a record after it sets it
                # Store reads and an lstat: in a thread, like every engine
                # call from the loop.
                fresh, settled, partial = await trio.to_thread.run_sync(self._fresh_settled, rel)
                if fresh not in (Freshness.PENDING, Freshness.STALE):
                    return
                if not settled:
                    # Recorded here once (a file that keeps changing is not
                    # hashed over and over); a writer's record, or the change
                    # feed's, sends the notice.
                    if checked or not await trio.to_thread.run_sync(self._check_unsettled, rel):
                        await notice.wait()
                    checked = True
                    continue
                if partial is not None and fresh is Freshness.PENDING:
                    k = None if unit is None else partial.ordinals.get(unit)
                    if k is None or partial.ready(k):
                        return
                    wanted = self._wanted.get(rel)
                    if wanted is not None and k not in wanted:
                        wanted.append(k)
                event = queue.event(rel)
                if partial is None:  # else its parse is under way: no second one after it
                    queue.submit(rel, front=True)
                await event.wait()

    def _fresh_settled(
        self, rel: RelPath
    ) -> tuple[Freshness | None, bool, ranged.PartialParse | None]:
        rec = self.workspace.store.get_file(rel)
        if rec is None:
            return None, self.workspace.settled(rel), None
        partial = self.workspace.partials.get(rec.hash, rec.parser) if rec.parser else None
        return self.views.freshness_now(rel, rec), self.workspace.settled(rel), partial

    def _check_unsettled(self, rel: RelPath) -> bool:
        """*slow*: record ``rel`` as it is now, unless the mount is changing
        it (the writer records it).  Whether it was checked.  A record the
        write protocol has queued for it (a close's, a change of names')
        is made now instead of after the queue's pause."""
        writes = self.workspace.writes
        if writes.queued_for(rel):
            writes.drain()
            return True
        return self.workspace.writes.check_behind(
            rel, lambda r: self.workspace.check_file(r, force=True)
        )

    def _notice(self, rel: str) -> trio.Event:
        """Set at the next change notice for ``rel`` (on the loop)."""
        event = self._notices.get(rel)
        if event is None:
            event = self._notices[rel] = trio.Event()
        return event

    def _on_notice(self, rel: RelPath) -> None:
        event = self._notices.pop(rel, None)
        if event is not None:
            event.set()

    async def wait_all_current(self, limit: float) -> bool:
        """True once nothing is pending or stale (``swfs sync``)."""
        with trio.move_on_after(limit):
            while True:
                # The queued records first (closes' and changes of names'):
                # their paths are not current, nor their parses final, until
                # they are made.
                await trio.to_thread.run_sync(self.workspace.writes.drain)
                queue = self.queue
                if queue is not None and not queue.idle():
                    queue.hurry()  # a caller waits: no pause in changes to wait for
                    await trio.sleep(0.05)
                    continue
                counts = await trio.to_thread.run_sync(self.views.counts)
                if counts["pending"] == 0 and counts["stale"] == 0:
                    return True
                # Changed behind the mount and not recorded yet: record them
                # now (those a writer holds are its to record).
                for rel in await trio.to_thread.run_sync(self.views.unsettled):
                    await trio.to_thread.run_sync(self._check_unsettled, rel)
                # Stale or pending but not queued (changed behind our back
                # since the last scan): queue them and wait again.
                for rel in await trio.to_thread.run_sync(self.views.needs_parse):
                    if queue is not None:
                        queue.submit(rel)
                await trio.sleep(0.2)
        return False


def _embed_model(directory: str | None) -> Any:
    """The ``--embed-model`` directory, loaded (never fetched), or None."""
    if not directory:
        return None
    from swfs.find.embed import EmbedModel, ModelError

    try:
        return EmbedModel.load(directory)
    except (ModelError, OSError) as exc:
        raise WorkspaceError(f"--embed-model: {exc}") from None


def rescan_wait(interval: float, took: float) -> float:
    """Seconds before the next periodic rescan: ``--rescan-interval``, or
    RESCAN_DUTY times the last scan's length when that is longer."""
    return max(interval, RESCAN_DUTY * took)
