"""The kernel-facing adapter: decode a FUSE request, route it to the native
passthrough or a generated tree by the top-level name, answer attributes or
raise FUSEError.  Nothing else may leave a handler."""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pyfuse3

from mountd.caller import REQUEST
from mountd.fastpath import FastPath
from mountd.fsutil import open_beneath
from mountd.invalidator import Invalidator, invalidate_attrs
from mountd.invalidator import sig as _sig
from mountd.nodes import InodeTable, Node, Tree
from mountd.options import MountOptions
from mountd.passthrough import (
    Creds,
    NativeHandle,
    Passthrough,
    SetAttr,
    join,
    split,
)
from mountd.poll import Poller
from mountd.render import RenderTree
from mountd.router import Router
from mountd.searchtree import SearchTree
from mountd.synthetic import Entry, Generation, ReviewTree, SyntheticTree, make_trees
from mountd.tabtree import TabTree
from swfs.api import XATTR_PREFIX, EngineAPI, RelPath
from swfs.journal import hash_lookup, open_journal

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

BLOCK = 4096

# pyfuse3 as `make install` builds it (scripts/pyfuse3-dircache.patch) lets
# opendir ask the kernel to keep a directory's listing, and open skip FLUSH.
# Stock pyfuse3 works too, with a request more per close and four per listing.
KERNEL_DIR_CACHE = hasattr(pyfuse3.FileInfo, "cache_readdir")
NOFLUSH = hasattr(pyfuse3.FileInfo, "noflush")


def handler(fn: F) -> F:
    """Turn anything but FUSEError into an errno, so one bad request can never
    end ``pyfuse3.main()``."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        # pyfuse3 passes the context last, where a request has one.
        ctx = args[-1] if isinstance(args[-1], pyfuse3.RequestContext) else None
        token = REQUEST.set(ctx)  # whose request this is (mountd.caller)
        try:
            poller = getattr(args[0], "poller", None)
            if poller is not None:
                poller.touch()  # the next request is likely close behind (mountd.poll)
            return await fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except OSError as exc:
            code = exc.errno or errno.EIO
            if code == errno.ENOSYS:  # would make the kernel stop asking for good
                code = errno.EOPNOTSUPP
            if code == errno.EIO:
                log.warning("%s: %s", fn.__name__, exc)
            raise pyfuse3.FUSEError(code) from None
        except Exception:
            log.exception("%s%r failed", fn.__name__, args[1:])
            raise pyfuse3.FUSEError(errno.EIO) from None
        finally:
            REQUEST.reset(token)

    return cast(F, wrapper)


def fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


@dataclass
class DataHandle:
    """A generated file, snapshotted at open: a re-parse mid-read never mixes
    two versions of a unit."""

    node: Node
    data: bytes


@dataclass
class FdHandle:
    """A read-only file the daemon opened for a generated node (a blob)."""

    node: Node
    fd: int


@dataclass
class NativeOpen:
    node: Node
    fh: NativeHandle
    direct: bool


@dataclass
class DirHandle:
    node: Node
    names: list[str] | None = None  # the listing replies index (with "." and "..")
    fresh: bool = False  # names were taken by opendir and no reply used them yet
    # The inode numbers replies gave for names[2:], while they answer with the
    # listing opendir vouched for (None after a rewind or a vanished entry).
    told: list[int | None] | None = None
    fd: int | None = None  # the native directory, open from opendir to releasedir


@dataclass
class TabHandle:
    """An open writable file of ``.tab/`` (requirements.md, a scratch file)."""

    node: Node
    append: bool


Handle = DataHandle | FdHandle | NativeOpen | DirHandle | TabHandle


class Operations(pyfuse3.Operations):
    supports_dot_lookup = False  # no NFS export: we never answer '..' lookups
    enable_writeback_cache = False
    # The kernel enforces POSIX ACLs (native ones pass through, so access
    # through the mount matches the backing tree) and caches them with the
    # attributes: `ls -l` then asks the daemon once per entry, not three times.
    enable_acl = True

    def __init__(self, engine: EngineAPI, src: str, store: str, options: MountOptions) -> None:
        super().__init__()
        self.engine = engine
        self.options = options
        self.src, self.store = src, store
        self.poller = Poller(options.poll_window)
        self.fastpath = FastPath(options.passthrough, journal=options.journal)  # mountd.fastpath
        self.fastpath.prepare(self, options.poll_window)
        self.native = Passthrough(engine, src, hidden=_hidden(src, store), poller=self.poller)
        root = os.fstat(self.native.root_fd)
        self.table = InodeTable((root.st_dev, root.st_ino))
        self.gen = Generation()
        self.journal = open_journal(
            engine.store_dir,
            enabled=options.journal,
            file_hash=hash_lookup(engine),
            src=engine.src,
            callers=options.callers,
        )
        # The generated trees, by top-level name (mountd.router).
        self.trees: dict[Tree, SyntheticTree] = dict(make_trees(engine, self.gen, options))
        self.trees[Tree.SEARCH] = SearchTree(engine, self.gen)
        self.trees[Tree.RENDER] = RenderTree(engine, self.gen, options)
        self.tab = TabTree(engine, self.gen, self.journal, shared=options.share_tab)
        self.trees[Tree.TAB] = self.tab
        if isinstance(review := self.trees[Tree.REVIEW], ReviewTree):
            review.lineage = self.journal  # .review/LINEAGE.md
        self.router = Router(self.trees)
        self.native.reserved = self.router.names
        self.handles: dict[int, Handle] = {}
        self._next_fh = 1
        self.mounted = False  # set once pyfuse3 has a session: kernel notifications work
        # Background work: engine change events -> kernel cache invalidations.
        self.invalidator = Invalidator(self)
        engine.add_listener(self.invalidator.changed)

    def close(self) -> None:
        self.journal.close()
        for h in self.handles.values():
            if isinstance(h, NativeOpen):
                os.close(h.fh.fd)
            elif isinstance(h, FdHandle):
                os.close(h.fd)
        self.handles.clear()
        self.native.close()

    # -- helpers

    def _node(self, ino: int) -> Node:
        node = self.table.get(ino)
        if node is None:
            raise fail(errno.ESTALE)
        return node

    def _path(self, node: Node) -> str:
        rel = self.table.path(node)
        if rel is None:
            raise fail(errno.ENOENT)
        return rel

    def _add_handle(self, h: Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = h
        return fh

    def _handle(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise fail(errno.EBADF)
        return h

    def _native_attr(self, node: Node, st: os.stat_result) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = node.generation
        a.entry_timeout = self.options.entry_timeout
        a.attr_timeout = self.options.attr_timeout
        a.st_mode = st.st_mode
        a.st_nlink = st.st_nlink
        a.st_uid = st.st_uid
        a.st_gid = st.st_gid
        a.st_rdev = st.st_rdev
        a.st_size = st.st_size
        a.st_blksize = st.st_blksize
        a.st_blocks = st.st_blocks
        a.st_atime_ns = st.st_atime_ns
        a.st_mtime_ns = st.st_mtime_ns
        a.st_ctime_ns = st.st_ctime_ns
        node.attr_sig = _sig(st)
        return a

    def _synthetic_attr(self, node: Node, e: Entry) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        a.entry_timeout = self.options.synthetic_timeout
        a.attr_timeout = self.options.synthetic_timeout
        if node.tree is Tree.TAB:
            # Written by the agent and by `swfs tab new`, built from each read:
            # the kernel asks again every time.
            a.entry_timeout = a.attr_timeout = 0
        a.st_mode = e.mode
        a.st_nlink = 2 if e.is_dir else 1
        a.st_uid = e.access.uid
        a.st_gid = e.access.gid
        a.st_size = e.size
        a.st_blksize = BLOCK
        a.st_blocks = (e.size + 511) // 512
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = e.mtime_ns
        node.size = e.size
        node.is_dir = e.is_dir
        return a

    def _tree(self, node: Node) -> SyntheticTree:
        return self.router.provider(node.tree)

    def _native_stat(self, node: Node) -> os.stat_result:
        """Stat through a name (preferring one that still leads to this inode),
        else through an open handle (an unlinked but open file)."""
        first: os.stat_result | None = None
        for rel in self.table.paths(node):
            try:
                st = self.native.lstat(rel)
            except FileNotFoundError:
                continue
            if node is self.table.root or (st.st_dev, st.st_ino) == node.key:
                return st
            first = first or st
        if first is not None:
            return first
        for h in self.handles.values():
            if isinstance(h, NativeOpen) and h.node is node:
                return os.fstat(h.fh.fd)
        self._gone_behind_our_back(node)
        raise fail(errno.ENOENT)

    def _gone_behind_our_back(self, node: Node) -> None:
        """``node``'s names no longer lead to it: have the kernel drop its cached
        entries (from the invalidation task, never from this handler)."""
        self.invalidator.gone(node.links)

    async def _entry(self, node: Node, *, wait: bool = False) -> Entry:
        e = await self._tree(node).entry(node.spath, wait=wait)
        if e is None:
            raise fail(errno.ENOENT)
        return e

    async def _attr(self, node: Node) -> pyfuse3.EntryAttributes:
        if node.native:
            return self._native_attr(node, self._native_stat(node))
        return self._synthetic_attr(node, await self._entry(node))

    async def _lookup(
        self, parent: Node, name: str, *, wait: bool = True
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """Find ``name`` in ``parent`` without taking a kernel reference."""
        top = self.router.top(name) if parent is self.table.root else None
        if top is not None:
            node = self.table.synthetic(top, "")
            return node, self._synthetic_attr(node, await self._entry(node))
        if parent.native:
            return self._native_child(
                parent, name, self.native.lstat(join(self._path(parent), name))
            )
        spath = join(parent.spath, name)
        e = await self._tree(parent).entry(spath, wait=wait)
        if e is None:
            raise fail(errno.ENOENT)
        node = self.table.synthetic(parent.tree, spath)
        return node, self._synthetic_attr(node, e)

    def _native_child(
        self, parent: Node, name: str, st: os.stat_result
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """The node and attributes of ``name`` in ``parent``, found as ``st``."""
        node = self.table.native(parent, name, (st.st_dev, st.st_ino))
        return node, self._native_attr(node, st)

    def _writable_parent(self, parent: Node, name: str | None = None) -> str:
        """The native path of a directory about to change; EROFS in generated trees."""
        if not parent.native:
            raise fail(errno.EROFS)
        if name is not None and parent is self.table.root and name in self.router.names:
            raise fail(errno.EPERM)
        return self._path(parent)

    @staticmethod
    def _creds(ctx: pyfuse3.RequestContext) -> Creds:
        return Creds(ctx.uid, ctx.gid, ctx.umask)

    def _created(self, parent: Node, name: str, st: os.stat_result) -> pyfuse3.EntryAttributes:
        node = self.table.native(parent, name, (st.st_dev, st.st_ino))
        self.table.remember(node)
        return self._native_attr(node, st)

    # -- lookups and attributes

    @handler
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        node, attr = await self._lookup(self._node(parent_inode), os.fsdecode(name))
        self.table.remember(node)
        return attr

    @handler
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            self.table.forget(ino, count)

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return await self._attr(self._node(inode))

    @handler
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        node = self._node(inode)
        if node.tree is Tree.TAB and self.tab.writable(node.spath):
            if fields.update_size:
                await self.tab.truncate(node.spath, attr.st_size)
            return await self._attr(node)  # times and modes of the tab are its own
        if not node.native:
            raise fail(errno.EROFS)
        handle = self.handles.get(fh) if fh is not None else None
        native_fh = handle.fh if isinstance(handle, NativeOpen) else None
        change = SetAttr(
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            size=attr.st_size if fields.update_size else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
        )
        if change == SetAttr():
            # Nothing but the change time: chown(f, -1, -1) on a file without
            # set-id bits (the kernel sends no FATTR_CTIME unless it keeps
            # times itself).
            change = SetAttr(ctime=True)
        rel = self._path(node)
        st = await self.native.setattr(rel, native_fh, change)
        if change.mode is not None or change.uid is not None or change.gid is not None:
            self._access_changed(rel)
        return self._native_attr(node, st)

    def _access_changed(self, rel: str) -> None:
        """Who may read ``rel`` changed: its generated nodes must not keep
        serving the old owner and bits from the kernel's attribute cache.
        Synchronous (attributes only, so safe here): when chmod returns, the
        views are closed too."""
        self.gen.bump(rel)
        nodes = [
            n for tree, at in self.router.below(rel) for n in self.table.synthetic_below(tree, at)
        ]
        for n in nodes:
            self._invalidate_attrs(n.ino)

    @handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        node = self._node(inode)
        if not node.native:
            raise fail(errno.EINVAL)
        return self.native.readlink(self._path(node))

    @handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        sv = self.native.statvfs()
        out = pyfuse3.StatvfsData()
        for name in (
            "f_bsize",
            "f_frsize",
            "f_blocks",
            "f_bfree",
            "f_bavail",
            "f_files",
            "f_ffree",
            "f_favail",
            "f_namemax",
        ):
            setattr(out, name, getattr(sv, name))
        return out

    # -- directory entries (native only)

    @handler
    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        st = await self.native.mknod(self._writable_parent(parent), n, mode, rdev, self._creds(ctx))
        return self._created(parent, n, st)

    @handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        st = await self.native.mkdir(self._writable_parent(parent), n, mode, self._creds(ctx))
        return self._created(parent, n, st)

    @handler
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        st = await self.native.symlink(self._writable_parent(parent), n, target, self._creds(ctx))
        return self._created(parent, n, st)

    @handler
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        node, parent, n = self._node(inode), self._node(new_parent_inode), os.fsdecode(new_name)
        if not node.native:
            raise fail(errno.EROFS)
        st = await self.native.link(self._path(node), self._writable_parent(parent), n)
        return self._created(parent, n, st)

    @handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        if parent.tree is Tree.TAB:
            await self.tab.unlink(join(parent.spath, n))
            return
        if await self.native.unlink(self._writable_parent(parent, n), n):
            self.table.removed((parent.ino, n))
        else:
            self.table.remove_link((parent.ino, n))
        self.journal.on_unlink(ctx.pid, join(self._path(parent), n))

    @handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        await self.native.rmdir(self._writable_parent(parent, n), n)
        self.table.removed((parent.ino, n))  # a directory has no other names

    @handler
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        old_parent, old = self._node(parent_inode_old), os.fsdecode(name_old)
        new_parent, new = self._node(parent_inode_new), os.fsdecode(name_new)
        if Tree.TAB in (old_parent.tree, new_parent.tree):
            if old_parent.tree is not new_parent.tree or flags:
                raise fail(errno.EXDEV)  # mv copies instead
            await self.tab.rename(join(old_parent.spath, old), join(new_parent.spath, new))
            return
        old_dir = self._writable_parent(old_parent, old)
        new_dir = self._writable_parent(new_parent, new)

        def moved() -> None:
            # Before the engine records the rename: the invalidations its record
            # triggers must see the new names, or they would drop the kernel's
            # entry of the renamed file under its new name.
            if flags & pyfuse3.RENAME_EXCHANGE:
                self.table.exchange_links((old_parent.ino, old), (new_parent.ino, new))
            else:
                self.table.move_link((old_parent.ino, old), (new_parent.ino, new))

        await self.native.rename(old_dir, old, new_dir, new, flags, moved)
        self.journal.on_rename(ctx.pid, join(old_dir, old), join(new_dir, new))

    # -- files

    @handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.native:
            fi = await self._open_native(node, flags, self._creds(ctx))
            self.journal.on_open(fi.fh, ctx.pid, self._path(node), flags=flags)
            return fi
        if node.tree is Tree.TAB:
            return await self._open_tab(node, flags)
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise fail(errno.EROFS)
        # A tree whose files are made on first open (.render) says so.
        opener = getattr(self._tree(node), "open_entry", None)
        e = await opener(node.spath) if opener is not None else await self._entry(node, wait=True)
        if e is None:
            raise fail(errno.ENOENT)
        fi = await self._open_synthetic(node, e)
        self.journal.on_open(fi.fh, ctx.pid, join(node.tree, node.spath), xattrs=e.xattrs)
        return fi

    async def _open_tab(self, node: Node, flags: int) -> pyfuse3.FileInfo:
        """``.tab/``: not journaled (the tab is no evidence); writable where
        the tab says so; always read from the daemon (direct I/O)."""
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            if not self.tab.writable(node.spath):
                raise fail(errno.EROFS)
            if flags & os.O_TRUNC:
                await self.tab.truncate(node.spath, 0)
            self.table.opened(node)
            fi = pyfuse3.FileInfo(fh=self._add_handle(TabHandle(node, bool(flags & os.O_APPEND))))
        else:
            e = await self._entry(node, wait=True)
            fi = await self._open_synthetic(node, e)
        fi.direct_io = True
        fi.keep_cache = False
        return fi

    async def _open_synthetic(self, node: Node, e: Entry) -> pyfuse3.FileInfo:
        if e.is_dir:
            raise fail(errno.EISDIR)
        if e.data is not None:
            if len(e.data) != node.size:
                self._invalidate_attrs(node.ino)  # the kernel must not cut the snapshot short
            # The kernel may keep its pages if they hold exactly these bytes.
            sig = (len(e.data), hash(e.data))
            keep, node.cache_sig = node.cache_sig == sig, sig
            self.table.opened(node)
            return _read_only(
                pyfuse3.FileInfo(fh=self._add_handle(DataHandle(node, e.data)), keep_cache=keep)
            )
        if e.blob is not None:
            # A chunked blob is reassembled on first open: not on the loop.
            fd = await self.native.slow(self.engine.open_blob, e.blob)
        elif e.native is not None:
            fd = open_beneath(self.native.root_fd, e.native, os.O_RDONLY)
        else:
            raise fail(errno.EIO)
        self.table.opened(node)
        return _read_only(
            pyfuse3.FileInfo(fh=self._add_handle(FdHandle(node, fd)), keep_cache=True)
        )

    async def _open_native(self, node: Node, flags: int, creds: Creds) -> pyfuse3.FileInfo:
        rel = self._path(node)
        try:
            fh = await self.native.open(rel, flags, creds)
        except FileNotFoundError:
            self._gone_behind_our_back(node)
            raise
        try:
            st = os.fstat(fh.fd)
        except BaseException:
            os.close(fh.fd)
            raise
        direct = bool(flags & os.O_DIRECT)
        sig = _sig(st)
        if sig != node.attr_sig or fh.written:
            # Changed behind the kernel's back (or by a hard link): its cached
            # size would cut reads short.  Or truncated here, maybe losing
            # set-id bits the kernel's cached mode still has.
            self._invalidate_attrs(node.ino)
            node.attr_sig = None
        keep = node.cache_sig == sig and not fh.written
        node.cache_sig = None if direct else sig
        self.table.opened(node)
        fi = pyfuse3.FileInfo(fh=self._add_handle(NativeOpen(node, fh, direct)))
        fi.direct_io = direct
        fi.keep_cache = keep
        if flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_TRUNC:
            _read_only(fi)
        try:
            await self.fastpath.opened(fi, fi.fh, node.ino, fh, flags, self.native.slow)
        except BaseException:
            await self.release(fi.fh)  # the kernel sends no RELEASE for a failed open
            raise
        return fi

    @handler
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        if parent.tree is Tree.TAB:
            spath = join(parent.spath, n)
            await self.tab.create(spath)
            tnode = self.table.synthetic(Tree.TAB, spath)
            tattr = self._synthetic_attr(tnode, await self._entry(tnode))
            self.table.remember(tnode)
            self.table.opened(tnode)
            tfi = pyfuse3.FileInfo(fh=self._add_handle(TabHandle(tnode, bool(flags & os.O_APPEND))))
            tfi.direct_io = True
            return tfi, tattr
        pdir = self._writable_parent(parent)
        if parent is self.table.root and n in self.router.names:
            raise fail(errno.EEXIST)
        fh, st = await self.native.create(pdir, n, mode, flags, self._creds(ctx))
        attr = self._created(parent, n, st)
        node = self._node(attr.st_ino)
        node.cache_sig = None
        self.table.opened(node)
        direct = bool(flags & os.O_DIRECT)
        fi = pyfuse3.FileInfo(fh=self._add_handle(NativeOpen(node, fh, direct)))
        fi.direct_io = direct
        try:
            await self.fastpath.opened(
                fi, fi.fh, node.ino, fh, flags, self.native.slow, created=True
            )
        except BaseException:
            await self.release(fi.fh)
            raise
        self.journal.on_open(fi.fh, ctx.pid, join(pdir, n), flags=flags)
        return fi, attr

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self._handle(fh)
        if isinstance(h, NativeOpen):
            data = os.pread(h.fh.fd, size, off)
        elif isinstance(h, DataHandle):
            data = h.data[off : off + size]
        elif isinstance(h, FdHandle):
            data = os.pread(h.fd, size, off)
        elif isinstance(h, TabHandle):
            return self.tab.content(h.node.spath)[off : off + size]
        else:
            raise fail(errno.EISDIR)
        self.journal.on_read(fh, off, len(data))
        return data

    @handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._handle(fh)
        if isinstance(h, TabHandle):
            return await self.tab.write(h.node.spath, off, buf, append=h.append)
        if not isinstance(h, NativeOpen):
            raise fail(errno.EBADF)
        return await self.native.write(h.fh, off, buf)

    @handler
    async def flush(self, fh: int) -> None:
        h = self._handle(fh)
        if isinstance(h, NativeOpen):
            self.fastpath.note_writes(fh, h.fh)  # passthrough writers (mountd.fastpath)
            if h.fh.wrote and not h.direct:
                # The kernel's pages hold what was written: the invalidation the
                # record below triggers need not drop them.
                h.node.cache_sig = _sig(os.fstat(h.fh.fd))
            recorded = h.fh.wrote
            await self.native.flush(h.fh)
            if recorded:
                self.journal.on_wrote(fh, h.fh.path())

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if isinstance(h, NativeOpen):
            self.fastpath.note_writes(fh, h.fh)
            recorded = h.fh.written
            await self.native.fsync(h.fh, datasync)
            if recorded:
                self.journal.on_wrote(fh, h.fh.path())

    @handler
    async def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None:
            return
        try:
            if isinstance(h, NativeOpen):
                self.fastpath.note_writes(fh, h.fh)
                self.fastpath.released(fh)
                if h.fh.written and not h.direct:
                    # The kernel's cache saw every write through this handle.
                    h.node.cache_sig = _sig(os.fstat(h.fh.fd))
                elif h.direct and h.fh.written:
                    h.node.cache_sig = None
                recorded = h.fh.written
                await self.native.release(h.fh)
                if recorded:
                    self.journal.on_wrote(fh, h.fh.path())
            elif isinstance(h, FdHandle):
                os.close(h.fd)
        finally:
            self.journal.on_close(fh)
            if not isinstance(h, DirHandle):
                self.table.closed(h.node)

    # -- directories

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int | pyfuse3.FileInfo:
        node = self._node(inode)
        if not KERNEL_DIR_CACHE:
            self.table.opened(node)
            fh = self._add_handle(DirHandle(node))
            if node.tree is not Tree.TAB:  # the tab is no evidence
                self.journal.on_opendir(fh, ctx.pid, self._dir_path(node))  # listed in readdir
            return fh
        # The kernel may serve the listing from its cache only if that is what
        # a reply would say now.  The listing taken here answers the first readdir.
        fd = self.native.open_dir(self._path(node)) if node.native else None
        try:
            names, sig = await self._listing(node, fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        keep, node.cache_sig = node.cache_sig == sig, sig
        self.table.opened(node)
        told: list[int | None] = [None] * (len(names) - 2)
        fh = self._add_handle(DirHandle(node, names, fresh=True, told=told, fd=fd))
        if node.tree is not Tree.TAB:
            self.journal.on_list(ctx.pid, self._dir_path(node), names[2:])
        return pyfuse3.FileInfo(fh=fh, keep_cache=keep, cache_readdir=True)

    async def _listing(self, node: Node, fd: int | None = None) -> tuple[list[str], object]:
        """The names directory ``node`` shows ("." and ".." first), and what a
        kernel's cached copy of them must match: each name with the inode
        number the kernel was told for it (None where it holds none now).
        ``fd``: the native directory, if the caller has it open."""
        table = self.table
        if not node.native:
            names = await self._tree(node).children(node.spath)
            found = [table.find_synthetic(node.tree, join(node.spath, n)) for n in names]
        else:
            rel = self._path(node)
            dfd = self.native.open_dir(rel) if fd is None else fd
            try:
                entries = self.native.entries(rel, dfd)
                dev = os.fstat(dfd).st_dev
            finally:
                if fd is None:
                    os.close(dfd)
            if node is table.root:
                entries = [(n, i) for n, i in entries if n not in self.router.names]
            names = [n for n, _ in entries]
            found = [table.find_key((dev, i)) for _, i in entries]
            if node is table.root:
                # Generated trees first; some are reachable by name only.
                shown = self.router.listed()
                names = shown + names
                found = [table.find_synthetic(Tree(n), "") for n in shown] + found
        inos = tuple(None if n is None else n.ino for n in found)
        return [".", "..", *names], (self._parent_ino(node), tuple(names), inos)

    def _dir_path(self, node: Node) -> str:
        return self._path(node) if node.native else join(node.tree, node.spath)

    def _dot_attr(self, ino: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = stat.S_IFDIR
        return a

    def _parent_ino(self, node: Node) -> int:
        if node.native:
            for parent_ino, _ in reversed(list(node.links)):
                return parent_ino
            return node.ino
        if not node.spath:
            return self.table.root.ino
        parent = self.table.find_synthetic(node.tree, split(node.spath)[0])
        return parent.ino if parent is not None else self.table.root.ino

    @handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        h = self._handle(fh)
        if not isinstance(h, DirHandle):
            raise fail(errno.ENOTDIR)
        if h.names is None or (start_id == 0 and not h.fresh):
            # A rewind lists again: what the kernel caches from here on is no
            # longer the listing opendir vouched for.
            h.names, _ = await self._listing(h.node, h.fd)
            self.journal.on_listed(fh, h.names[2:])
            h.node.cache_sig = h.told = None
        h.fresh = False
        if not h.node.native:
            await self._reply_entries(h, start_id, token, None)
        elif h.fd is not None:
            await self._reply_entries(h, start_id, token, h.fd)
        else:
            # One descriptor for every entry's stat in this reply.
            fd = self.native.open_dir(self._path(h.node))
            try:
                await self._reply_entries(h, start_id, token, fd)
            finally:
                os.close(fd)

    async def _reply_entries(
        self, h: DirHandle, start_id: int, token: pyfuse3.ReaddirToken, fd: int | None
    ) -> None:
        """Reply with ``h.names`` from ``start_id`` on (offsets index that
        listing, which stays fixed until a rewind); ``fd`` is the native
        directory's descriptor."""
        assert h.names is not None
        dnode = h.node
        for i in range(start_id, len(h.names)):
            name = h.names[i]
            if name in (".", ".."):
                ino = dnode.ino if name == "." else self._parent_ino(dnode)
                if not pyfuse3.readdir_reply(token, os.fsencode(name), self._dot_attr(ino), i + 1):
                    return
                continue
            try:
                if fd is not None and not (dnode is self.table.root and name in self.router.names):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    node, attr = self._native_child(dnode, name, st)
                else:
                    node, attr = await self._lookup(dnode, name, wait=False)
            except pyfuse3.FUSEError:
                dnode.cache_sig = h.told = None  # gone since the listing was taken
                continue
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    dnode.cache_sig = h.told = None
                    continue
                raise
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, i + 1):
                self.table.discard_unused(node)
                return
            self.table.remember(node)
            if h.told is not None:
                h.told[i - 2] = node.ino
        if h.told is not None:
            # The kernel's copy, once complete, holds these inode numbers.
            dnode.cache_sig = (self._parent_ino(dnode), tuple(h.names[2:]), tuple(h.told))

    @handler
    async def releasedir(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        self.journal.on_close(fh)
        if isinstance(h, DirHandle):
            if h.fd is not None:
                os.close(h.fd)
            self.table.closed(h.node)

    @handler
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if isinstance(h, DirHandle) and h.node.native:
            fd = open_beneath(self.native.root_fd, self._path(h.node), os.O_RDONLY | os.O_DIRECTORY)
            try:
                await self.native.slow(os.fsync, fd)
            finally:
                os.close(fd)

    # -- extended attributes

    async def _sw_xattrs(self, rel: str) -> dict[str, str]:
        if not rel:
            return {"source": self.src, "store": self.store}
        out: dict[str, str] = {}
        # Counts versions and reads the baseline: a store read, off the loop.
        state = await self.native.slow(self.engine.file_state, RelPath(rel))
        if state is not None:
            out["freshness"] = str(state.freshness)
            out["versions"] = str(state.versions)
            if state.hash is not None:
                out["hash"] = state.hash
            if state.baseline_hash is not None:
                out["baseline_hash"] = state.baseline_hash
            inputs = self.journal.inputs_xattr(rel, state.hash)
            if inputs is not None:
                out["inputs"] = inputs
        return out

    async def _xattrs(self, node: Node) -> dict[str, str]:
        if node.native:
            return await self._sw_xattrs(self._path(node))
        return dict(await self._tree(node).xattrs(node.spath))

    @handler
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        node, n = self._node(inode), os.fsdecode(name)
        if n == XATTR_PREFIX + "inputs" and not self.journal.may_see(ctx.uid):
            raise fail(errno.EACCES)  # lineage belongs to the mounting user
        if n.startswith(XATTR_PREFIX) or not node.native:
            value = (await self._xattrs(node)).get(n[len(XATTR_PREFIX) :])
            if value is None or not n.startswith(XATTR_PREFIX):
                raise fail(_absent(n))
            return value.encode("utf-8", "surrogateescape")
        try:
            return self.native.getxattr(self._path(node), n)
        except OSError as exc:
            if exc.errno == errno.ENODATA:
                raise fail(_absent(n)) from None
            raise

    @handler
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        node = self._node(inode)
        names = [os.fsencode(XATTR_PREFIX + k) for k in await self._xattrs(node)]
        if node.native:
            own = self.native.listxattr(self._path(node))
            names = [os.fsencode(n) for n in own if not n.startswith(XATTR_PREFIX)] + names
        return names

    @handler
    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        node, n = self._node(inode), os.fsdecode(name)
        if not node.native:
            raise fail(errno.EROFS)
        if n.startswith(XATTR_PREFIX):
            raise fail(errno.EPERM)
        self.native.setxattr(self._path(node), n, value)

    @handler
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        node, n = self._node(inode), os.fsdecode(name)
        if not node.native:
            raise fail(errno.EROFS)
        if n.startswith(XATTR_PREFIX):
            raise fail(errno.EPERM)
        self.native.removexattr(self._path(node), n)

    # -- kernel cache invalidation

    def _invalidate_attrs(self, ino: int) -> None:
        """Drop the kernel's cached attributes of ``ino``.  Attributes only: that
        takes no page locks, so unlike a data invalidation it is safe inside a
        handler."""
        if self.mounted:
            invalidate_attrs(ino)

    def changed_behind(self, rels: list[str]) -> None:
        """Change feed: ``rels`` changed in SRC behind the mount."""
        self.invalidator.changed_behind(rels)

    def writing(self, rels: list[str]) -> set[str]:
        """Change feed: which of ``rels`` an operation through the mount is
        changing right now (the engine's write protocol records them itself)."""
        return self.engine.writes.busy(rels)


def _absent(name: str) -> int:
    """The errno for an extended attribute a node does not have.

    A security label the backing file lacks is reported the way a file system
    without labels reports it, EOPNOTSUPP: a security module, where one runs,
    answers for its own labels before the request reaches the daemon, and
    tools that see EOPNOTSUPP stop asking for every file of the mount
    (``ls -l`` asks ``security.selinux`` of each entry until then).  Labels
    the backing file has still pass through."""
    return errno.EOPNOTSUPP if name.startswith("security.") else errno.ENODATA


def _read_only(fi: pyfuse3.FileInfo) -> pyfuse3.FileInfo:
    """Mark an open that cannot write: its close needs no FLUSH round trip
    (flush only records writes and reports the backing close's errors)."""
    if NOFLUSH:
        fi.noflush = True
    return fi


def _hidden(src: str, store: str) -> frozenset[str]:
    hidden = {".swfs"}
    rel = os.path.relpath(os.path.realpath(store), os.path.realpath(src))
    if rel != "." and not rel.startswith(".."):
        hidden.add(rel.replace(os.sep, "/"))
    return frozenset(hidden)
