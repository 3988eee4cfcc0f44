"""Kernel cache invalidation: background work owned by the daemon.

Engine change events (``changed``, from any thread), paths changed behind the
mount (``changed_behind``, from the change feed) and names found gone
(``gone``) are collected; ``run`` turns each batch into invalidations of the
kernel's inodes, entries and listings and sends them from a worker thread:
the kernel may wait on pages an in-flight request holds, so never from a
handler.  Started by the daemon's lifecycle with ``nursery.start(run)``,
ended by ``stop()``.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyfuse3
import trio

from mountd.dirlist import watch_tabs
from mountd.nodes import Node, Tree
from mountd.passthrough import split
from swfs.api import RelPath

if TYPE_CHECKING:
    from mountd.dirlist import Daemon
    from mountd.provider import Routes

log = logging.getLogger(__name__)


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

    def stop(self) -> None:
        self._cancel.cancel()

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
                await trio.to_thread.run_sync(_notify_kernel, todo)

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
        for rel in external:
            # The directory's entries changed: its attributes and any listing
            # the kernel keeps of it, unless what it was told still holds.
            parent = self.table.find_native(split(rel)[0])
            if parent is not None:
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
    for ino in todo.attrs:
        invalidate_attrs(ino)
    for ino in todo.inodes:
        try:
            pyfuse3.invalidate_inode(ino, attr_only=False)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                log.debug("invalidate_inode(%d): %s", ino, exc)
    for parent, name in todo.entries:
        try:
            pyfuse3.invalidate_entry_async(parent, name, ignore_enoent=True)
        except Exception:
            log.exception("invalidate_entry_async(%d, %r)", parent, name)
