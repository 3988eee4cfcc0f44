"""Kernel cache invalidation: background work owned by the daemon.

Engine change events (``changed``, from any thread), paths changed behind the
mount (``changed_behind``, from the change feed) and names found gone
(``gone``) are collected; ``run`` turns each batch into invalidations of the
kernel's inodes, entries and listings and sends them from a worker thread:
the kernel may wait on pages an in-flight request holds, so never from a
handler.  Started by the daemon's lifecycle with ``nursery.start(run)``,
ended by ``stop()``.

Entry invalidations go through ``EntrySender``, one parent directory per
thread: the kernel sends one only once it holds the parent's lock, which a
request in that directory the daemon has not answered holds (a lookup of a
unit whose parse is pending waits up to ``--wait-timeout``).  On one queue
(pyfuse3's ``invalidate_entry_async``) that held every entry invalidation
of the mount behind it: a file removed or renamed behind the mount stayed
visible for as long.  Now only that directory's entries wait, until its
request is answered.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyfuse3
import trio

from mountd import hop
from mountd.dirlist import watch_tabs
from mountd.nodes import Node, Tree
from mountd.passthrough import split
from swfs.api import RelPath

if TYPE_CHECKING:
    from mountd.dirlist import Daemon
    from mountd.provider import Routes

log = logging.getLogger(__name__)

#: Threads that send entry invalidations at most, each for one parent
#: directory at a time: so many directories held by unanswered requests at
#: once hold back the others.
ENTRY_SENDERS = 8
#: Seconds a batch of changes gathers before it is turned into invalidations.
GATHER = 0.002


def sig(st: os.stat_result) -> tuple[int, int, int]:
    """What the kernel was told of a native node (attributes, pages)."""
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def told(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """The same with the ctime, which every change of attributes moves (mode,
    owner, links, size), and the file type last: attributes the kernel holds
    with this are right."""
    return (st.st_ctime_ns, st.st_mtime_ns, st.st_size, st.st_ino, stat.S_IFMT(st.st_mode))


def _replaced(node: Node, st: os.stat_result | None) -> bool:
    """The backing file of ``node`` is another one now.  Its inode number is
    not enough: a file system hands a freed number straight to the next file
    (a file removed and a directory made in its place behind the mount), so
    a change of type says so too."""
    if st is None or (st.st_dev, st.st_ino) != node.key:
        return True
    was = node.told
    return isinstance(was, tuple) and was[-1] != stat.S_IFMT(st.st_mode)


@dataclass
class _Pending:
    rels: set[str] = field(default_factory=set)
    external: set[str] = field(default_factory=set)  # changed behind the mount
    entries: set[tuple[int, str]] = field(default_factory=set)  # names found gone
    listings: set[int] = field(default_factory=set)  # directories listed for one caller
    wake: trio.Event = field(default_factory=trio.Event)


class Invalidator:
    def __init__(self, ops: Daemon) -> None:
        self.ops = ops
        self.table = ops.table
        self._pending = _Pending()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel = trio.CancelScope()
        self.entries = EntrySender(lambda: self.ops.mounted)
        self.passes = 0  # batches turned into invalidations, ever
        self._threads = trio.CapacityLimiter(1)  # the notifications of one pass at a time

    def stop(self) -> None:
        self._cancel.cancel()
        self.entries.close()

    def gone(self, links: Iterable[tuple[int, str]]) -> None:
        """These names no longer lead to their node: the kernel drops them."""
        self._pending.entries.update(links)
        self._pending.wake.set()

    def drop_listing(self, ino: int) -> None:
        """The kernel drops its copy of this directory's listing (and its
        attributes), which was made for one caller (mountd.dirlist)."""
        self._pending.listings.add(ino)
        self._pending.wake.set()

    def changed(self, rel: RelPath) -> None:
        """Engine listener: what the engine shows for ``rel`` changed."""
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:  # called from a worker thread after all
            if self._token is not None:
                # Never block the engine's thread on the loop (it may hold a lock
                # a handler is about to wait for).
                self._token.run_sync_soon(self.changed, rel)
            return
        self.ops.gen.bump(str(rel))
        self._pending.rels.add(str(rel))
        self._pending.wake.set()

    def changed_behind(self, rels: list[str]) -> None:
        """Change feed: ``rels`` changed in SRC behind the mount (created,
        written, deleted, renamed, chmodded).  The kernel must drop what it
        keeps of them and of their directories (entries, attributes, pages,
        listings); what the engine recorded of them comes through ``_changed``."""
        self._pending.external.update(rels)
        self._pending.wake.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self._cancel:
            self._token = trio.lowlevel.current_trio_token()
            task_status.started()
            async with trio.open_nursery() as nursery:
                if self.ops.no_opendir and self.ops.journal.enabled and Tree.TAB in self.ops.trees:
                    nursery.start_soon(watch_tabs, self.ops)  # listings as evidence per tab
                await self._loop()

    async def _loop(self) -> None:
        while True:
            await self._pending.wake.wait()
            # A burst of changes (a checkout, an unpack) comes as one record
            # after another: let more of it gather, so that it costs one pass
            # (one lstat of each folder, one trip to a thread), not one each.
            await trio.sleep(GATHER)
            rels, gone = self._pending.rels, self._pending.entries
            external, listings = self._pending.external, self._pending.listings
            self._pending = _Pending()
            todo = self._invalidations(rels, external)
            todo.entries += [(ino, os.fsencode(name)) for ino, name in gone]
            todo.inodes = sorted(set(todo.inodes) | listings)
            listed: dict[tuple[Tree, str], set[str]] = {}
            changed = rels | external
            for node in todo.dirs:
                if self._stays(node, changed):
                    continue
                # A generated directory keeps its dentry (a shell may sit in it)
                # unless it is gone.  Asked of its parent's listing, which is
                # rebuilt after a change (a lookup may still be answered from
                # the listing of a moment ago).
                head, name = split(node.spath)
                key = (node.tree, head)
                if key not in listed:
                    try:
                        listed[key] = set(await self.ops.router.provider(node.tree).children(head))
                    except pyfuse3.FUSEError:
                        listed[key] = set()
                if name not in listed[key]:
                    todo.entries += self._synthetic_link(node)
            if self.ops.mounted:
                if todo.inodes or todo.attrs:  # else no thread to start
                    await hop.run_sync(_notify_kernel, todo, limiter=self._threads)
                if todo.entries:
                    self.entries.send(todo.entries)
            self.passes += 1

    def _stays(self, node: Node, changed: AbstractSet[str]) -> bool:
        """Whether generated folder ``node`` surely still shows after
        ``changed``, as its tree can tell cheaply (``dir_stays``); False
        (ask its parent's listing) where it cannot."""
        try:
            return self.ops.router.provider(node.tree).dir_stays(node.spath, changed)
        except Exception:
            log.exception("%s: dir_stays(%r) failed", node.tree, node.spath)
            return False

    def _invalidations(
        self, rels: set[str], external: AbstractSet[str] = frozenset()
    ) -> _Invalidation:
        """What to drop from the kernel's caches after what the engine shows
        for ``rels`` changed, and ``external`` paths changed behind the mount."""
        inodes: set[int] = set()
        attrs: set[int] = set()
        entries: list[tuple[int, bytes]] = []
        dirs: list[Node] = []
        synthetic: list[Node] = []
        looked: set[int] = set()  # directories compared already (one lstat each)
        for rel in external:
            # The directory's entries changed: its attributes and any listing
            # the kernel keeps of it, unless what it was told still holds.
            parent = self.table.find_native(split(rel)[0])
            if parent is not None and parent.ino not in looked:
                looked.add(parent.ino)
                st = self._lstat(self.table.path(parent) or "")
                if st is None or sig(st) != parent.attr_sig:
                    inodes.add(parent.ino)
                    parent.cache_sig = None
        for rel in rels | external:
            node = self.table.find_native(rel)
            if node is not None and node is not self.table.root:
                st = self._lstat(rel)
                if st is None or _replaced(node, st):
                    parent = self.table.find_native(split(rel)[0])
                    if st is None or parent is None:
                        inodes.add(node.ino)
                    # Replaced: the name goes, and the old file's attributes
                    # stay as they were (asked now, they would be the new
                    # file's, maybe of another type: a bad inode, EIO).
                    if parent is not None:
                        entries.append((parent.ino, os.fsencode(split(rel)[1])))
                        # The listing the kernel keeps of it names the old file.
                        inodes.add(parent.ino)
                elif node.cache_sig is not None and sig(st) != node.cache_sig:
                    # Changed behind the kernel's back.  (Pages it was never
                    # told to keep, its next open drops: mountd.native.)
                    inodes.add(node.ino)
                elif told(st) != node.told:
                    # Written through the mount: the kernel's pages are right,
                    # its attributes need not be (an O_TRUNC that cleared set-id
                    # bits).  Not when only the views changed (a parse ended):
                    # the next stat would ask for nothing new.
                    attrs.add(node.ino)
            elif node is None and rel in rels:
                # A file the kernel holds no node of (a listing gives it one
                # for each entry) may have appeared, as a removal discarded
                # in a staged mount does: a listing it keeps lacks it.
                parent = self.table.find_native(split(rel)[0])
                if parent is not None and self._lstat(rel) is not None:
                    inodes.add(parent.ino)
        router = self.ops.router
        for rel in external:
            # Who may read it may have changed (a chmod behind the mount): the
            # generated nodes that show it take their owner and bits from it.
            for tree, prefix in router.below(rel):
                if prefix == rel:
                    attrs.update(n.ino for n in self.table.synthetic_below(tree, prefix))
        if not rels:  # nothing the engine shows changed: the generated trees hold
            return _Invalidation(sorted(inodes), sorted(attrs - inodes), entries, dirs)
        below = {key for rel in rels for key in router.below(rel)}
        for tree, prefix in sorted(below):
            synthetic += self.table.synthetic_below(tree, prefix)
        # The folders above: a kept listing of each names the path, or the
        # folder that holds it, which may have appeared or gone with it.
        kept, emptied = self._kept_above({rel for rel in rels if rel}, router)
        inodes.update(n.ino for n in kept)
        dirs += emptied
        for n in synthetic:
            inodes.add(n.ino)
            if n.spath:
                if n.is_dir:
                    dirs.append(n)
                else:
                    entries += self._synthetic_link(n)
        for tree in router.trees:
            root = self.table.find_synthetic(tree, "")
            if root is not None:
                inodes.add(root.ino)
        return _Invalidation(sorted(inodes), sorted(attrs - inodes), entries, dirs)

    def _kept_above(self, rels: AbstractSet[str], router: Routes) -> tuple[list[Node], list[Node]]:
        """The generated folders above ``rels`` whose listing the kernel keeps
        (in the trees whose paths start with a source file's path: a folder
        lists the names below it), and those of them that may be gone with
        a path below them (one no longer a file: removed, renamed away)."""
        trees = [t for t, source in router.trees.items() if source.scope == "file"]
        above: dict[str, list[Node]] = {}  # folder of a path -> the kept folders above it
        kept: dict[int, Node] = {}
        gone: dict[int, Node] = {}
        for rel in sorted(rels):
            folder = split(rel)[0]
            found = above.get(folder)
            if found is None:
                found = []
                head: str | None = folder
                while head is not None:
                    for tree in trees:
                        node = self.table.find_synthetic(tree, head)
                        if node is not None and node.listing_kept:
                            found.append(node)
                    head = split(head)[0] if head else None
                above[folder] = found
            for node in found:
                kept[node.ino] = node
            if any(n.spath and n.ino not in gone for n in found):
                st = self._lstat(rel)
                if st is None or not stat.S_ISREG(st.st_mode):
                    gone.update((n.ino, n) for n in found if n.spath)
        return list(kept.values()), list(gone.values())

    def _synthetic_link(self, node: Node) -> list[tuple[int, bytes]]:
        """[(parent inode, name)] of a generated node below its tree's root
        (none if the kernel no longer holds the parent)."""
        head, name = split(node.spath)
        parent = self.table.find_synthetic(node.tree, head)
        return [] if parent is None else [(parent.ino, os.fsencode(name))]

    def _lstat(self, rel: str) -> os.stat_result | None:
        try:
            return self.ops.native.lstat(rel)
        except OSError:
            return None


def invalidate_attrs(ino: int) -> None:
    try:
        pyfuse3.invalidate_inode(ino, attr_only=True)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.debug("invalidate_inode(%d, attr_only): %s", ino, exc)


@dataclass
class _Invalidation:
    inodes: list[int]  # attributes and pages
    attrs: list[int]  # attributes only
    entries: list[tuple[int, bytes]]  # dentries: (parent inode, name)
    dirs: list[Node]  # generated directories: their dentry goes if they are gone


def _notify_kernel(todo: _Invalidation) -> None:
    """Attributes and pages (entries: ``EntrySender``)."""
    for ino in todo.attrs:
        invalidate_attrs(ino)
    for ino in todo.inodes:
        try:
            pyfuse3.invalidate_inode(ino, attr_only=False)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.debug("invalidate_inode(%d): %s", ino, exc)


class EntrySender:
    """Sends entry invalidations from up to ``workers`` threads, started as
    work comes and ended when it is done, each sending the names of one
    parent directory at a time (in the order they came, each name once).
    No two threads send for one parent: a parent whose lock the kernel
    holds for an unanswered request holds one thread and its own names,
    never the other directories'.  ``send`` never blocks (any thread)."""

    def __init__(self, mounted: Callable[[], bool], workers: int = ENTRY_SENDERS) -> None:
        self._mounted = mounted
        self._workers = workers
        self._lock = threading.Lock()
        self._todo: dict[int, dict[bytes, None]] = {}  # parent -> names, oldest first
        self._busy: set[int] = set()  # parents a thread is sending for
        self._running = 0  # threads started and not ended
        self._closed = False

    def send(self, entries: Iterable[tuple[int, bytes]]) -> None:
        with self._lock:
            if self._closed:
                return
            for parent, name in entries:
                self._todo.setdefault(parent, {})[name] = None
            ready = len(self._todo) - len(self._busy & self._todo.keys())
            free = self._running - len(self._busy)
            while free < ready and self._running < self._workers:
                threading.Thread(target=self._work, name="swfs-inval-entry", daemon=True).start()
                self._running += 1
                free += 1

    def close(self) -> None:
        """Send nothing more (the threads end after the name they are at)."""
        with self._lock:
            self._closed = True
            self._todo.clear()

    def _work(self) -> None:
        while True:
            with self._lock:
                parent = next((p for p in self._todo if p not in self._busy), None)
                if parent is None or self._closed:
                    self._running -= 1
                    return
                names = self._todo.pop(parent)
                self._busy.add(parent)
            try:
                for name in names:
                    if self._closed or not self._mounted():
                        break
                    _invalidate_entry(parent, name)
            finally:
                with self._lock:
                    self._busy.discard(parent)


def _invalidate_entry(parent: int, name: bytes) -> None:
    """Blocks while the kernel holds ``parent``'s lock (a request in it)."""
    try:
        pyfuse3.invalidate_entry(parent, name)
    except OSError as exc:
        if exc.errno != errno.ENOENT:  # the kernel holds no such entry
            log.debug("invalidate_entry(%d, %r): %s", parent, name, exc)
    except Exception:
        log.exception("invalidate_entry(%d, %r)", parent, name)
