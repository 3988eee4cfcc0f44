"""A generated tree as a provider (``mountd.provider.Provider``).

``GeneratedProvider`` wraps a ``mountd.synthetic.SyntheticTree`` (an
``Entry`` per path, the names of a directory, the ``user.sw.*`` attributes)
and answers the adapter in inode-table nodes and kernel attributes.  Nothing
in it changes: every mutating request is EROFS (``ReadOnly``).
``TabProvider`` is ``.tab``: its writable files take writes, truncation,
creation, renames and removals, and nothing it serves is evidence.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping

import pyfuse3

from mountd.nodes import Node
from mountd.passthrough import join, split
from mountd.provider import (
    DataHandle,
    FdHandle,
    FileHandle,
    Handle,
    Mount,
    ReaderHandle,
    ReadOnly,
    TabHandle,
    absent,
    fail,
    is_write,
    read_only,
    seek_in,
)
from mountd.reply import Reply, awaited
from mountd.synthetic import Entry, SyntheticTree
from mountd.tabtree import TabTree
from swfs.api import XATTR_PREFIX

BLOCK = 4096


class GeneratedProvider(ReadOnly):
    timeout: float | None = None  # None: the mount's --synthetic timeout

    def __init__(self, mount: Mount, source: SyntheticTree) -> None:
        self.mount = mount
        self.source = source
        self.tree = source.tree
        self.table = mount.table

    # -- attributes and names

    def attributes(self, node: Node, e: Entry) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        timeout = self.mount.options.synthetic_timeout if self.timeout is None else self.timeout
        a.entry_timeout = a.attr_timeout = timeout
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
        node.listing_kept = e.listing_kept
        return a

    async def entry(self, node: Node, *, wait: bool = False) -> Entry:
        e = await self.source.entry(node.spath, wait=wait)
        if e is None:
            raise fail(errno.ENOENT)
        return e

    async def attr(self, node: Node) -> pyfuse3.EntryAttributes:
        return self.attributes(node, await self.entry(node))

    async def lookup(
        self, parent: Node, name: str, *, wait: bool = True
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        if parent.tree is not self.tree:
            # The tree's own name in the mount root: its root.
            node = self.table.synthetic(self.tree, "")
            return node, self.attributes(node, await self.entry(node))
        spath = join(parent.spath, name)
        e = await self.source.entry(spath, wait=wait)
        if e is None:
            raise fail(errno.ENOENT)
        node = self.table.synthetic(self.tree, spath)
        return node, self.attributes(node, e)

    async def reply_entry(
        self, parent: Node, name: str, fd: int | None
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        return await self.lookup(parent, name, wait=False)

    # -- directories

    def open_dir(self, node: Node) -> int | None:
        return None

    def keeps_listing(self, node: Node) -> bool:
        return node.listing_kept

    async def listing(self, node: Node, fd: int | None) -> tuple[list[str], list[Node | None]]:
        names = await self.source.children(node.spath)
        found = [self.table.find_synthetic(self.tree, join(node.spath, n)) for n in names]
        return names, found

    def parent_ino(self, node: Node) -> int:
        if not node.spath:
            return self.table.root.ino
        parent = self.table.find_synthetic(self.tree, split(node.spath)[0])
        return parent.ino if parent is not None else self.table.root.ino

    def dir_path(self, node: Node) -> str:
        return join(self.tree, node.spath)

    # -- files

    def open(self, node: Node, flags: int, ctx: pyfuse3.RequestContext) -> Reply[pyfuse3.FileInfo]:
        """At once where the tree has the bytes at hand (a unit of
        ``.parsed``: ``ParsedTree.open_entry``), else awaited (mountd.reply)."""
        if is_write(flags):
            return self._open(node, flags, None, ctx)  # refused there
        got = self.source.open_entry(node.spath)
        if not isinstance(got, Entry) or got.data is None:
            return self._open(node, flags, got, ctx)
        fi = self._open_data(node, got.data)
        self.mount.journal.on_open(fi.fh, ctx.pid, join(self.tree, node.spath), xattrs=got.xattrs)
        return fi

    async def _open(
        self, node: Node, flags: int, got: Reply[Entry | None], ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileInfo:
        if is_write(flags):
            raise fail(errno.EROFS)
        e = await awaited(got)
        if e is None:
            raise fail(errno.ENOENT)
        fi = await self.open_entry(node, e)
        self.mount.journal.on_open(fi.fh, ctx.pid, join(self.tree, node.spath), xattrs=e.xattrs)
        return fi

    def _open_data(self, node: Node, data: bytes) -> pyfuse3.FileInfo:
        if len(data) != node.size:
            self.mount.invalidate_attrs(node.ino)  # the kernel must not cut the snapshot short
        # The kernel may keep its pages if they hold exactly these bytes.
        sig = (len(data), hash(data))
        keep, node.cache_sig = node.cache_sig == sig, sig
        self.table.opened(node)
        fh = self.mount.add_handle(DataHandle(node, data))
        return read_only(pyfuse3.FileInfo(fh=fh, keep_cache=keep))

    async def open_entry(self, node: Node, e: Entry) -> pyfuse3.FileInfo:
        if e.is_dir:
            raise fail(errno.EISDIR)
        if e.data is not None:
            return self._open_data(node, e.data)
        native = self.mount.native
        if e.blob is not None:
            # A chunked blob is reassembled on first open: not on the loop.
            got = await native.slow(self.mount.engine.workspace.open_blob_reading, e.blob)
            if not isinstance(got, int):  # no room to reassemble it: read the chunks
                self.table.opened(node)
                return read_only(
                    pyfuse3.FileInfo(fh=self.mount.add_handle(ReaderHandle(node, got)))
                )
            fd = got
        elif e.native is not None:
            fd = native.open_read(e.native)
        else:
            raise fail(errno.EIO)
        self.table.opened(node)
        return read_only(
            pyfuse3.FileInfo(fh=self.mount.add_handle(FdHandle(node, fd)), keep_cache=True)
        )

    async def read(self, h: FileHandle, off: int, size: int) -> bytes:
        if isinstance(h, DataHandle):
            return h.data[off : off + size]
        if isinstance(h, FdHandle):
            return os.pread(h.fd, size, off)
        if isinstance(h, ReaderHandle):
            return await self.mount.native.slow(h.reader.pread, size, off)
        raise fail(errno.EBADF)

    def release(self, h: FileHandle, fh: int) -> None:
        """At once: bytes in memory, or a descriptor to close."""
        if isinstance(h, FdHandle):
            os.close(h.fd)

    # -- extended attributes

    async def xattrs(self, node: Node) -> Mapping[str, str]:
        return await self.source.xattrs(node.spath)

    async def getxattr(self, node: Node, name: str) -> bytes:
        value = (await self.xattrs(node)).get(name[len(XATTR_PREFIX) :])
        if value is None or not name.startswith(XATTR_PREFIX):
            raise fail(absent(name))
        return value.encode("utf-8", "surrogateescape")

    async def listxattr(self, node: Node) -> list[bytes]:
        return [os.fsencode(XATTR_PREFIX + k) for k in await self.xattrs(node)]

    def __repr__(self) -> str:
        return f"GeneratedProvider({self.tree})"


class TabProvider(GeneratedProvider):
    """``.tab``: written by the agent and by `swfs tab new`, built from each
    read, so the kernel asks again every time (no attribute timeout, direct
    I/O); not journaled (the tab is no evidence)."""

    evidence = False
    timeout = 0
    rename_across = errno.EXDEV  # mv copies instead

    def __init__(self, mount: Mount, source: TabTree) -> None:
        super().__init__(mount, source)
        self.tab = source

    async def open(self, node: Node, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if is_write(flags):
            if not self.tab.writable(node.spath):
                raise fail(errno.EROFS)
            if flags & os.O_TRUNC:
                await self.tab.truncate(node.spath, 0)
            self.table.opened(node)
            handle = TabHandle(node, bool(flags & os.O_APPEND))
            fi = pyfuse3.FileInfo(fh=self.mount.add_handle(handle))
        else:
            fi = await self.open_entry(node, await self.entry(node, wait=True))
        fi.direct_io = True
        fi.keep_cache = False
        return fi

    async def create(
        self, parent: Node, name: str, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        spath = join(parent.spath, name)
        await self.tab.create(spath)
        node = self.table.synthetic(self.tree, spath)
        attr = self.attributes(node, await self.entry(node))
        self.table.remember(node)
        self.table.opened(node)
        fi = pyfuse3.FileInfo(fh=self.mount.add_handle(TabHandle(node, bool(flags & os.O_APPEND))))
        fi.direct_io = True
        return fi, attr

    async def read(self, h: FileHandle, off: int, size: int) -> bytes:
        if isinstance(h, TabHandle):
            return self.tab.content(h.node.spath)[off : off + size]
        return await super().read(h, off, size)

    async def write(self, h: FileHandle, off: int, buf: bytes) -> int:
        if not isinstance(h, TabHandle):
            raise fail(errno.EBADF)
        return await self.tab.write(h.node.spath, off, buf, append=h.append)

    async def fallocate(self, h: FileHandle, mode: int, off: int, length: int) -> None:
        if not isinstance(h, TabHandle):
            raise fail(errno.EBADF)
        raise fail(errno.EOPNOTSUPP)  # a few lines of text: nothing to allocate

    async def lseek(self, h: FileHandle, off: int, whence: int) -> int:
        if isinstance(h, TabHandle):
            return seek_in(len(self.tab.content(h.node.spath)), off, whence)
        return await super().lseek(h, off, whence)

    async def setattr(
        self,
        node: Node,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        h: Handle | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        if not self.tab.writable(node.spath):
            raise fail(errno.EROFS)
        if fields.update_size:
            await self.tab.truncate(node.spath, attr.st_size)
        return await self.attr(node)  # times and modes of the tab are its own

    async def setxattr(self, node: Node, name: str, value: bytes) -> None:
        # An editor saving requirements.md copies the old file's ACL onto its
        # scratch file (sed -i: "preserving permissions"): a file system
        # without xattrs says ENOTSUP, which such tools take in their stride.
        raise fail(errno.ENOTSUP if self.tab.writable(node.spath) else errno.EROFS)

    async def removexattr(self, node: Node, name: str) -> None:
        raise fail(errno.ENOTSUP if self.tab.writable(node.spath) else errno.EROFS)

    async def unlink(self, parent: Node, name: str, ctx: pyfuse3.RequestContext) -> None:
        await self.tab.unlink(join(parent.spath, name))

    async def rename(
        self,
        old_parent: Node,
        old: str,
        new_parent: Node,
        new: str,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        if flags:
            raise fail(errno.EXDEV)
        await self.tab.rename(join(old_parent.spath, old), join(new_parent.spath, new))


def provide(mount: Mount, source: SyntheticTree) -> GeneratedProvider:
    """The provider of a generated tree (``.tab`` takes some writes)."""
    if isinstance(source, TabTree):
        return TabProvider(mount, source)
    return GeneratedProvider(mount, source)
