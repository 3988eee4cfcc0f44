"""The inode table: FUSE inode numbers for native and generated nodes.

A native node is keyed by the backing file's identity ``(st_dev, st_ino)``, so
hard links share one FUSE inode (and one kernel page cache) like on the
backing file system.  Its number is the backing inode number itself (files
on other devices below SRC get one from a map kept for the daemon's life),
so ``st_ino`` stays what it was after a rename, and after the kernel forgets
a node and looks it up again, as on the backing file system; no descriptor
is held per inode.  It remembers the directory entries ``(parent inode,
name)`` that lead to it, most recent last; its path is computed through its
parent, so renaming a directory moves everything below it for free.

A generated node is keyed by ``(tree, path)``; its path never changes.

A node lives while the kernel holds a lookup reference, a file handle is open
on it, or a live node names it as parent.

A native file replaced by a rename while the kernel holds its node keeps a
descriptor (``Held``, an O_PATH one) until the kernel forgets the node, for
``HOLD_SECONDS`` at most and ``HOLD_MAX`` nodes at once: a process whose
lookup had just found the old file still gets its attributes and opens it,
as on the backing file system, instead of finding no file at all.
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import NewType

log = logging.getLogger(__name__)

Inode = NewType("Inode", int)
ROOT_INODE = Inode(1)
# Native nodes of SRC's device are numbered by their backing inode number,
# below FOREIGN_BASE.  Above it: files of other devices (and a same-device
# file whose number FUSE reserves), then generated nodes.
FOREIGN_BASE = 1 << 60
SYNTHETIC_BASE = 1 << 61

Link = tuple[Inode, str]  # (parent inode, name)


class Tree(enum.StrEnum):
    NATIVE = "native"
    PARSED = ".parsed"
    REVIEW = ".review"
    VERSIONS = ".versions"
    SEARCH = ".search"
    RENDER = ".render"
    TAB = ".tab"


# How long, and for how many nodes at most, a replaced file stays held.
HOLD_SECONDS = 10.0
HOLD_MAX = 256


@dataclass(eq=False)
class Held:
    """A native file no name leads to any more, still held open."""

    fd: int  # an O_PATH descriptor of it
    st: os.stat_result  # its stat when held, as the mount showed it
    rel: str  # the name it had
    hash: str | None  # its recorded content hash then, if the record was current
    until: float = 0.0  # time.monotonic() after which it is let go (set by ``hold``)


SYNTHETIC_TREES = (Tree.PARSED, Tree.REVIEW, Tree.VERSIONS, Tree.SEARCH, Tree.RENDER, Tree.TAB)


@dataclass(eq=False)
class Node:
    ino: Inode
    tree: Tree
    key: Hashable
    spath: str = ""  # generated nodes: '/'-separated path inside the tree ('' = its root)
    links: dict[Link, None] = field(default_factory=dict)  # native nodes only
    lookups: int = 0
    opens: int = 0
    children: int = 0
    # What the kernel's page cache holds: a file's bytes (see open), a
    # directory's listing (see opendir).
    cache_sig: object = None
    attr_sig: object = None  # native: the attributes last reported to the kernel
    told: object = None  # native: their ctime with them (mountd.invalidator.told)
    listing_kept: bool = False  # generated: the kernel keeps the directory's listing
    size: int = -1  # generated: the size last reported to the kernel
    is_dir: bool = False  # generated: a directory, as last reported to the kernel
    # Native: bumped when the backing inode number comes back for a new file
    # while the kernel may still hold the old one (a removed directory some
    # process sits in): the kernel then drops the dead inode instead of
    # taking the new directory for it.
    generation: int = 0
    gone: bool = False  # the backing file was removed through the mount
    # Native: the backing file's own extended attribute names as last listed,
    # while the change feed watches the tree (mountd.native.own_xattr); None
    # when not known.
    xattrs: frozenset[str] | None = None
    held: Held | None = None  # native: replaced by a rename, still held (the module's doc)

    @property
    def native(self) -> bool:
        return self.tree is Tree.NATIVE


def _parent(spath: str) -> str:
    return spath.rpartition("/")[0]


class InodeTable:
    def __init__(self, root_key: tuple[int, int]) -> None:
        self._dev = root_key[0]
        self._next = SYNTHETIC_BASE
        self._next_foreign = FOREIGN_BASE
        # Numbers handed out to backing files outside the numbering by inode:
        # kept after their nodes go, so they stay stable too.
        self._foreign: dict[Hashable, Inode] = {}
        self._nodes: dict[Inode, Node] = {}
        self._by_key: dict[tuple[Tree, Hashable], Node] = {}
        self._by_link: dict[Link, Node] = {}
        self._kids: dict[tuple[Tree, str], set[Node]] = {}  # generated nodes by parent path
        self._held: dict[Node, None] = {}  # nodes with a Held, oldest first
        self.root = Node(ROOT_INODE, Tree.NATIVE, root_key)
        self.root.lookups = 1  # the kernel never forgets the root
        self._add(self.root)

    def __len__(self) -> int:
        return len(self._nodes)

    def _add(self, node: Node) -> None:
        self._nodes[node.ino] = node
        self._by_key[(node.tree, node.key)] = node

    def _new_ino(self) -> Inode:
        ino = Inode(self._next)
        self._next += 1
        return ino

    def _native_ino(self, key: Hashable) -> Inode:
        """The number of backing file ``key``: the same for as long as the
        daemon runs, whether or not the kernel holds it meanwhile."""
        if isinstance(key, tuple) and len(key) == 2:
            dev, ino = key
            if dev == self._dev and ROOT_INODE < ino < FOREIGN_BASE:
                return Inode(ino)
        number = self._foreign.get(key)
        if number is None:
            number = Inode(self._next_foreign)
            self._next_foreign += 1
            self._foreign[key] = number
        return number

    def nodes(self) -> list[Node]:
        """Every node the kernel may hold."""
        return list(self._nodes.values())

    def get(self, ino: int) -> Node | None:
        return self._nodes.get(Inode(ino))

    # -- native nodes

    def native(self, parent: Node, name: str, key: Hashable) -> Node:
        """The node for the backing file ``key`` found as ``name`` in ``parent``."""
        link = (parent.ino, name)
        node = self._by_key.get((Tree.NATIVE, key))
        if node is None:
            node = Node(self._native_ino(key), Tree.NATIVE, key)
            self._add(node)
        elif node.gone:
            node.gone = False
            node.generation += 1
        self.add_link(node, link)
        return node

    def unnamed(self, key: Hashable) -> Node:
        """The node for backing file ``key``, made without a name (an O_TMPFILE
        file): it has none until a link gives it one."""
        node = self._by_key.get((Tree.NATIVE, key))
        if node is None:
            node = Node(self._native_ino(key), Tree.NATIVE, key)
            self._add(node)
        elif node.gone:
            node.gone = False
            node.generation += 1
        return node

    def add_link(self, node: Node, link: Link) -> None:
        old = self._by_link.get(link)
        if old is node:
            # Refresh recency: the most recently seen name is the one used.
            del node.links[link]
            node.links[link] = None
            return
        if old is not None:
            self.remove_link(link)
        node.links[link] = None
        self._by_link[link] = node
        parent = self._nodes.get(link[0])
        if parent is not None:
            parent.children += 1

    def remove_link(self, link: Link) -> Node | None:
        node = self._by_link.pop(link, None)
        if node is None:
            return None
        node.links.pop(link, None)
        parent = self._nodes.get(link[0])
        if parent is not None:
            parent.children -= 1
            self._maybe_drop(parent)
        self._maybe_drop(node)
        return node

    def move_link(self, old: Link, new: Link) -> None:
        node = self._by_link.get(old)
        if node is None:
            self.remove_link(new)
            return
        node.opens += 1  # keep it alive between the two steps
        self.remove_link(old)
        self.add_link(node, new)
        node.opens -= 1

    def exchange_links(self, a: Link, b: Link) -> None:
        na, nb = self._by_link.get(a), self._by_link.get(b)
        for node in (na, nb):
            if node is not None:
                node.opens += 1
        self.remove_link(a)
        self.remove_link(b)
        if na is not None:
            self.add_link(na, b)
            na.opens -= 1
        if nb is not None:
            self.add_link(nb, a)
            nb.opens -= 1

    def removed(self, link: Link) -> None:
        """The file at ``link`` was removed, and its backing inode with it: a
        new file may get its number."""
        node = self._by_link.get(link)
        if node is not None:
            node.gone = True
        self.remove_link(link)

    def find_key(self, key: Hashable) -> Node | None:
        """The live native node of backing file ``key``, if any."""
        return self._by_key.get((Tree.NATIVE, key))

    def child(self, parent: Node, name: str) -> Node | None:
        return self._by_link.get((parent.ino, name))

    def paths(self, node: Node) -> Iterator[str]:
        """The native node's relative paths, most recently used first."""
        if node is self.root:
            yield ""
            return
        for parent_ino, name in reversed(list(node.links)):
            parent = self._nodes.get(parent_ino)
            if parent is None:
                continue
            parent_path = self.path(parent)
            if parent_path is None:
                continue
            yield f"{parent_path}/{name}" if parent_path else name

    def path(self, node: Node) -> str | None:
        # Every open asks: walk up while each node has one name (the usual
        # case) without a generator per level; else the general way.
        parts: list[str] = []
        cur, root, nodes = node, self.root, self._nodes
        while cur is not root:
            if len(cur.links) != 1:
                return next(self.paths(node), None)
            ((parent_ino, name),) = cur.links
            parent = nodes.get(parent_ino)
            if parent is None:
                return None
            parts.append(name)
            cur = parent
        parts.reverse()
        return "/".join(parts)

    def find_native(self, rel: str) -> Node | None:
        node: Node | None = self.root
        for name in rel.split("/") if rel else ():
            assert node is not None
            node = self._by_link.get((node.ino, name))
            if node is None:
                return None
        return node

    # -- replaced files, held

    def hold(self, node: Node, held: Held) -> None:
        """``node``, a live node no name leads to any more, keeps ``held``
        (closed when the node goes, when it expires, or when too many are
        held: the oldest first)."""
        self.let_go(node)
        now = time.monotonic()
        self._expire(now)
        while len(self._held) >= HOLD_MAX:
            self.let_go(next(iter(self._held)))
        held.until = now + HOLD_SECONDS
        node.held = held
        self._held[node] = None

    def held(self, node: Node) -> Held | None:
        """What ``node`` holds, if it has not expired."""
        held = node.held
        if held is not None and time.monotonic() > held.until:
            self.let_go(node)
            return None
        return held

    def let_go(self, node: Node) -> None:
        held = node.held
        if held is None:
            return
        node.held = None
        self._held.pop(node, None)
        os.close(held.fd)

    def _expire(self, now: float) -> None:
        while self._held:
            node = next(iter(self._held))
            held = node.held
            if held is not None and held.until >= now:
                return
            self.let_go(node)
            self._held.pop(node, None)  # (a node without a Held: never, but never loop)

    # -- generated nodes

    def synthetic(self, tree: Tree, spath: str) -> Node:
        node = self._by_key.get((tree, spath))
        if node is None:
            node = Node(self._new_ino(), tree, spath, spath=spath)
            self._add(node)
            if spath:
                self._kids.setdefault((tree, _parent(spath)), set()).add(node)
        return node

    def find_synthetic(self, tree: Tree, spath: str) -> Node | None:
        return self._by_key.get((tree, spath))

    def synthetic_below(self, tree: Tree, spath: str) -> list[Node]:
        """The known generated nodes at ``spath`` and below it."""
        out = []
        node = self._by_key.get((tree, spath))
        if node is not None:
            out.append(node)
        todo = [spath]
        while todo:
            for kid in self._kids.get((tree, todo.pop()), ()):
                out.append(kid)
                todo.append(kid.spath)
        return out

    # -- reference counting

    def remember(self, node: Node) -> None:
        """The kernel got a new reference (lookup, create, readdirplus entry)."""
        node.lookups += 1

    def forget(self, ino: int, count: int) -> None:
        node = self._nodes.get(Inode(ino))
        if node is None or node is self.root:
            return
        if count > node.lookups:
            log.warning("forget(%d, %d) beyond lookup count %d", ino, count, node.lookups)
        node.lookups = max(0, node.lookups - count)
        self._maybe_drop(node)

    def opened(self, node: Node) -> None:
        node.opens += 1

    def closed(self, node: Node) -> None:
        node.opens -= 1
        self._maybe_drop(node)

    def discard_unused(self, node: Node) -> None:
        """Drop a node made for a reply that never reached the kernel."""
        self._maybe_drop(node)

    def _maybe_drop(self, node: Node) -> None:
        if node is self.root or node.lookups or node.opens or node.children:
            return
        if self._nodes.get(node.ino) is not node:
            return
        del self._nodes[node.ino]
        self._by_key.pop((node.tree, node.key), None)
        if not node.native and node.spath:
            key = (node.tree, _parent(node.spath))
            kids = self._kids.get(key)
            if kids is not None:
                kids.discard(node)
                if not kids:
                    del self._kids[key]
        for link in list(node.links):
            if self._by_link.get(link) is node:
                self.remove_link(link)
        node.links.clear()
        self.let_go(node)
