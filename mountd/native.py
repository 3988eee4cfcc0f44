"""The native tree as a provider (``mountd.provider.Provider``).

``NativeProvider`` wraps the native source the adapter was built with
(``Operations.native``: ``mountd.passthrough.Passthrough`` or a class built
on it).  The source does the system calls on paths and keeps the engine's
write protocol; this layer turns inode-table nodes into paths, stat results
into the attributes the kernel caches, and keeps the table's names in step
with what a change did.  It never touches a native file itself except
through the source's descriptors.
"""

from __future__ import annotations

import errno
import json
import os
import stat

import pyfuse3

from mountd.fsutil import open_beneath, reopen
from mountd.invalidator import sig as _sig
from mountd.invalidator import told
from mountd.nodes import Held, Node, Tree
from mountd.passthrough import Creds, NativeHandle, SetAttr, join
from mountd.provider import (
    FileHandle,
    Handle,
    Mount,
    NativeOpen,
    NativeSource,
    absent,
    fail,
    read_only,
)
from mountd.reply import Reply, awaited, pending
from swfs.api import XATTR_PREFIX, RelPath


def _creds(ctx: pyfuse3.RequestContext) -> Creds:
    return Creds(ctx.uid, ctx.gid, ctx.umask)


def _nameless(node: Node) -> int:
    """The errno of a request about a node no name leads to any more, and
    nothing open on it: ESTALE for a file, which makes the kernel look the
    name up again (and find the file a rename put there, or nothing); a
    directory keeps ENOENT (a process may sit in a removed one)."""
    return errno.ENOENT if node.is_dir else errno.ESTALE


class NativeProvider:
    evidence = True
    rename_across = errno.EROFS  # into or out of a read-only tree

    def __init__(self, mount: Mount, source: NativeSource) -> None:
        self.mount = mount
        self.source = source  # whatever sits in Operations.native
        self.table = mount.table

    # -- paths and attributes

    def path(self, node: Node) -> str:
        rel = self.table.path(node)
        if rel is None:
            raise fail(_nameless(node))
        return rel

    def _open_handle(self, node: Node, h: Handle | None = None) -> NativeHandle | None:
        """A descriptor the mount has open on ``node`` (``h`` if it is one,
        else a writer's, else any): how a file no name leads to any more is
        reached, as the process that has it open reaches it."""
        if isinstance(h, NativeOpen) and h.node is node:
            return h.fh
        found = None
        for each in self.mount.handles.values():
            if isinstance(each, NativeOpen) and each.node is node:
                if each.fh.session is not None:
                    return each.fh
                found = found or each.fh
        return found

    def attributes(self, node: Node, st: os.stat_result) -> pyfuse3.EntryAttributes:
        options = self.mount.options
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = node.generation
        a.entry_timeout = options.entry_timeout
        a.attr_timeout = options.attr_timeout
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
        node.told = told(st)
        node.is_dir = stat.S_ISDIR(st.st_mode)
        return a

    def stat(self, node: Node) -> os.stat_result:
        """Stat through a name (preferring one that still leads to this inode),
        else through an open handle (an unlinked but open file)."""
        first: os.stat_result | None = None
        for rel in self.table.paths(node):
            try:
                st = self.source.lstat(rel)
            except FileNotFoundError:
                continue
            if node is self.table.root or (st.st_dev, st.st_ino) == node.key:
                return st
            first = first or st
        if first is not None:
            return first
        fh = self._open_handle(node)
        if fh is not None:
            return os.fstat(fh.fd)
        held = self.table.held(node)
        if held is not None:
            return os.fstat(held.fd)
        if not node.links:
            # Unlinked or replaced through the mount: the kernel, told ESTALE,
            # looks the name up again (a path's system call does, once).
            raise fail(_nameless(node))
        self._gone_behind_our_back(node)
        raise fail(errno.ENOENT)

    def _gone_behind_our_back(self, node: Node) -> None:
        """``node``'s names no longer lead to it: have the kernel drop its cached
        entries (from the invalidation task, never from this handler)."""
        self.mount.invalidator.gone(node.links)

    def attr(self, node: Node) -> pyfuse3.EntryAttributes:
        """A system call: answered at once (mountd.reply)."""
        return self.attributes(node, self.stat(node))

    def child(
        self, parent: Node, name: str, st: os.stat_result
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """The node and attributes of ``name`` in ``parent``, found as ``st``."""
        node = self.table.native(parent, name, (st.st_dev, st.st_ino))
        return node, self.attributes(node, st)

    def lookup(
        self, parent: Node, name: str, *, wait: bool = True
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """A system call: answered at once (mountd.reply)."""
        return self.child(parent, name, self.source.lstat(join(self.path(parent), name)))

    async def reply_entry(
        self, parent: Node, name: str, fd: int | None
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        if fd is None:
            return self.lookup(parent, name, wait=False)
        return self.child(parent, name, self.source.lstat_entry(self.path(parent), fd, name))

    def readlink(self, node: Node) -> bytes:
        return self.source.readlink(self.path(node))

    def statvfs(self) -> os.statvfs_result:
        return self.source.statvfs()

    def _writable_parent(self, parent: Node, name: str | None = None) -> str:
        """The native path of a directory about to change."""
        if name is not None and parent is self.table.root and name in self.mount.router.names:
            raise fail(errno.EPERM)
        return self.path(parent)

    def _created(self, parent: Node, name: str, st: os.stat_result) -> pyfuse3.EntryAttributes:
        node = self.table.native(parent, name, (st.st_dev, st.st_ino))
        self.table.remember(node)
        return self.attributes(node, st)

    # -- directories

    def open_dir(self, node: Node) -> int | None:
        return self.source.open_dir(self.path(node))

    async def listing(self, node: Node, fd: int | None) -> tuple[list[str], list[Node | None]]:
        table, router = self.table, self.mount.router
        rel = self.path(node)
        dfd = self.source.open_dir(rel) if fd is None else fd
        try:
            entries = self.source.entries(rel, dfd)
            dev = os.fstat(dfd).st_dev
        finally:
            if fd is None:
                os.close(dfd)
        if node is table.root:
            entries = [(n, i) for n, i in entries if n not in router.names]
        names = [n for n, _ in entries]
        found = [table.find_key((dev, i)) for _, i in entries]
        if node is table.root:
            # Generated trees first; some are reachable by name only.
            shown = router.listed()
            names = shown + names
            found = [table.find_synthetic(Tree(n), "") for n in shown] + found
        return names, found

    def keeps_listing(self, node: Node) -> bool:
        # Changes through the mount are the kernel's own; those behind it
        # come from the change feed (mountd.invalidator).
        return True

    def parent_ino(self, node: Node) -> int:
        for parent_ino, _ in reversed(list(node.links)):
            return parent_ino
        return node.ino

    def dir_path(self, node: Node) -> str:
        return self.path(node)

    async def fsyncdir(self, node: Node) -> None:
        fd = open_beneath(self.source.root_fd, self.path(node), os.O_RDONLY | os.O_DIRECTORY)
        try:
            # The changes of names before it are recorded first: what an
            # fsync makes durable, a killed daemon must not lose the record of.
            await self.source.slow(self._sync_dir, fd)
        finally:
            os.close(fd)

    def _sync_dir(self, fd: int) -> None:
        self.mount.engine.workspace.writes.drain()
        os.fsync(fd)

    # -- files

    def open(self, node: Node, flags: int, ctx: pyfuse3.RequestContext) -> Reply[pyfuse3.FileInfo]:
        """At once where the source opens at once (a read-only open of a file
        as recorded), else awaited (mountd.reply)."""
        rel = self.table.path(node)
        if rel is None:
            return self._open_held(node, flags, ctx)
        try:
            got = self.source.open(rel, flags, _creds(ctx))
        except FileNotFoundError:
            self._gone_behind_our_back(node)
            raise
        if not isinstance(got, NativeHandle) or got.session is not None:
            return self._open(node, rel, got, flags, ctx)
        fi, size = self._opened(node, got, flags)
        fast = self.mount.fastpath
        if fast.wanted:
            try:
                # A reader's: nothing to keep first, so passed through at once.
                fast.opened(fi, fi.fh, node.ino, got, flags, self.source.slow, size=size)
            except BaseException:
                # The kernel sends no RELEASE for a failed open.
                h = self.mount.handles.pop(fi.fh)
                assert isinstance(h, NativeOpen)
                self.release_reader(h, fi.fh)
                self.table.closed(node)
                raise
        self.mount.journal.on_open(fi.fh, ctx.pid, rel, flags=flags, known_hash=got.hash)
        return fi

    async def _open(
        self,
        node: Node,
        rel: str,
        got: Reply[NativeHandle],
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.FileInfo:
        try:
            fh = await awaited(got)
        except FileNotFoundError:
            self._gone_behind_our_back(node)
            raise
        fi, size = self._opened(node, fh, flags)
        await self._fastpath(fi, node, fh, flags, size)
        self.mount.journal.on_open(fi.fh, ctx.pid, rel, flags=flags, known_hash=fh.hash)
        return fi

    def _open_held(self, node: Node, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        """An open of a file a rename replaced just after a lookup found it:
        read-only, of the file held (``mountd.nodes.Held``), as the backing
        file system opens the file the lookup found.  Any other, or once it
        is no longer held: ESTALE, and the kernel looks the name up again."""
        held = self.table.held(node)
        if held is None or flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            raise fail(_nameless(node))
        fh = NativeHandle(reopen(held.fd, flags & ~os.O_DIRECT), hash=held.hash)
        fi, _ = self._opened(node, fh, flags)
        self.mount.journal.on_open(fi.fh, ctx.pid, held.rel, flags=flags, known_hash=held.hash)
        return fi

    def _opened(self, node: Node, fh: NativeHandle, flags: int) -> tuple[pyfuse3.FileInfo, int]:
        """The reply to an open of ``node`` that got ``fh``, and the file's size."""
        try:
            st = os.fstat(fh.fd) if fh.stat is None else fh.stat
        except BaseException:
            os.close(fh.fd)
            raise
        direct = bool(flags & os.O_DIRECT)
        sig = _sig(st)
        if sig != node.attr_sig or fh.dirty:
            # Changed behind the kernel's back (or by a hard link): its cached
            # size would cut reads short.  Or truncated here, maybe losing
            # set-id bits the kernel's cached mode still has.
            self.mount.invalidate_attrs(node.ino)
            node.attr_sig = None
        keep = node.cache_sig == sig and not fh.dirty
        node.cache_sig = None if direct else sig
        self.table.opened(node)
        fi = pyfuse3.FileInfo(fh=self.mount.add_handle(NativeOpen(node, fh, direct)))
        fi.direct_io = direct
        fi.keep_cache = keep
        if flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_TRUNC:
            read_only(fi)
        return fi, st.st_size

    async def _fastpath(
        self,
        fi: pyfuse3.FileInfo,
        node: Node,
        fh: NativeHandle,
        flags: int,
        size: int,
    ) -> None:
        """Kernel passthrough of the file's data where it applies (mountd.fastpath)."""
        if not self.mount.fastpath.wanted:  # off for good: nothing to track
            return
        try:
            await awaited(
                self.mount.fastpath.opened(
                    fi, fi.fh, node.ino, fh, flags, self.source.slow, size=size
                )
            )
        except BaseException:
            await awaited(
                self.mount.release(fi.fh)
            )  # the kernel sends no RELEASE for a failed open
            raise

    def create(
        self, parent: Node, name: str, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> Reply[tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]]:
        """A new file in a native folder at once (mountd.reply); awaited
        where the source must wait (the name exists and is opened instead;
        a staged layer)."""
        pdir = self._create_parent(parent, name)
        made = self.source.create(pdir, name, mode, flags, _creds(ctx))
        if isinstance(made, tuple):
            return self._create_reply(parent, pdir, name, flags, *made, ctx)
        return self._create(parent, pdir, name, flags, made, ctx)

    async def _create(
        self,
        parent: Node,
        pdir: str,
        name: str,
        flags: int,
        got: Reply[tuple[NativeHandle, os.stat_result]],
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        fh, st = await awaited(got)
        return self._create_reply(parent, pdir, name, flags, fh, st, ctx)

    def _create_parent(self, parent: Node, name: str) -> str:
        """The native path of the folder a file ``name`` is created in (none
        over a generated tree's name at the root)."""
        if parent is self.table.root and name in self.mount.router.names:
            raise fail(errno.EEXIST)
        return self._writable_parent(parent)

    def _create_reply(
        self,
        parent: Node,
        pdir: str,
        name: str,
        flags: int,
        fh: NativeHandle,
        st: os.stat_result,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        """The reply to a create that made ``fh``: the new file's node, its
        handle, and its journal event.  (A created file is never passed
        through: mountd.fastpath.)"""
        attr = self._created(parent, name, st)
        node = self.table.get(attr.st_ino)
        assert node is not None
        node.cache_sig = None
        self.table.opened(node)
        direct = bool(flags & os.O_DIRECT)
        fi = pyfuse3.FileInfo(fh=self.mount.add_handle(NativeOpen(node, fh, direct)))
        fi.direct_io = direct
        if self.mount.fastpath.wanted:
            self.mount.fastpath.created(fi, fi.fh, node.ino)
        self.mount.journal.on_open(fi.fh, ctx.pid, join(pdir, name), flags=flags)
        return fi, attr

    async def tmpfile(
        self, parent: Node, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        """open(dir, O_TMPFILE): a node without a name, open for writing
        (never passed through, like a created file: mountd.fastpath)."""
        pdir = self._writable_parent(parent)
        fh, st = await self.source.tmpfile(pdir, mode, flags, _creds(ctx))
        node = self.table.unnamed((st.st_dev, st.st_ino))
        self.table.remember(node)  # the reply is the kernel's reference, as a create's
        attr = self.attributes(node, st)
        node.cache_sig = None
        self.table.opened(node)
        direct = bool(flags & os.O_DIRECT)
        fi = pyfuse3.FileInfo(fh=self.mount.add_handle(NativeOpen(node, fh, direct)))
        fi.direct_io = direct
        if self.mount.fastpath.wanted:
            self.mount.fastpath.created(fi, fi.fh, node.ino)
        # What it writes is journaled under the name a link gives it; a read
        # back of its own bytes is no evidence of anything (so: write-only).
        write_only = (flags & ~os.O_ACCMODE) | os.O_WRONLY
        self.mount.journal.on_open(fi.fh, ctx.pid, pdir, flags=write_only)
        return fi, attr

    async def read(self, h: FileHandle, off: int, size: int) -> bytes:
        assert isinstance(h, NativeOpen)
        return os.pread(h.fh.fd, size, off)

    async def fallocate(self, h: FileHandle, mode: int, off: int, length: int) -> None:
        if not isinstance(h, NativeOpen):
            raise fail(errno.EBADF)
        await self.source.fallocate(h.fh, mode, off, length)

    def lseek(self, h: FileHandle, off: int, whence: int) -> int:
        """SEEK_DATA / SEEK_HOLE: one system call, at once (GNU grep asks
        SEEK_HOLE of every file larger than its first read)."""
        if not isinstance(h, NativeOpen):
            raise fail(errno.EBADF)
        return self.source.lseek(h.fh, off, whence)

    def write(self, h: FileHandle, off: int, buf: bytes) -> Reply[int]:
        """At once where no bytes must be kept first (mountd.reply), else
        awaited (a worker thread keeps them)."""
        if not isinstance(h, NativeOpen):
            raise fail(errno.EBADF)
        return self.source.write(h.fh, off, buf)

    def flush(self, h: FileHandle, fh: int) -> Reply[None]:
        """At once, a write's record queued (mountd.reply); awaited, recorded
        in a worker thread, only where it cannot be queued now."""
        assert isinstance(h, NativeOpen)
        self.mount.fastpath.note_writes(fh, h.fh)  # passthrough writers (mountd.fastpath)
        recorded = h.fh.record_on_flush
        if recorded:
            # The kernel's pages hold what was written: the invalidation the
            # record triggers need not drop them.  Not those of a
            # passthrough writer, which went to the backing file.
            h.node.cache_sig = self._cache_sig_after_writes(h, fh)
        got = self.source.flush(h.fh)
        if pending(got):
            return self._wrote_after(h, fh, got)
        if recorded:
            self.mount.journal.on_wrote(fh, h.fh.path(), h.fh.queued)
        return None

    async def _wrote_after(self, h: NativeOpen, fh: int, got: Reply[None]) -> None:
        """A flush or release handed to a worker thread: the journal hears of
        the write once it is recorded."""
        await awaited(got)
        self.mount.journal.on_wrote(fh, h.fh.path(), h.fh.queued)

    def _cache_sig_after_writes(self, h: NativeOpen, fh: int) -> tuple[int, int, int] | None:
        """What the kernel's pages of a file written through ``h`` show: the
        file as it is now if every write went through them, else nothing
        (direct I/O, or kernel passthrough: the next open drops them)."""
        if h.direct or self.mount.fastpath.passed_through(fh):
            return None
        return _sig(os.fstat(h.fh.fd))

    async def fsync(self, h: FileHandle, fh: int, datasync: bool) -> None:
        assert isinstance(h, NativeOpen)
        self.mount.fastpath.note_writes(fh, h.fh)
        recorded = h.fh.dirty
        await self.source.fsync(h.fh, datasync)
        if recorded:
            self.mount.journal.on_wrote(fh, h.fh.path(), h.fh.queued)

    def release_reader(self, h: NativeOpen, fh: int) -> None:
        """``release`` of a handle without a write session (nothing to
        record, no waiting: mountd.reply)."""
        self.mount.fastpath.released(fh)
        self.source.release_reader(h.fh)

    def release(self, h: FileHandle, fh: int) -> Reply[None]:
        """At once: a reader's, or a writer's whose record is queued (or was
        made at its close); awaited, recorded in a worker thread, only where
        the record cannot be queued (``WriteSession.release_later``)."""
        assert isinstance(h, NativeOpen)
        if h.fh.session is None:
            self.release_reader(h, fh)
            return None
        self.mount.fastpath.note_writes(fh, h.fh)
        wrote = h.fh.dirty
        if wrote:
            # Written since the last record: the session records it now.
            h.node.cache_sig = self._cache_sig_after_writes(h, fh)
        self.mount.fastpath.released(fh)
        got = self.source.release(h.fh)
        if pending(got):
            return self._wrote_after(h, fh, got)
        if wrote:
            self.mount.journal.on_wrote(fh, h.fh.path(), h.fh.queued)
        return None

    # -- attributes that change

    async def setattr(
        self,
        node: Node,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        h: Handle | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        native_fh = h.fh if isinstance(h, NativeOpen) else None
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
        if self.table.path(node) is None:
            return await self._setattr_open(node, h, change)
        rel = self.path(node)
        try:
            st = await self.source.setattr(rel, native_fh, change)
        finally:
            node.xattrs = None  # a chown drops security.capability, a chmod may change an ACL
        if change.mode is not None or change.uid is not None or change.gid is not None:
            self._access_changed(rel)
        return self.attributes(node, st)

    async def _setattr_open(
        self, node: Node, h: Handle | None, change: SetAttr
    ) -> pyfuse3.EntryAttributes:
        """``setattr`` of a file no name leads to any more (ftruncate,
        fchmod, fchown, futimens after an unlink): through a descriptor
        open on it.  No generated view shows it: nothing else to tell."""
        fh = self._open_handle(node, h)
        if fh is None:
            raise fail(_nameless(node))
        try:
            st = await self.source.setattr_open(fh, change)
        finally:
            node.xattrs = None
        return self.attributes(node, st)

    def _access_changed(self, rel: str) -> None:
        """Who may read ``rel`` changed: its generated nodes must not keep
        serving the old owner and bits from the kernel's attribute cache.
        Synchronous (attributes only, so safe here): when chmod returns, the
        views are closed too."""
        self.mount.gen.bump(rel)
        nodes = [
            n
            for tree, at in self.mount.router.below(rel)
            for n in self.table.synthetic_below(tree, at)
        ]
        for n in nodes:
            self.mount.invalidate_attrs(n.ino)

    # -- directory entries

    async def mknod(
        self, parent: Node, name: str, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        pdir = self._writable_parent(parent)
        st = await self.source.mknod(pdir, name, mode, rdev, _creds(ctx))
        return self._created(parent, name, st)

    async def mkdir(
        self, parent: Node, name: str, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        st = await self.source.mkdir(self._writable_parent(parent), name, mode, _creds(ctx))
        return self._created(parent, name, st)

    async def symlink(
        self, parent: Node, name: str, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        pdir = self._writable_parent(parent)
        st = await self.source.symlink(pdir, name, target, _creds(ctx))
        return self._created(parent, name, st)

    async def link(self, node: Node, parent: Node, name: str) -> pyfuse3.EntryAttributes:
        if self.table.path(node) is None:
            # No name leads to it: the kernel links only an O_TMPFILE file
            # so (linkat of /proc/self/fd/N); through a descriptor open on it.
            fh = self._open_handle(node)
            if fh is None:
                raise fail(_nameless(node))
            pdir = self._writable_parent(parent, name)
            st = await self.source.link_unnamed(fh, pdir, name)
            return self._created(parent, name, st)
        st = await self.source.link(self.path(node), self._writable_parent(parent), name)
        return self._created(parent, name, st)

    async def unlink(self, parent: Node, name: str, ctx: pyfuse3.RequestContext) -> None:
        if await self.source.unlink(self._writable_parent(parent, name), name):
            self.table.removed((parent.ino, name))
        else:
            self.table.remove_link((parent.ino, name))
        self.mount.journal.on_unlink(ctx.pid, join(self.path(parent), name))

    async def rmdir(self, parent: Node, name: str) -> None:
        await self.source.rmdir(self._writable_parent(parent, name), name)
        self.table.removed((parent.ino, name))  # a directory has no other names

    async def rename(
        self,
        old_parent: Node,
        old: str,
        new_parent: Node,
        new: str,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        old_dir = self._writable_parent(old_parent, old)
        new_dir = self._writable_parent(new_parent, new)
        held = self._hold_target(new_parent, new, join(new_dir, new), flags)

        def moved() -> None:
            # Before the engine records the rename: the invalidations its record
            # triggers must see the new names, or they would drop the kernel's
            # entry of the renamed file under its new name.
            nonlocal held
            if flags & pyfuse3.RENAME_EXCHANGE:
                self.table.exchange_links((old_parent.ino, old), (new_parent.ino, new))
            else:
                self.table.move_link((old_parent.ino, old), (new_parent.ino, new))
            if held is not None:
                self._keep_replaced(*held)
                held = None

        try:
            await self.source.rename(old_dir, old, new_dir, new, flags, moved)
        finally:
            if held is not None:  # the rename failed before it was made
                os.close(held[1].fd)
        self.mount.journal.on_rename(ctx.pid, join(old_dir, old), join(new_dir, new))

    def _hold_target(
        self, parent: Node, name: str, rel: str, flags: int
    ) -> tuple[Node, Held] | None:
        """Before a rename onto ``name``: the file it will replace, held,
        where the kernel holds a node of it (a lookup may have just found
        it: ``mountd.nodes.Held``)."""
        if flags & (pyfuse3.RENAME_EXCHANGE | pyfuse3.RENAME_NOREPLACE):
            return None
        node = self.table.child(parent, name)
        if node is None or not node.lookups or node.is_dir:
            return None
        try:
            fd, st, known = self.source.hold(rel)
        except OSError:
            return None  # nothing there (the rename says what), or not ours to hold
        if (st.st_dev, st.st_ino) != node.key or stat.S_ISDIR(st.st_mode):
            os.close(fd)  # another file than the kernel's (changed behind the mount)
            return None
        return node, Held(fd, st, rel, known)

    def _keep_replaced(self, node: Node, held: Held) -> None:
        """The rename has replaced ``node``'s file: the node keeps ``held``
        while the kernel may still ask about it."""
        if self.table.get(node.ino) is node and self.table.path(node) is None:
            self.table.hold(node, held)
        else:
            os.close(held.fd)  # forgotten already, or still named (a hard link)

    # -- extended attributes

    async def sw_xattrs(self, node: Node) -> dict[str, str]:
        rel = self.table.path(node)
        if rel is None:
            if self._open_handle(node) is None and self.table.held(node) is None:
                raise fail(_nameless(node))
            return {}  # no name, no record: the file's own attributes only
        world = self.mount.engine.world_name  # swfs mount --at
        out: dict[str, str] = {"world": world} if world else {}
        if not rel:
            return {"source": self.mount.src, "store": self.mount.store, **out}
        # Counts versions and reads the baseline: a store read, off the loop.
        state = await self.source.slow(self.mount.engine.workspace.file_state, RelPath(rel))
        if state is not None:
            out["freshness"] = str(state.freshness)
            out["versions"] = str(state.versions)
            if state.hash is not None:
                out["hash"] = state.hash
            if state.baseline_hash is not None:
                out["baseline_hash"] = state.baseline_hash
            # Usually in memory; else rebuilt from the journal's tables (a
            # few queries, tens of ms for a long job's chain): off the loop.
            inputs = await self.source.slow(self.mount.journal.inputs_xattr, rel, state.hash)
            if inputs is not None:
                out["inputs"] = _fitted_inputs(inputs)
        return out

    def getxattr(self, node: Node, name: str) -> Reply[bytes]:
        """The file's own names at once (``own_xattr``); the engine's
        (``user.sw.*``: a hash may need a worker thread) awaited."""
        if name.startswith(XATTR_PREFIX):
            return self._sw_xattr(node, name)
        return self.own_xattr(node, name)

    async def _sw_xattr(self, node: Node, name: str) -> bytes:
        value = (await self.sw_xattrs(node)).get(name[len(XATTR_PREFIX) :])
        if value is None:
            raise fail(absent(name))
        return value.encode("utf-8", "surrogateescape")

    def own_xattr(self, node: Node, name: str) -> bytes:
        """One of the file's own extended attributes (not ``user.sw.*``): a
        system call or none, no waiting (also answered in pyfuse3's callback,
        mountd.reply).

        A name the file does not have is answered from the names last listed
        (``Node.xattrs``), with no system call: the kernel asks
        ``security.capability`` before every write(2), and a tool that probes
        a name asks it of every file, each time.  Those names are kept only
        while the change feed watches the whole tree.  A change through the
        mount forgets them (setxattr, removexattr, setattr); one behind it
        does too, as soon as its event is read (``forget_xattrs``), like the
        kernel's attributes of the file.  A name that is there is read from
        the file every time."""
        rel = self.table.path(node)
        if rel is None:
            try:
                return os.getxattr(self._nameless_at(node), name)
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    raise fail(absent(name)) from None
                raise
        names = self._listed(node, rel)
        if names is not None and name not in names:
            raise fail(absent(name))
        try:
            return self.source.getxattr(rel, name)
        except OSError as exc:
            if exc.errno == errno.ENODATA:
                raise fail(absent(name)) from None
            raise

    def _nameless_at(self, node: Node, *, change: bool = False) -> int | str:
        """Where the extended attributes of a file no name leads to any more
        are: a descriptor open on it; to read them, else the file held
        after a rename replaced it (by its /proc link: an O_PATH
        descriptor has none of its own)."""
        fh = self._open_handle(node)
        if fh is not None:
            return self.source.own_fd(fh) if change else fh.fd
        held = None if change else self.table.held(node)
        if held is None:
            raise fail(_nameless(node))
        return f"/proc/self/fd/{held.fd}"

    def _names_kept(self) -> bool:
        feed = self.mount.feed
        return feed is not None and feed.watching

    def _listed(self, node: Node, rel: str) -> frozenset[str] | None:
        """The file's own xattr names, listed now if not known; None when they
        cannot be kept (the change feed does not watch the whole tree)."""
        if not self._names_kept():
            node.xattrs = None
            return None
        names = node.xattrs
        if names is None:
            names = node.xattrs = frozenset(self.source.listxattr(rel))
        return names

    def forget_xattrs(self, rels: list[str] | None) -> None:
        """The inodes of ``rels`` (None: of every path) may have changed their
        extended attributes behind the mount.  The name's node and the node of
        the inode it names now (a hard link, a reused inode number) forget
        their names; on the loop, a dict lookup and an lstat each."""
        if rels is None:
            for each in self.table.nodes():
                each.xattrs = None
            return
        for rel in dict.fromkeys(rels):  # a new file comes as IN_CREATE and IN_ATTRIB
            node = self.table.find_native(rel)
            if node is not None:
                node.xattrs = None
            try:
                st = self.source.lstat(rel)
            except OSError:
                continue
            node = self.table.find_key((st.st_dev, st.st_ino))
            if node is not None:
                node.xattrs = None

    async def listxattr(self, node: Node) -> list[bytes]:
        """The file's own names only.  ``user.sw.*`` answer by name
        (``getfattr -n user.sw.hash``) but are not listed, so copying tools
        (``cp -a``, ``rsync -X``) do not carry them onto plain copies, where
        they would be stale at once."""
        rel = self.table.path(node)
        if rel is None:
            if self._open_handle(node) is None and self.table.held(node) is None:
                raise fail(_nameless(node))
            return [os.fsencode(n) for n in os.listxattr(self._nameless_at(node))]
        own = self.source.listxattr(rel)
        if self._names_kept():
            node.xattrs = frozenset(own)
        return [os.fsencode(n) for n in own if not n.startswith(XATTR_PREFIX)]

    async def setxattr(self, node: Node, name: str, value: bytes) -> None:
        if name.startswith(XATTR_PREFIX):
            # swfs's own names are derived from the content: setting one
            # (rsync -X from a copy that carries them) changes nothing and
            # is no error.
            return
        try:
            if self.table.path(node) is None:
                os.setxattr(self._nameless_at(node, change=True), name, value)
            else:
                self.source.setxattr(self.path(node), name, value)
        finally:
            node.xattrs = None

    async def removexattr(self, node: Node, name: str) -> None:
        if name.startswith(XATTR_PREFIX):
            return  # as setxattr: derived, not stored; removing one is a no-op
        try:
            if self.table.path(node) is None:
                os.removexattr(self._nameless_at(node, change=True), name)
            else:
                self.source.removexattr(self.path(node), name)
        finally:
            node.xattrs = None

    def __repr__(self) -> str:
        return f"NativeProvider({type(self.source).__name__})"


# An xattr value is at most 64 KiB (XATTR_SIZE_MAX): getxattr of a longer one
# fails with E2BIG, and copying tools with it.
INPUTS_MAX = 60 * 1024


def _fitted_inputs(inputs: str) -> str:
    """``user.sw.inputs`` within INPUTS_MAX bytes: the first inputs that fit,
    then ``{"more": N}`` for the rest (``swfs lineage PATH`` lists them all)."""
    if len(inputs.encode("utf-8", "surrogateescape")) <= INPUTS_MAX:
        return inputs
    try:
        items = json.loads(inputs)
    except ValueError:
        return json.dumps([{"more": "?"}])
    if not isinstance(items, list):
        return json.dumps([{"more": "?"}])
    kept: list[object] = []
    size = 64  # the brackets and the "more" entry
    for item in items:
        text = json.dumps(item, ensure_ascii=False)
        size += len(text.encode("utf-8", "surrogateescape")) + 2
        if size > INPUTS_MAX:
            break
        kept.append(item)
    return json.dumps([*kept, {"more": len(items) - len(kept)}], ensure_ascii=False)
