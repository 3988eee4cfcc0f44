"""Generated read-only trees: the common entry type and the three providers.

A provider maps a path inside its tree ('' is the tree's root) to an
``Entry`` and lists directories; it never mutates anything.  Listings are
built from the engine and cached until the engine reports a change (or a
short time passes, in case a change went unreported).

Engine work never runs on the trio loop: what is not a cache hit (a listing,
a document's view, a diff, a version's blob) is built in a worker thread
(``Base.call``, bounded by ``ENGINE_THREADS``), so a diff of a large file
being computed never holds up a ``stat`` of a native file.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import posixpath
import stat
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from mountd import hop
from mountd.nodes import Tree
from mountd.options import MountOptions
from mountd.reply import Reply
from swfs import permissions
from swfs.api import (
    Access,
    EngineAPI,
    Freshness,
    Hash,
    RelPath,
    RenderedUnit,
    ReviewEntry,
    UnitTooLarge,
    Version,
    ViewState,
)
from swfs.history import staging
from swfs.store import hashform
from swfs.views import cache, waits
from swfs.views.files import header_line, render_unit

log = logging.getLogger(__name__)

T = TypeVar("T")

# What is cached of the engine's answers, how long, and when dropped: the
# rules are the engine's (swfs.views.cache).
# A unit whose stored text is at most this long is read on the loop: a few
# store lookups cost far less than a trip to a worker thread and back (the
# wake-ups alone take longer).  Longer ones go to a thread.
ON_LOOP_UNIT = 64 * 1024
ON_LOOP_NAMES = 1000  # a view with more units than this is listed in a thread
SNAPSHOTS = "@snapshots"
PENDING = "pending.md"  # the one unit of a view not parsed yet
ENGINE_THREADS = 4  # engine calls the generated trees run at once, in worker threads

# Shared by every generated tree: a slow build (a large diff) holds one token.
_engine_limiter = trio.CapacityLimiter(ENGINE_THREADS)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """Run an engine call in a worker thread: nothing that reads the store or
    the tree may block the loop that answers every FUSE request."""
    return await hop.run_sync(fn, *args, limiter=_engine_limiter)


@dataclass(frozen=True)
class Entry:
    is_dir: bool
    access: Access
    size: int = 0
    mtime_ns: int = 0
    xattrs: Mapping[str, str] = field(default_factory=dict)  # names without 'user.sw.'
    data: bytes | None = None  # a file's content, when generated in memory
    blob: str | None = None  # else: a path the daemon opens read-only
    native: str | None = None  # else: a native file (relative to SRC)
    writable: bool = False  # the owner may write it (.tab/requirements.md and its directory)
    # A directory whose listing changes only with a change event for it, so
    # the kernel may keep the listing until it is invalidated (mountd.dirlist).
    listing_kept: bool = False

    @property
    def mode(self) -> int:
        read = self.access.mode & 0o444
        write = 0o200 if self.writable else 0
        if self.is_dir:
            return stat.S_IFDIR | read | (read >> 2) | write
        return stat.S_IFREG | read | write


class SyntheticTree(Protocol):
    """What a generated tree answers (``mountd.generated``, ``mountd.router``,
    ``mountd.invalidator``).  ``TreeDefaults`` gives the optional part."""

    tree: Tree
    # "file": its paths start with a source file's path, so a change to that
    # file touches only what lies below it; "all": any change may touch any
    # of its nodes (``.review``).
    scope: str

    def listed(self) -> bool:
        """Whether the mount root lists it (else it is reachable by name)."""
        ...

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        """``wait``: a lookup by name may wait for a pending view; listing the
        parent directory never does."""
        ...

    def open_entry(self, path: str) -> Reply[Entry | None]:
        """What an open of ``path`` reads: at once where the tree has it at
        hand, else an awaitable (``mountd.reply``)."""
        ...

    async def children(self, path: str) -> list[str]: ...
    async def xattrs(self, path: str) -> Mapping[str, str]: ...

    def dir_stays(self, path: str, rels: AbstractSet[str]) -> bool:
        """Cheap, from the loop: folder ``path`` surely still shows after
        ``rels`` changed; False where only its listing can tell."""
        ...


class TreeDefaults:
    """The optional part of ``SyntheticTree``: scoped per file, listed at the
    root, opened as looked up (waiting as a lookup does), and no cheap
    answer on whether a folder stays."""

    scope = "file"

    def listed(self) -> bool:
        return True

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        raise NotImplementedError

    def open_entry(self, path: str) -> Reply[Entry | None]:
        return self.entry(path, wait=True)

    def dir_stays(self, path: str, rels: AbstractSet[str]) -> bool:
        return False


# Paths whose change time Generation keeps (see there).
CHANGED_KEPT = 20_000


class Generation:
    """Counts engine change events, so cached listings know when to rebuild,
    and remembers when each path last changed (the mtime of what shows it),
    and when anything below each folder did (the mtime of a generated folder
    that mirrors it, whose listing the kernel keeps: mountd.dirlist)."""

    def __init__(self) -> None:
        self.value = 0
        self.started_ns = time.time_ns()
        self.last_ns = self.started_ns
        # Bounded: a long run changes more paths than are worth a dict entry
        # each.  Paths dropped (the least recently changed) and those never
        # changed show ``_floor_ns``: no older than their change, which is
        # what a tool comparing mtimes needs.
        self._changed: dict[str, int] = {}
        self._floor_ns = self.started_ns
        self._lock = threading.Lock()

    def bump(self, rel: str | None = None) -> None:
        self.value += 1
        self.last_ns = time.time_ns()
        if rel is not None:
            # The path itself, and every folder above it: keys ending in "/"
            # ("/" is the root).
            keys = [rel]
            head = rel
            while head:
                head = head.rpartition("/")[0]
                keys.append(head + "/")
            with self._lock:
                for key in keys:
                    self._changed.pop(key, None)
                    self._changed[key] = self.last_ns  # insertion order: oldest first
                if len(self._changed) > CHANGED_KEPT:
                    for old in list(itertools.islice(self._changed, CHANGED_KEPT // 2)):
                        self._floor_ns = max(self._floor_ns, self._changed.pop(old))

    def changed_ns(self, rel: str) -> int:
        return self._changed.get(rel, self._floor_ns)

    def below_ns(self, folder: str) -> int:
        """When a change event last named ``folder`` or a path below it ('':
        any path).  A generated folder whose listing the kernel keeps shows
        this as its mtime: the kernel drops a kept listing whose directory's
        mtime moved (mountd.dirlist), which catches a listing taken just
        before a change and cached just after its invalidation."""
        below = self._changed.get(folder + "/", self._floor_ns)
        return max(below, self._changed.get(folder, below))  # an event may name the folder


def _at_or_below(path: str, rels: AbstractSet[str]) -> list[str]:
    """The paths of ``rels`` that are ``path`` or below it."""
    prefix = path + "/"
    return [r for r in rels if r == path or r.startswith(prefix)]


class _Index:
    """A directory tree over a set of relative paths (files at the leaves)."""

    def __init__(self, leaves: Iterable[str]) -> None:
        self.leaves: set[str] = set()
        self.dirs: dict[str, set[str]] = {"": set()}
        for leaf in leaves:
            self.add(leaf)

    def add(self, leaf: str) -> None:
        self.leaves.add(leaf)
        child = leaf
        while child:
            parent, _, name = child.rpartition("/")
            kids = self.dirs.setdefault(parent, set())
            if name in kids:
                break  # its ancestors are in already
            kids.add(name)
            child = parent

    def locate(self, path: str) -> tuple[str, str | None] | None:
        """(leaf, name inside it or None) for ``path``: a leaf's directory or
        an entry of it; None if this index has no such leaf."""
        if path in self.leaves:
            return path, None
        parent, _, name = path.rpartition("/")
        if parent in self.leaves:
            return parent, name
        return None

    def knows(self, path: str) -> bool:
        """Whether this index answers for ``path`` (a leaf, an entry of one, or
        a directory above leaves); if not, a fresher index may."""
        return path in self.dirs or self.locate(path) is not None


class _Cached(Generic[T]):
    """A value rebuilt on the next use after a change event or INDEX_TTL;
    ``get(fresh=False)`` (a lookup that will retry with a fresh value on a
    miss) at most every REBUILD_EVERY seconds (``swfs.views.cache.outdated``)."""

    def __init__(self, gen: Generation, build: Callable[[], T]) -> None:
        self._gen, self._build = gen, build
        self._value: T | None = None
        self._at = (-1, 0.0)

    def _stale(self, fresh: bool, now: float) -> bool:
        return self._value is None or cache.outdated(*self._at, self._gen.value, now, fresh=fresh)

    def get(self, *, fresh: bool = True) -> T:
        """Rebuilt in the calling thread (a worker thread, or a test)."""
        now = time.monotonic()
        if self._stale(fresh, now):
            gen = self._gen.value
            value = self._build()
            self._value, self._at = value, (gen, now)
            return value
        assert self._value is not None
        return self._value

    def peek(self) -> T | None:
        """The value a ``get(fresh=False)`` would return without a rebuild, or
        None where it would rebuild (an open answered without a coroutine,
        mountd.operations: answered at once, then takes the async path)."""
        return None if self._stale(False, time.monotonic()) else self._value

    async def aget(self, *, fresh: bool = True) -> T:
        """From the trio loop: a hit answers at once, a rebuild runs in a thread."""
        now = time.monotonic()
        if self._stale(fresh, now):
            gen = self._gen.value
            value = await off_loop(self._build)
            self._value, self._at = value, (gen, now)
            return value
        assert self._value is not None
        return self._value


class Base(TreeDefaults, ABC):
    tree: Tree

    def __init__(self, engine: EngineAPI, gen: Generation, options: MountOptions) -> None:
        self.engine, self.gen, self.options = engine, gen, options
        self.waits = options.waits
        self.started_ns = gen.started_ns

    @staticmethod
    async def call(fn: Callable[..., T], *args: Any) -> T:
        return await off_loop(fn, *args)

    def access(self, rel: str) -> Access:
        """The owner and bits of ``rel``; for an unknown path only its owner may
        read (the workspace root's owner), never everyone."""
        acc = self.engine.evidence.access(RelPath(rel))
        if acc is not None:
            return acc
        root = self.engine.evidence.access(RelPath(""))
        if root is None:
            return Access(0, 0, 0o400)
        return Access(root.uid, root.gid, root.mode & 0o400)

    @abstractmethod
    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        """The node at ``path`` in this tree, or None."""

    async def xattrs(self, path: str) -> Mapping[str, str]:
        e = await self.entry(path, wait=False)
        return {} if e is None else e.xattrs

    def dir_entry(self, rel: str, xattrs: Mapping[str, str] | None = None) -> Entry:
        return Entry(True, self.access(rel), mtime_ns=self.started_ns, xattrs=xattrs or {})


# -- .parsed


def view_xattrs(view: ViewState, locator: str | None = None) -> dict[str, str]:
    out = {
        "freshness": str(view.freshness),
        "source": view.rel,
        "source_hash": view.source_hash,
        "current_hash": view.current_hash,
        "locator": locator,
        "parser": view.parser,
        "error": view.error,
    }
    return {k: v for k, v in out.items() if v is not None}


class ParsedTree(Base):
    """``.parsed``: a view's state, its unit names and each unit are asked of
    the engine separately, so that opening one page of a 24,000-page PDF reads
    that page and nothing else.  A listing (``ls -l`` stats every unit) asks
    for the state and the names once."""

    tree = Tree.PARSED

    def __init__(self, engine: EngineAPI, gen: Generation, options: MountOptions) -> None:
        super().__init__(engine, gen, options)
        self._index = _Cached(gen, lambda: _Index(str(p) for p in engine.views.parsed_paths()))
        # What is kept of the engine's answers (the rules: swfs.views.cache).
        self._pending_listed = cache.ListedPending()
        self._states = cache.ViewStates()
        self._units = cache.Units()  # an open asks for its unit on lookup, getattr and open
        self._names = cache.UnitNames()

    def index(self) -> _Index:
        return self._index.get()

    def cached_view(self, rel: str) -> ViewState | None:
        """The engine's state of ``rel``'s view, asked once per change (or
        INDEX_TTL), not once per unit stat'ed by a listing; whether the file
        is settled (``EngineAPI.settled``) is asked on every call."""
        gen = self.gen.value
        hit, state = self._states.get(rel, gen, lambda: self.engine.workspace.settled(RelPath(rel)))
        if hit:
            return state
        # On the loop: a view's state is a file record and a parse status,
        # a few store lookups whatever the document's size (see ON_LOOP_UNIT).
        state = self.engine.views.view_state(RelPath(rel))
        self._states.keep(rel, gen, state)
        return state

    def _forget(self, rel: str) -> None:
        self._states.forget(rel)

    def _unit_on_loop(self, rel: str, name: str) -> tuple[ViewState | None, RenderedUnit | None]:
        """The state of ``rel`` and its unit ``name``, read on its own, on the
        loop; UnitTooLarge for a unit too long to read there."""
        view = self.cached_view(rel)
        if view is None:
            return None, None
        key = (rel, name)
        hit, unit = self._units.get(key, view)
        if hit:
            return view, unit
        unit = self.engine.views.view_unit(view, name, limit=ON_LOOP_UNIT)
        self._units.keep(key, view, unit)
        return view, unit

    async def _unit(self, rel: str, name: str) -> tuple[ViewState | None, RenderedUnit | None]:
        """``_unit_on_loop``, with a long unit read in a worker thread."""
        try:
            return self._unit_on_loop(rel, name)
        except UnitTooLarge:
            pass
        view = self.cached_view(rel)
        if view is None:
            return None, None
        unit = await self.call(self.engine.views.view_unit, view, name)
        self._units.keep((rel, name), view, unit)
        return view, unit

    async def _unit_names(self, view: ViewState) -> Sequence[str]:
        hit = self._names.get(view)
        if hit is not None:
            return hit
        try:
            names = self.engine.views.view_unit_names(view, limit=ON_LOOP_NAMES)
        except UnitTooLarge:
            names = await self.call(self.engine.views.view_unit_names, view)
        self._names.keep(view, names)
        return names

    def _settle_limit(self, rel: str, *, pending: bool = True, brief: bool = False) -> float:
        """How long a read of ``rel`` waits for its view (``swfs.views.waits``)."""
        fresh = self.engine.workspace.freshness(RelPath(rel))  # cheap: no parse record is read
        if fresh is None:
            view = self.cached_view(rel)
            if view is None:
                return 0.0
            fresh = view.freshness
        return self.waits.limit(fresh, pending=pending, brief=brief)

    async def settle(
        self, rel: str, *, pending: bool = True, brief: bool = False, unit: str | None = None
    ) -> None:
        """Wait for the view of ``rel`` as ``_settle_limit`` says (with
        ``unit``: of a view parsed range by range, for that unit only)."""
        limit = self._settle_limit(rel, pending=pending, brief=brief)
        if await waits.settle(self.engine.views, rel, limit, unit):
            self._forget(rel)

    async def view(self, rel: str, *, wait: bool = True) -> ViewState | None:
        if wait:
            await self.settle(rel)
        return self.cached_view(rel)

    async def _locate(self, path: str) -> tuple[str, str | None] | None:
        """(view rel, unit name or None) for a path inside a view."""
        for fresh in (False, True):
            idx = await self._index.aget(fresh=fresh)
            if idx.knows(path):
                return idx.locate(path)
        return None

    def _view_access(self, rel: str, view: ViewState | None) -> Access:
        """A stale view shows older content: who could read it then and can
        now (swfs.permissions); any other, the file's present access."""
        if view is None or view.source_hash in (None, view.current_hash):
            return self.access(rel)
        return self.engine.evidence.content_access(RelPath(rel), view.source_hash)

    def _unit_entry(self, rel: str, view: ViewState, unit: RenderedUnit) -> Entry:
        return Entry(
            False,
            self._view_access(rel, view),
            size=len(unit.content),
            mtime_ns=self.gen.changed_ns(rel),
            xattrs=view_xattrs(unit.state or view, unit.locator),
            data=unit.content,
        )

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        loc = await self._locate(path)
        if loc is None:
            if path in (await self._index.aget(fresh=False)).dirs:
                # A folder of the native tree (or the root): it lists the
                # names below it that have views, which change only with a
                # change event for a path below it: the kernel may keep it.
                return Entry(
                    True, self.access(path), mtime_ns=self.gen.below_ns(path), listing_kept=True
                )
            return None
        rel, unit_name = loc
        if unit_name is None:
            # A view's directory exists whatever its state: nothing to wait for.
            # Its units are named by the file's hash and parse, which change
            # only with a change event for the file: the kernel may keep it.
            # Its names are the view's: a stale view's are of older content
            # (its state is loaded only then: a listing of .parsed loads none).
            access = self.access(rel)
            if self.engine.workspace.freshness(RelPath(rel)) is Freshness.STALE:
                access = self._view_access(rel, self.cached_view(rel))
            return Entry(True, access, mtime_ns=self.gen.changed_ns(rel), listing_kept=True)
        if wait and unit_name != PENDING:
            # pending.md answers at once: it says how far the parse has got.
            await self.settle(rel, unit=unit_name)
        view, unit = await self._unit(rel, unit_name)
        if view is not None and unit is None and unit_name == PENDING:
            unit = await self._listed_pending(rel, view)
        if view is None or unit is None:
            return None
        return self._unit_entry(rel, view, unit)

    def open_entry(self, path: str) -> Reply[Entry | None]:
        """What an open of a unit reads: at once where that needs no wait
        (mountd.reply), else ``entry``, awaited (the index is due a
        rebuild, the view must be waited for, the unit is ``pending.md``,
        too long to read on the loop, or absent).  The same pieces as
        ``entry``, in the same order."""
        idx = self._index.peek()
        loc = idx.locate(path) if idx is not None else None
        if loc is None:
            return self.entry(path)
        rel, unit_name = loc
        if unit_name is None or unit_name == PENDING:
            return self.entry(path)
        opened = self._opened_again(rel, unit_name)
        if opened is not None:
            return opened
        if self._settle_limit(rel):
            return self.entry(path)
        try:
            view, unit = self._unit_on_loop(rel, unit_name)
        except UnitTooLarge:
            return self.entry(path)
        if view is None or unit is None:
            return self.entry(path)
        e = self._unit_entry(rel, view, unit)
        self._units.note_opened((rel, unit_name), view, e)  # kept as long as its unit is
        return e

    def _opened_again(self, rel: str, unit_name: str) -> Entry | None:
        """The entry the last open of this unit got, where that open is
        answered the same now: the view's state (``cached_view``: kept
        while no change event came and the file still holds the recorded
        bytes, else read again) is the one it was made for, and current, so
        there is nothing to wait for.  One record head and one lstat (and
        the state read again once per INDEX_TTL), where the first open of
        a unit costs three of each (a `grep -r` from the root opens every
        unit of every file on each pass).  The entry's access is as at
        that open: an open uses only its bytes and its ``user.sw.*``
        attributes, and the kernel checked who may open it against the
        node's attributes, which a chmod of the file drops."""
        key = (rel, unit_name)
        hit = self._units.opened(key)
        if hit is None:
            return None
        view = self.cached_view(rel)
        if (
            view != hit[0]
            or view is None
            or view.freshness is not Freshness.CURRENT
            or view.partial
        ):
            self._units.forget_opened(key)
            return None
        entry = hit[1]
        assert isinstance(entry, Entry)
        return entry

    async def _listed_pending(self, rel: str, view: ViewState) -> RenderedUnit | None:
        """A pending.md that a listing showed shortly before the parse ended:
        it stays readable (a note pointing at the units) rather than vanish
        between the listing and the open."""
        if not self._pending_listed.shown(rel):
            return None
        head = header_line(
            rel=rel,
            unit=PENDING,
            locator=f"{rel}#pending",
            source_hash=view.source_hash,
            freshness=view.freshness,
            current_hash=view.current_hash,
            parser=view.parser,
        )
        all_names = await self._unit_names(view)
        names = ", ".join(all_names[:5])
        more = ", ..." if len(all_names) > 5 else ""
        text = (
            f"swfs has parsed {rel} ({view.freshness}) since this folder was listed; "
            f"list it again for its units: {names}{more}\n"
        )
        return RenderedUnit(name=PENDING, locator=f"{rel}#pending", content=render_unit(head, text))

    async def xattrs(self, path: str) -> Mapping[str, str]:
        loc = await self._locate(path)
        if loc is None:
            return {}
        rel, unit_name = loc
        if unit_name is None:
            view = self.cached_view(rel)
            return {} if view is None else view_xattrs(view)
        view, unit = await self._unit(rel, unit_name)
        return {} if view is None or unit is None else view_xattrs(unit.state or view, unit.locator)

    def dir_stays(self, path: str, rels: AbstractSet[str]) -> bool:
        """Cheap, from the loop (mountd.invalidator): folder ``path`` (a
        file's view, or a folder above views) surely still shows after
        ``rels`` changed, known without rebuilding the index of every parsed
        file (an edit of a file whose view the kernel holds would otherwise
        rebuild it, once per edit): a changed file at or below it still has
        a view.  False where only the index can tell."""
        return any(
            self.engine.workspace.freshness(RelPath(r)) not in (None, Freshness.UNSUPPORTED)
            for r in _at_or_below(path, rels)
        )

    async def children(self, path: str) -> list[str]:
        loc = await self._locate(path)
        if loc is None:
            return sorted((await self._index.aget()).dirs.get(path, ()))
        rel, unit_name = loc
        if unit_name is not None:
            return []
        # A stale or pending view is waited for briefly (the file goes to the
        # front of the queue), so that `grep -rn` right after a mount or a save
        # finds the text; a parse that takes longer is listed as pending.md,
        # which says how far it has got.
        await self.settle(rel, brief=True)
        view = self.cached_view(rel)
        if view is None:
            return []
        names = list(await self._unit_names(view))
        if PENDING in names:
            self._pending_listed.note(rel)
        return names


# -- .review

SUMMARY = "SUMMARY.md"
ALL_DIFF = "ALL.diff"
LINEAGE = "LINEAGE.md"
STAGED_MD = "STAGED.md"  # a --staged mount's changes against SRC (swfs.staging)
STAGED_DIFF = "STAGED.diff"


class ReviewTree(Base):
    tree = Tree.REVIEW
    scope = "all"  # SUMMARY.md and ALL.diff speak of every file (mountd.router)

    def __init__(self, engine: EngineAPI, gen: Generation, options: MountOptions) -> None:
        super().__init__(engine, gen, options)
        self._entries = _Cached(gen, self._build)
        self._blobs: dict[str, bytes] = {}
        self._blobs_at = (-1, 0.0)
        self.lineage: Any = None  # the mount's access journal: LINEAGE.md

    def _build(self) -> tuple[_Index, dict[str, ReviewEntry]]:
        by_diff: dict[str, ReviewEntry] = {}
        for e in self.engine.reviews.review():
            by_diff[f"{e.rel}.diff"] = e
        return _Index(by_diff), by_diff

    def _content(self, key: str, make: Callable[[], bytes | None]) -> bytes | None:
        # Called in worker threads (see entry): never index the dict twice.
        now = time.monotonic()
        if self._blobs_at[0] != self.gen.value or now - self._blobs_at[1] > cache.INDEX_TTL:
            self._blobs = {}
            self._blobs_at = (self.gen.value, now)
        blobs = self._blobs
        data = blobs.get(key)
        if data is None:
            data = make()
            if data is None:
                return None
            blobs[key] = data
        return data

    def _file(self, rel: str, data: bytes, xattrs: Mapping[str, str]) -> Entry:
        mtime = self.gen.last_ns if not rel else self.gen.changed_ns(rel)
        # SUMMARY.md and ALL.diff speak of every changed file: only those who
        # may read all of them may read these.
        # A file's diff shows its baseline bytes too: who could read it then and now.
        engine = self.engine
        access = (
            engine.reviews.review_diff_access(RelPath(rel))
            if rel
            else engine.reviews.review_access()
        )
        return Entry(False, access, len(data), mtime, xattrs=xattrs, data=data)

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        if wait:
            await self._settle(path)
        # A diff of a large change takes seconds: never on the loop.
        return await self.call(self._entry, path)

    async def _settle(self, path: str) -> None:
        """A diff compares parsed texts: a read of ``<rel>.diff`` waits for the
        current version's parse as a read of one of its units would (a just
        written file's diff said "not parsed yet" instead), up to the
        pending wait; ALL.diff waits for every changed file's, within the
        stale wait.  stat never waits."""
        if path == ALL_DIFF:
            _, by_diff = await self._entries.aget(fresh=False)
            rels: list[str] = [e.rel for e in by_diff.values() if e.current_hash]
            brief = True
        elif path.endswith(".diff") and path != STAGED_DIFF:
            rels, brief = [path[: -len(".diff")]], False
        else:
            return
        deadline = time.monotonic() + self.waits.pending
        for rel in rels:
            limit = min(
                await self.call(self._settle_limit, rel, brief), deadline - time.monotonic()
            )
            await waits.settle(self.engine.views, rel, limit)

    def _settle_limit(self, rel: str, brief: bool) -> float:
        fresh = self.engine.workspace.freshness(RelPath(rel))
        return self.waits.limit(fresh, brief=brief, diff=True)

    def _entry(self, path: str) -> Entry | None:
        if path == SUMMARY:
            data = self._content(SUMMARY, self.engine.reviews.review_summary)
            return None if data is None else self._file("", data, {})
        if path == ALL_DIFF:
            data = self._content(ALL_DIFF, self.engine.reviews.review_all_diff)
            return None if data is None else self._file("", data, {})
        if path in (STAGED_MD, STAGED_DIFF) and self.engine.staging is not None:
            make = staging.staged_summary if path == STAGED_MD else staging.staged_diff
            data = self._content(path, lambda: make(self.engine.workspace))
            return None if data is None else self._file("", data, {})
        if path == LINEAGE and self.lineage is not None and self.lineage.enabled:
            data = self.lineage.lineage_md(self._entries.get(fresh=False)[1].values())
            return Entry(False, self.lineage.access(), len(data), self.gen.last_ns, data=data)
        idx, by_diff = self._entries.get(fresh=False)
        if path not in by_diff and path not in idx.dirs:
            idx, by_diff = self._entries.get()
        if path in by_diff:
            e = by_diff[path]
            rel = path[: -len(".diff")]
            data = self._content(path, lambda: self.engine.reviews.review_diff(RelPath(rel)))
            if data is None:
                return None
            xattrs = {
                "status": str(e.status),
                "baseline_hash": e.baseline_hash,
                "current_hash": e.current_hash,
            }
            return self._file(rel, data, {k: v for k, v in xattrs.items() if v})
        if path in idx.dirs:
            # Its names are the changed files below it, and the root's files:
            # any change event may change them (``scope``), and every event
            # drops every node of this tree from the kernel's caches, so the
            # kernel may keep the listing.  The mtime moves with each event.
            return Entry(True, self.access(path), mtime_ns=self.gen.last_ns, listing_kept=True)
        return None

    def dir_stays(self, path: str, rels: AbstractSet[str]) -> bool:
        """Cheap, from the loop (mountd.invalidator): folder ``path`` surely
        still lists a diff after ``rels`` changed, known without computing
        the change set again (a burst of creates would otherwise compute
        it, over every file of the store, once per create).  It does while
        a file below it differs from the baseline at its own path.  A folder
        above none of ``rels`` stays too: its names move without a change
        below it only when its one deleted file pairs up as a rename with a
        file created elsewhere, and it then keeps its dentry until the next
        change below it (its listing, dropped at every event, is right)."""
        prefix = path + "/"
        below = [r for r in rels if r.startswith(prefix)]
        return not below or any(self.engine.reviews.review_lists(RelPath(r)) for r in below)

    async def children(self, path: str) -> list[str]:
        idx = (await self._entries.aget())[0]
        names = sorted(idx.dirs.get(path, ()))
        if not path:
            names = [SUMMARY, ALL_DIFF] + [n for n in names if n not in (SUMMARY, ALL_DIFF)]
            if self.lineage is not None and self.lineage.enabled:
                names.insert(2, LINEAGE)
            if self.engine.staging is not None:
                names[2:2] = [STAGED_MD, STAGED_DIFF]
        return names


# -- .versions


NOT_KEPT_SUFFIX = ".not-kept"  # a version whose bytes were not kept: why, as text


def version_name(rel: str, v: Version) -> str:
    ext = posixpath.splitext(posixpath.basename(rel))[1]
    return f"{v.number:04d}-{hashform.short(v.hash)}{ext}"


def iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat()


class VersionsTree(Base):
    tree = Tree.VERSIONS

    def listed(self) -> bool:
        """Reachable by name; listed at the root only on request, so that a
        recursive search from the root skips every old version."""
        return self.options.versions == "visible"

    def __init__(self, engine: EngineAPI, gen: Generation, options: MountOptions) -> None:
        super().__init__(engine, gen, options)
        self._index = _Cached(gen, lambda: _Index(str(p) for p in engine.history.versioned_paths()))
        self._snaps = _Cached(gen, self._build_snapshots)
        self._snap_access: dict[str, Mapping[RelPath, Access]] = {}

    def _build_snapshots(self) -> dict[str, tuple[_Index, Mapping[RelPath, Hash]]]:
        out: dict[str, tuple[_Index, Mapping[RelPath, Hash]]] = {}
        recorded: dict[str, Mapping[RelPath, Access]] = {}
        for name in self.engine.history.snapshots():
            manifest = self.engine.history.snapshot_manifest(name)
            out[name] = (_Index(str(r) for r in manifest), manifest)
            recorded[name] = self.engine.evidence.snapshot_accesses(name)
        self._snap_access = recorded  # built in a worker thread: swapped whole
        return out

    def _snapshot_access(self, name: str, rel: str) -> Access:
        """A snapshot's file or folder: who could read it then and can now."""
        then = self._snap_access.get(name, {}).get(RelPath(rel))
        now = self.access(rel)
        return now if then is None else permissions.then_and_now(then, now)

    def index(self) -> _Index:
        return self._index.get()

    def snapshots(self) -> dict[str, tuple[_Index, Mapping[RelPath, Hash]]]:
        return self._snaps.get()

    def _versions(self, rel: str) -> dict[str, Version]:
        """The entries of ``rel``'s folder: each version whose bytes are
        kept, and a ``.not-kept`` note for each whose bytes a delete or
        truncate on a full disk destroyed unkept (other versions without
        bytes, such as files too large to keep, are left out)."""
        out = {}
        for v in self.engine.history.versions(RelPath(rel)):
            if v.available:
                out[version_name(rel, v)] = v
            elif v.not_kept is not None:
                out[version_name(rel, v) + NOT_KEPT_SUFFIX] = v
        return out

    def _version_entry(self, rel: str, v: Version) -> Entry | None:
        now = self.access(rel)
        access = now if v.access is None else permissions.then_and_now(v.access, now)
        xattrs = {"hash": v.hash, "recorded_at": iso(v.recorded_at), "cause": str(v.cause)}
        if not v.available:
            note = (
                f"{rel}: version {v.number} (b3:{v.hash}, {v.size or 0} bytes, "
                f"recorded {iso(v.recorded_at)}): bytes not kept: {v.not_kept}\n"
            ).encode("utf-8", "surrogateescape")
            return Entry(
                False,
                access,
                size=len(note),
                mtime_ns=int(v.recorded_at * 1e9),
                xattrs={**xattrs, "not_kept": v.not_kept or ""},
                data=note,
            )
        blob = self.engine.history.version_ref(RelPath(rel), v.number)
        native = None
        if blob is None:
            state = self.engine.workspace.file_state(RelPath(rel))
            if state is None or state.hash != v.hash:
                return None
            native = rel
        size = v.size
        if size is None:
            size = (self.engine.workspace.blob_size(v.hash) or 0) if blob is not None else 0
        return Entry(
            False,
            access,
            size=size,
            mtime_ns=int(v.recorded_at * 1e9),
            xattrs=xattrs,
            blob=blob,
            native=native,
        )

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        return await self.call(self._entry, path)

    def _entry(self, path: str) -> Entry | None:
        """In a worker thread: versions, blobs and snapshots are store reads."""
        if path == SNAPSHOTS or path.startswith(SNAPSHOTS + "/"):
            return self._snapshot_entry(path[len(SNAPSHOTS) + 1 :])
        idx = self._index.get(fresh=False)
        parent = path.rpartition("/")[0]
        if not {path, parent} & idx.leaves and path not in idx.dirs:
            idx = self._index.get()
        if path in idx.leaves:
            return self.dir_entry(path)
        parent, _, name = path.rpartition("/")
        if parent in idx.leaves:
            v = self._versions(parent).get(name)
            return None if v is None else self._version_entry(parent, v)
        if path in idx.dirs:
            return self.dir_entry(path)
        return None

    def _snapshot_entry(self, sub: str) -> Entry | None:
        if not sub:
            return self.dir_entry("")
        name, _, rel = sub.partition("/")
        snap = self.snapshots().get(name)
        if snap is None:
            return None
        idx, manifest = snap
        if not rel:
            return Entry(True, self._snapshot_access(name, ""), mtime_ns=self.started_ns)
        h = manifest.get(RelPath(rel))
        if h is not None:
            blob = self.engine.workspace.blob_ref(h)
            if blob is None:
                return None
            return Entry(
                False,
                self._snapshot_access(name, rel),
                size=self.engine.workspace.blob_size(h) or 0,
                mtime_ns=self.started_ns,
                xattrs={"hash": h},
                blob=blob,
            )
        if rel in idx.dirs:
            return Entry(True, self._snapshot_access(name, rel), mtime_ns=self.started_ns)
        return None

    def dir_stays(self, path: str, rels: AbstractSet[str]) -> bool:
        """Cheap, from the loop (mountd.invalidator): folder ``path`` surely
        still shows after ``rels`` changed, known without rebuilding the
        index of every versioned path: a changed file at or below it has
        versions (they go only with gc or reset).  False where only the
        index can tell (and for snapshots)."""
        if path == SNAPSHOTS or path.startswith(SNAPSHOTS + "/"):
            return False
        return any(self.engine.history.has_versions(RelPath(r)) for r in _at_or_below(path, rels))

    async def children(self, path: str) -> list[str]:
        return await self.call(self._children, path)

    def _children(self, path: str) -> list[str]:
        if path == SNAPSHOTS:
            return sorted(self.snapshots())
        if path.startswith(SNAPSHOTS + "/"):
            name, _, rel = path[len(SNAPSHOTS) + 1 :].partition("/")
            snap = self.snapshots().get(name)
            if snap is None:
                return []
            idx, manifest = snap
            return sorted(
                n
                for n in idx.dirs.get(rel, ())
                if (h := manifest.get(RelPath(f"{rel}/{n}" if rel else n))) is None
                or self.engine.workspace.blob_ref(h) is not None
            )
        idx = self.index()
        if path in idx.leaves:
            return sorted(self._versions(path))
        names = sorted(idx.dirs.get(path, ()))
        if not path:
            names = [SNAPSHOTS] + [n for n in names if n != SNAPSHOTS]
        return names


def make_trees(
    engine: EngineAPI, gen: Generation, options: MountOptions
) -> dict[Tree, ParsedTree | ReviewTree | VersionsTree]:
    """Every generated tree, by its top-level name: registering one is one
    line here (mountd.router derives the rest)."""
    return {
        Tree.PARSED: ParsedTree(engine, gen, options),
        Tree.REVIEW: ReviewTree(engine, gen, options),
        Tree.VERSIONS: VersionsTree(engine, gen, options),
    }
