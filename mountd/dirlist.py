"""Directory listings without OPENDIR: a warm walk sends no request per directory.

pyfuse3 as ``make install`` builds it (vendor/pyfuse3,
``no_opendir_available``) lets the daemon answer its first OPENDIR with
ENOSYS.  The kernel then sends no OPENDIR or RELEASEDIR for the rest of the
connection and opens every directory with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR
(fs/fuse/file.c, ``fuse_file_open``): the first READDIRs of a directory fill
its listing cache, and every later listing is served from it
(fs/fuse/readdir.c, ``fuse_readdir_cached``) until

* the daemon drops the directory's pages (``notify_inval_inode``: the
  invalidator does, for every change it learns of),
* the kernel changes the directory itself (a create, unlink or rename
  through the mount bumps its i_version), or
* a listing from the start finds the directory's mtime changed since the
  cache was started (the kernel refreshes expired attributes first).

What that asks of the daemon, and how it is met:

* A READDIR names its directory by inode and carries no handle
  (``readdir``).  The listing taken at offset 0 is kept for the READDIRs
  that continue it (``Listings``: one per directory, until its end is
  replied), and an entry's offset is its position in it, as it was in a
  listing kept per open.  Offsets must mean the same place from one
  listing to the next for the kernel's cache: a fill it left halfway (a
  reader that stopped early, pages dropped meanwhile) is resumed by the
  next reader that reaches the same offset.  A READDIR that finds no kept
  listing reads the current one from that position; two processes listing
  one directory while it changes may then see an entry twice or miss one
  that moved, as with any position cookie.
* The access journal records a listing at its READDIR at offset 0.  A
  listing the kernel serves from its cache reaches no daemon: it is
  recorded when the kernel asks, not again for each process that repeats it.
* Only directories whose every change is invalidated keep their listing in
  the kernel:

  - the native tree;
  - each file's directory of ``.parsed`` (its units are named by the file's
    hash: a new hash, or the parse of one, is a change event for the file);
  - the root of ``.parsed`` and its folders, which mirror the native tree:
    a folder lists the names below it that have views, and that set changes
    only with a change event for a path below it (a file recorded, removed,
    renamed, parsed, found unsupported: ``Views.parsed_paths``).  The
    invalidator maps each event's path to the folders above it
    (``Invalidator._kept_above``: ``.parsed/a/b/`` and ``.parsed/a/`` for
    ``a/b/x.pdf``, which drops a folder that appeared or went with it);
  - ``.review`` and its folders: they list the changed files (and the
    root's summaries), which any change event may change, and every event
    drops every node of ``.review`` from the kernel's caches (its ``scope``
    is every file).

  A kept generated folder's mtime moves with each event that drops it
  (``Generation.below_ns``; for ``.review``, the last event), so a listing
  taken just before a change and cached by the kernel just after the
  invalidation is caught as the native tree's is (below).  Who may read it
  comes from the native folder: a chmod through the mount, or one behind it
  (the change feed), drops its attributes.

  Every other generated directory (``.search``, whose listing is the
  caller's own queries, ``.tab``, ``.render``, ``.versions``, whose
  ``@snapshots`` and versions change without a change event: a snapshot
  taken, a ``gc``) has its listing dropped from the kernel's cache at the
  READDIR that ends it (``_forget_listing``), before the reply that would
  mark the cache complete: every listing of it reaches the daemon, as with
  OPENDIR, and one made for one caller is never served to the next.  That
  takes no page lock a pending request holds (READDIR holds none while it
  waits), so it is safe inside the handler.  It drops the directory's
  attributes too: a path walk through it asks for them once after each
  listing.
* A new tab (``swfs tab new``) drops every listing the kernel keeps
  (``watch_tabs``), so the first listing of each directory in the tab is
  recorded for it (``unopened.md``).
* A reply that raced an invalidation (taken before a change, cached after
  the invalidation was sent) is caught at the next listing: the
  invalidation dropped the directory's attributes too, and its mtime moved.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pyfuse3
import trio

from mountd.nodes import Node, Tree
from mountd.provider import DirHandle, Mount
from swfs.evidence.tab import META, TAB_DIR

if TYPE_CHECKING:
    from mountd.synthetic import SyntheticTree

log = logging.getLogger(__name__)

KEPT = 256  # directories whose listing is kept for the READDIRs that continue it
TAB_POLL = 0.25  # seconds between looks at the current tab


class Listings:
    """The listing taken at offset 0, by directory inode, for the READDIRs
    that continue it."""

    def __init__(self, cap: int = KEPT) -> None:
        self.cap = cap
        self._kept: OrderedDict[int, list[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, ino: int, names: list[str]) -> None:
        self._kept[ino] = names
        self._kept.move_to_end(ino)
        while len(self._kept) > self.cap:
            self._kept.popitem(last=False)

    def get(self, ino: int) -> list[str] | None:
        return self._kept.get(ino)

    def drop(self, ino: int, names: list[str]) -> None:
        if self._kept.get(ino) is names:
            del self._kept[ino]


class Daemon(Mount, Protocol):
    """What READDIR without a handle and the kernel cache invalidation
    (``mountd.invalidator``) ask of the adapter (``mountd.operations.Operations``):
    passed in, so neither imports it."""

    listings: Listings
    mounted: bool  # pyfuse3 has a session: kernel notifications work
    no_opendir: bool
    trees: dict[Tree, SyntheticTree]

    async def listing(self, node: Node, fd: int | None = None) -> tuple[list[str], object]: ...
    async def reply_entries(
        self, h: DirHandle, start_id: int, token: pyfuse3.ReaddirToken, fd: int | None
    ) -> None: ...


async def readdir(
    ops: Daemon,
    node: Node,
    off: int,
    token: pyfuse3.ReaddirToken,
    ctx: pyfuse3.RequestContext,
) -> None:
    """Answer a READDIR of directory ``node`` from offset ``off`` (0: the
    start, which takes a new listing and journals it)."""
    provider = ops.router.route(node)
    names = None if off == 0 else ops.listings.get(node.ino)
    fd = provider.open_dir(node)
    try:
        if names is None:
            names, _ = await ops.listing(node, fd)
            ops.listings.keep(node.ino, names)
            if off == 0 and provider.evidence:
                ops.journal.on_list(ctx.pid, provider.dir_path(node), names[2:])
        if off >= len(names):
            # The end (the READDIR after the last entry): the listing is done.
            ops.listings.drop(node.ino, names)
            if not provider.keeps_listing(node):
                _forget_listing(ops, node.ino)
            return
        await ops.reply_entries(DirHandle(node, names), off, token, fd)
    finally:
        if fd is not None:
            os.close(fd)


def _forget_listing(ops: Daemon, ino: int) -> None:
    """The kernel drops what it cached of this listing (and the directory's
    attributes), before the end of the listing is replied."""
    if not ops.mounted:
        return
    try:
        pyfuse3.invalidate_inode(ino, attr_only=False)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            log.debug("invalidate_inode(%d): %s", ino, exc)


def _tab_stamp(meta: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(meta)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


async def watch_tabs(ops: Daemon) -> None:
    """Background work: when a new tab starts, drop every listing the
    kernel keeps, so each directory's next listing reaches the journal."""
    meta = Path(ops.engine.store_dir) / TAB_DIR / META
    last = _tab_stamp(meta)
    while True:
        await trio.sleep(TAB_POLL)
        now = _tab_stamp(meta)
        if now == last:
            continue
        last = now
        for node in ops.table.nodes():
            if node.is_dir and ops.router.route(node).keeps_listing(node):
                ops.invalidator.drop_listing(node.ino)
