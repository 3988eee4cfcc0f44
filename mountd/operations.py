"""The kernel-facing adapter: decode a FUSE request, ask the router which
provider answers for the node it names, call that provider, answer
attributes or raise FUSEError.  Nothing else may leave a handler.

Every tree is a provider behind one interface (``mountd.provider``): the
native tree (``mountd.native``, wrapping the native source in ``self.native``)
and each generated tree (``mountd.generated``, wrapping a ``SyntheticTree``).
What differs between them is theirs to say; this module holds the handle
table, the inode table's reference counts, the kernel's listing cache and
the access journal's request-level events.

The handlers of LOOKUP, GETATTR, OPEN, CREATE, GETXATTR, WRITE, FLUSH,
RELEASE and LSEEK are plain methods that return their reply or an awaitable
of it (``mountd.reply``): one handler per request, whose fast answer (a
native file's: a system call or two, an LMDB read, memory) comes at once
and whose slow one is awaited; the binding (``mountd.binding``) decides
which is which by what it got.  A warm ``grep -r`` of native files, a
cold walk's LOOKUPs, a shell's ``echo x > f`` (LOOKUP, CREATE, GETXATTR,
WRITE, FLUSH, RELEASE) thus reach no coroutine: no coroutine, no task
container, no async layers below.  What is answered at once:

* a LOOKUP in a native folder (not a generated tree's name at the root),
  a GETATTR of a native node;
* an OPEN of a native file read-only whose stat matches its record (with
  kernel passthrough where it applies: ``mountd.fastpath``), and of a
  ``.parsed`` unit whose bytes are at hand;
* a CREATE of a new file in a native folder (not a staged mount's);
* a GETXATTR of a native node's own attribute (not ``user.sw.*``);
* a WRITE to a native file whose recorded bytes need no keeping first;
* a FLUSH or RELEASE of a native handle with nothing to record, or with a
  small file's record made without waiting for the store's writer lock;
  a RELEASE of a unit's bytes in memory;
* an LSEEK (SEEK_DATA, SEEK_HOLE) of a native file.

A request counts once as its kind in ``mountd.reqcount`` and, where it was
answered at once, as ``nowait_<kind>`` too."""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from types import CoroutineType
from typing import Any, TypeVar, cast

import pyfuse3

from mountd import binding, reqcount
from mountd.caller import REQUEST
from mountd.dirlist import Listings
from mountd.dirlist import readdir as readdir_by_inode
from mountd.fastpath import FastPath
from mountd.invalidator import Invalidator, invalidate_attrs
from mountd.native import NativeProvider
from mountd.nodes import InodeTable, Node, Tree
from mountd.options import MountOptions
from mountd.poll import Poller
from mountd.provider import DirHandle, FileHandle, Handle, NativeSource, Provider, fail
from mountd.render import RenderTree
from mountd.reply import REPLIES, Reply, awaited, pending
from mountd.router import Router
from mountd.searchtree import SearchTree
from mountd.synthetic import Generation, ReviewTree, SyntheticTree, make_trees
from mountd.tabtree import TabTree
from mountd.worldnative import is_world, native_source
from swfs.api import STORE_NAME, XATTR_PREFIX, EngineAPI
from swfs.changefeed import ChangeFeed
from swfs.evidence.access import hash_lookup, open_journal

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def fuse_error(name: str, args: tuple[Any, ...], exc: Exception) -> pyfuse3.FUSEError:
    """The errno a handler's exception becomes, logged as it deserves: an
    OSError keeps its own (ENOSYS, which would make the kernel stop asking
    for good, becomes EOPNOTSUPP; EIO is logged), anything else is logged
    with its traceback and becomes EIO."""
    if isinstance(exc, OSError):
        code = exc.errno or errno.EIO
        if code == errno.ENOSYS:
            code = errno.EOPNOTSUPP
        if code == errno.EIO:
            log.warning("%s: %s", name, exc)
        return pyfuse3.FUSEError(code)
    log.error("%s%r failed", name, args[1:], exc_info=exc)
    return pyfuse3.FUSEError(errno.EIO)


def handler(fn: F) -> F:
    """Turn anything but FUSEError into an errno, so one bad request can never
    end ``pyfuse3.main()``; count the request (``mountd.reqcount``).

    An ``async def`` handler runs with ``REQUEST`` set to its context
    (``mountd.caller``).  A plain one (``mountd.reply``) answers at once
    (counted as ``nowait_<kind>`` too) or returns an awaitable, which runs
    as an async handler does."""

    request = fn.__name__.removesuffix("_inode")  # READDIR, with a handle or without
    counts = reqcount.COUNTS

    async def run(args: tuple[Any, ...], got: Awaitable[Any]) -> Any:
        # pyfuse3 passes the context last, where a request has one.
        ctx = args[-1] if isinstance(args[-1], pyfuse3.RequestContext) else None
        token = REQUEST.set(ctx)  # whose request this is (mountd.caller)
        try:
            poller = getattr(args[0], "poller", None)
            if poller is not None:
                poller.touch()  # the next request is likely close behind (mountd.poll)
            return await got
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:
            raise fuse_error(fn.__name__, args, exc) from None
        finally:
            REQUEST.reset(token)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any) -> Any:
            counts[request] += 1
            return await run(args, fn(*args))

        return cast(F, wrapper)

    answered = "nowait_" + request

    @functools.wraps(fn)
    def now(*args: Any) -> Any:
        counts[request] += 1
        try:
            got = fn(*args)
        except pyfuse3.FUSEError:
            counts[answered] += 1
            raise
        except Exception as exc:
            counts[answered] += 1
            raise fuse_error(fn.__name__, args, exc) from None
        kind = type(got)  # mountd.reply.pending, inlined: this runs per request
        if kind is CoroutineType or (kind not in REPLIES and isinstance(got, Awaitable)):
            return run(args, got)
        counts[answered] += 1
        return got

    return cast(F, now)


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
        # Directories open without OPENDIR (mountd.dirlist), unless every
        # listing must reach the journal.
        self.no_opendir = binding.NO_OPENDIR and not (options.every_listing and options.journal)
        self.src, self.store = src, store
        self.poller = Poller(options.poll_window)
        self.fastpath = FastPath(options.passthrough, journal=options.journal)  # mountd.fastpath
        self.fastpath.prepare(self, options.poll_window)
        if not binding.FILE_OPS:
            log.info("fallocate, SEEK_DATA/SEEK_HOLE and O_TMPFILE: not served (stock pyfuse3)")
        elif not binding.TMPFILE:
            log.info("O_TMPFILE: not served (pyfuse3 was built against a libfuse before 3.17)")
        # The native source: the one object that touches native files
        # (mountd.native.NativeProvider wraps whatever sits here): SRC, its
        # staged layer (mount --staged) or a snapshot's world (mount --at).
        self.native: NativeSource
        self.native = native_source(engine, src, hidden=_hidden(src, store), poller=self.poller)
        root = os.fstat(self.native.root_fd)
        self.table = InodeTable((root.st_dev, root.st_ino))
        self.gen = Generation()
        self.journal = open_journal(
            engine.store_dir,
            enabled=options.journal,
            file_hash=hash_lookup(engine.workspace),
            records=engine.workspace.writes,  # a write's hash once its queued record is made
            src=engine.src,
            locate=engine.workspace.abspath,  # a --staged mount's staged bytes
            callers=options.callers,
        )
        engine.evidence.attach_journal(
            self.journal.health, self.journal.acknowledge
        )  # a world ignores it
        # The generated trees, by top-level name (mountd.router).
        self.trees: dict[Tree, SyntheticTree] = dict(make_trees(engine, self.gen, options))
        self.trees[Tree.SEARCH] = SearchTree(engine, self.gen)
        self.trees[Tree.RENDER] = RenderTree(engine, self.gen, options)
        self.tab = TabTree(engine, self.gen, self.journal, shared=options.share_tab)
        self.trees[Tree.TAB] = self.tab
        if isinstance(review := self.trees[Tree.REVIEW], ReviewTree):
            review.lineage = self.journal  # .review/LINEAGE.md
        if is_world(engine):  # one state, nothing to search, render or owe
            for tree in (Tree.VERSIONS, Tree.SEARCH, Tree.RENDER, Tree.TAB):
                self.trees.pop(tree, None)
        self.handles: dict[int, Handle] = {}
        self.listings = Listings()  # directories opened without OPENDIR (mountd.dirlist)
        self._next_fh = 1
        self.mounted = False  # set once pyfuse3 has a session: kernel notifications work
        self.feed: ChangeFeed | None = None  # set by the daemon's lifecycle (mountd.launch)
        # Background work: engine change events -> kernel cache invalidations.
        self.invalidator = Invalidator(self)
        self.native_provider = NativeProvider(self, self.native)
        self.router = Router(self.trees, native=self.native_provider, mount=self)
        self.native.reserved = self.router.names
        engine.add_listener(self.invalidator.changed)

    def close(self) -> None:
        self.journal.close()
        for h in self.handles.values():
            fd = h.descriptor()
            if fd is not None:
                os.close(fd)
        self.handles.clear()
        self.native.close()

    # -- helpers (shared with the providers: mountd.provider.Mount)

    def _node(self, ino: int) -> Node:
        node = self.table.get(ino)
        if node is None:
            raise fail(errno.ESTALE)
        return node

    def add_handle(self, h: Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = h
        return fh

    def _handle(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None:
            raise fail(errno.EBADF)
        return h

    def _file(self, fh: int) -> tuple[FileHandle, Provider]:
        h = self._handle(fh)
        if isinstance(h, DirHandle):
            raise fail(errno.EISDIR)
        return h, self.router.route(h.node)

    def invalidate_attrs(self, ino: int) -> None:
        """Drop the kernel's cached attributes of ``ino``.  Attributes only: that
        takes no page locks, so unlike a data invalidation it is safe inside a
        handler."""
        if self.mounted:
            invalidate_attrs(ino)

    async def _lookup(
        self, parent: Node, name: str, *, wait: bool = True
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """Find ``name`` in ``parent`` without taking a kernel reference."""
        return await awaited(self.router.route_child(parent, name).lookup(parent, name, wait=wait))

    # -- lookups and attributes

    @handler
    def lookup(  # type: ignore[override]  # a reply or an awaitable (mountd.reply)
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> Reply[pyfuse3.EntryAttributes]:
        parent, n = self._node(parent_inode), os.fsdecode(name)
        got = self.router.route_child(parent, n).lookup(parent, n)
        if pending(got):
            return self._remembered(cast(Awaitable[tuple[Node, pyfuse3.EntryAttributes]], got))
        node, attr = cast(tuple[Node, pyfuse3.EntryAttributes], got)
        self.table.remember(node)  # the kernel holds a reference to it now
        return attr

    async def _remembered(
        self, got: Awaitable[tuple[Node, pyfuse3.EntryAttributes]]
    ) -> pyfuse3.EntryAttributes:
        node, attr = await got
        self.table.remember(node)
        return attr

    @handler
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            self.table.forget(ino, count)

    @handler
    def getattr(  # type: ignore[override]  # a reply or an awaitable (mountd.reply)
        self, inode: int, ctx: pyfuse3.RequestContext
    ) -> Reply[pyfuse3.EntryAttributes]:
        node = self._node(inode)
        return self.router.route(node).attr(node)

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
        handle = self.handles.get(fh) if fh is not None else None
        return await self.router.route(node).setattr(node, attr, fields, handle, ctx)

    @handler
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        node = self._node(inode)
        return self.router.route(node).readlink(node)

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

    # -- directory entries

    @handler
    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        return await self.router.route(parent).mknod(parent, os.fsdecode(name), mode, rdev, ctx)

    @handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        return await self.router.route(parent).mkdir(parent, os.fsdecode(name), mode, ctx)

    @handler
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._node(parent_inode)
        return await self.router.route(parent).symlink(parent, os.fsdecode(name), target, ctx)

    @handler
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        node, parent = self._node(inode), self._node(new_parent_inode)
        provider = self.router.route(node)
        if self.router.route(parent) is not provider:
            raise fail(errno.EROFS)  # a link never crosses trees
        return await provider.link(node, parent, os.fsdecode(new_name))

    @handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent = self._node(parent_inode)
        await self.router.route(parent).unlink(parent, os.fsdecode(name), ctx)

    @handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent = self._node(parent_inode)
        await self.router.route(parent).rmdir(parent, os.fsdecode(name))

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
        provider, target = self.router.route(old_parent), self.router.route(new_parent)
        if provider is not target:
            # Between trees: EXDEV where one of them takes writes of its own
            # (mv then copies), else EROFS.
            across = (provider.rename_across, target.rename_across)
            raise fail(errno.EXDEV if errno.EXDEV in across else errno.EROFS)
        await provider.rename(old_parent, old, new_parent, new, flags, ctx)

    # -- files

    @handler
    def open(  # type: ignore[override]  # a reply or an awaitable (mountd.reply)
        self, inode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> Reply[pyfuse3.FileInfo]:
        node = self._node(inode)
        return self.router.route(node).open(node, flags, ctx)

    @handler
    def create(  # type: ignore[override]  # a reply or an awaitable (mountd.reply)
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> Reply[tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]]:
        parent = self._node(parent_inode)
        return self.router.route(parent).create(parent, os.fsdecode(name), mode, flags, ctx)

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        h, provider = self._file(fh)
        data = await provider.read(h, off, size)
        self.journal.on_read(fh, off, len(data), data)
        return data

    @handler
    def write(self, fh: int, off: int, buf: bytes) -> Reply[int]:  # type: ignore[override]
        h = self._handle(fh)
        if isinstance(h, DirHandle):
            raise fail(errno.EBADF)
        return self.router.route(h.node).write(h, off, buf)

    @handler
    async def fallocate(self, fh: int, mode: int, offset: int, length: int) -> None:
        h = self._handle(fh)
        if isinstance(h, DirHandle):
            raise fail(errno.EBADF)
        await self.router.route(h.node).fallocate(h, mode, offset, length)

    @handler
    def lseek(self, fh: int, offset: int, whence: int) -> Reply[int]:  # type: ignore[override]
        h, provider = self._file(fh)
        return provider.lseek(h, offset, whence)

    @handler
    async def tmpfile(
        self, parent_inode: int, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self._node(parent_inode)
        return await self.router.route(parent).tmpfile(parent, mode, flags, ctx)

    @handler
    def flush(self, fh: int) -> Reply[None]:  # type: ignore[override]
        h = self._handle(fh)
        if isinstance(h, DirHandle):
            return None
        return self.router.route(h.node).flush(h, fh)

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if not isinstance(h, DirHandle):
            await self.router.route(h.node).fsync(h, fh, datasync)

    @handler
    def release(self, fh: int) -> Reply[None]:  # type: ignore[override]
        h = self.handles.pop(fh, None)
        if h is None:
            return None
        if isinstance(h, DirHandle):
            self._closed(fh, h)
            return None
        try:
            got = self.router.route(h.node).release(h, fh)
        except BaseException:
            self._closed(fh, h)
            raise
        if got is None:  # nothing left to record: at once
            self.journal.on_close(fh)
            self.table.closed(h.node)
            return None
        if pending(got):
            return self._closed_after(fh, h, cast(Awaitable[None], got))
        self._closed(fh, h)
        return None

    def _closed(self, fh: int, h: Handle) -> None:
        """What every release ends with."""
        self.journal.on_close(fh)
        if not isinstance(h, DirHandle):
            self.table.closed(h.node)

    async def _closed_after(self, fh: int, h: Handle, got: Awaitable[None]) -> None:
        try:
            await got
        finally:
            self._closed(fh, h)

    # -- directories

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int | pyfuse3.FileInfo:
        if self.no_opendir:
            # The kernel sends no more OPENDIRs or RELEASEDIRs and keeps every
            # listing until told otherwise (mountd.dirlist).
            raise pyfuse3.FUSEError(errno.ENOSYS)
        node = self._node(inode)
        provider = self.router.route(node)
        if not binding.DIR_CACHE:  # stock pyfuse3: the kernel asks at each listing
            self.table.opened(node)
            fh = self.add_handle(DirHandle(node))
            if provider.evidence:  # the tab is no evidence
                # listed in readdir
                self.journal.on_opendir(fh, ctx.pid, provider.dir_path(node))
            return fh
        # The kernel may serve the listing from its cache only if that is what
        # a reply would say now.  The listing taken here answers the first readdir.
        fd = provider.open_dir(node)
        try:
            names, sig = await self.listing(node, fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        keep, node.cache_sig = node.cache_sig == sig, sig
        self.table.opened(node)
        told: list[int | None] = [None] * (len(names) - 2)
        fh = self.add_handle(DirHandle(node, names, fresh=True, told=told, fd=fd))
        if provider.evidence:
            self.journal.on_list(ctx.pid, provider.dir_path(node), names[2:])
        return binding.dir_info(fh, keep=keep)

    async def listing(self, node: Node, fd: int | None = None) -> tuple[list[str], object]:
        """The names directory ``node`` shows ("." and ".." first), and what a
        kernel's cached copy of them must match: each name with the inode
        number the kernel was told for it (None where it holds none now).
        ``fd``: the directory's descriptor, if the caller has it open."""
        provider = self.router.route(node)
        names, found = await provider.listing(node, fd)
        inos = tuple(None if n is None else n.ino for n in found)
        return [".", "..", *names], (provider.parent_ino(node), tuple(names), inos)

    def _dot_attr(self, ino: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = stat.S_IFDIR
        return a

    @handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        h = self._handle(fh)
        if not isinstance(h, DirHandle):
            raise fail(errno.ENOTDIR)
        if h.names is None or (start_id == 0 and not h.fresh):
            # A rewind lists again: what the kernel caches from here on is no
            # longer the listing opendir vouched for.
            h.names, _ = await self.listing(h.node, h.fd)
            self.journal.on_listed(fh, h.names[2:])
            h.node.cache_sig = h.told = None
        h.fresh = False
        if h.fd is not None:
            await self.reply_entries(h, start_id, token, h.fd)
            return
        # One descriptor (if the tree has any) for every entry's stat in this reply.
        fd = self.router.route(h.node).open_dir(h.node)
        try:
            await self.reply_entries(h, start_id, token, fd)
        finally:
            if fd is not None:
                os.close(fd)

    @handler
    async def readdir_inode(
        self, inode: int, start_id: int, token: pyfuse3.ReaddirToken, ctx: pyfuse3.RequestContext
    ) -> None:
        """A READDIR without a handle (no OPENDIR: mountd.dirlist)."""
        await readdir_by_inode(self, self._node(inode), start_id, token, ctx)

    @handler
    async def fsyncdir_inode(self, inode: int, datasync: bool) -> None:
        node = self._node(inode)
        await self.router.route(node).fsyncdir(node)

    async def reply_entries(
        self, h: DirHandle, start_id: int, token: pyfuse3.ReaddirToken, fd: int | None
    ) -> None:
        """Reply with ``h.names`` from ``start_id`` on (offsets index that
        listing, which stays fixed until a rewind); ``fd`` is the directory's
        descriptor, where its tree has one."""
        assert h.names is not None
        dnode = h.node
        provider = self.router.route(dnode)
        for i in range(start_id, len(h.names)):
            name = h.names[i]
            if name in (".", ".."):
                ino = dnode.ino if name == "." else provider.parent_ino(dnode)
                if not pyfuse3.readdir_reply(token, os.fsencode(name), self._dot_attr(ino), i + 1):
                    return
                continue
            try:
                child = self.router.route_child(dnode, name)
                node, attr = await child.reply_entry(dnode, name, fd)
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
            dnode.cache_sig = (provider.parent_ino(dnode), tuple(h.names[2:]), tuple(h.told))

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
        if isinstance(h, DirHandle):
            await self.router.route(h.node).fsyncdir(h.node)

    # -- extended attributes

    @handler
    def getxattr(  # type: ignore[override]  # a reply or an awaitable (mountd.reply)
        self, inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> Reply[bytes]:
        node, n = self._node(inode), os.fsdecode(name)
        if n == XATTR_PREFIX + "inputs" and not self.journal.may_see(ctx.uid):
            raise fail(errno.EACCES)  # lineage belongs to the mounting user
        return self.router.route(node).getxattr(node, n)

    @handler
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        node = self._node(inode)
        return await self.router.route(node).listxattr(node)

    @handler
    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        node = self._node(inode)
        await self.router.route(node).setxattr(node, os.fsdecode(name), value)

    @handler
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        node = self._node(inode)
        await self.router.route(node).removexattr(node, os.fsdecode(name))

    # -- kernel cache invalidation

    def changed_behind(self, rels: list[str]) -> None:
        """Change feed: ``rels`` changed in SRC behind the mount."""
        self.invalidator.changed_behind(rels)

    def touched_behind(self, rels: list[str] | None) -> None:
        """Change feed: the inodes of ``rels`` (None: of any path) may have
        other extended attributes than last listed."""
        self.native_provider.forget_xattrs(rels)

    def writing(self, rels: list[str]) -> set[str]:
        """Change feed: which of ``rels`` an operation through the mount is
        changing right now (the engine's write protocol records them itself)."""
        return self.engine.workspace.writes.busy(rels)


def _hidden(src: str, store: str) -> frozenset[str]:
    hidden = {STORE_NAME}
    rel = os.path.relpath(os.path.realpath(store), os.path.realpath(src))
    if rel != "." and not rel.startswith(".."):
        hidden.add(rel.replace(os.sep, "/"))
    return frozenset(hidden)
