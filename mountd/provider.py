"""The one interface every tree answers the adapter through.

``mountd.operations`` decodes a kernel request, asks the router
(``mountd.router``) which provider answers for the node it names, and calls
that provider.  Two kinds implement ``Provider``:

* ``mountd.native.NativeProvider``: the native tree, wrapping whatever native
  source sits in ``Operations.native`` (``mountd.passthrough.Passthrough``, or
  a class built on it): it does the system calls, the provider turns nodes
  into paths and results into attributes.
* ``mountd.generated.GeneratedProvider``: a generated tree, wrapping a
  ``mountd.synthetic.SyntheticTree`` (``.parsed``, ``.review``, ...).  It
  answers every mutating request with EROFS (``ReadOnly``), except where a
  tree says otherwise (``.tab``'s writable files, ``mountd.generated.TabProvider``).

A provider shares the adapter's inode table and handle table (``Mount``), so
inode numbers and open files stay one namespace across trees.

The layering follows ratarmount's ``MountSource`` (a source of files behind
one interface, wrapped by layers) under a thin kernel adapter, as borg's
``fuse.py``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyfuse3

from mountd import binding
from mountd.nodes import Node, Tree
from mountd.passthrough import Creds, NativeHandle, SetAttr
from mountd.reply import Reply

if TYPE_CHECKING:
    from mountd.fastpath import FastPath
    from mountd.nodes import InodeTable
    from mountd.options import MountOptions
    from mountd.synthetic import Generation, SyntheticTree
    from swfs.api import BlobBytes, EngineAPI
    from swfs.changefeed import ChangeFeed

T = TypeVar("T")


def fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


# -- open files and directories (the adapter's handle table holds them)


@dataclass
class DataHandle:
    """A generated file, snapshotted at open: a re-parse mid-read never mixes
    two versions of a unit."""

    node: Node
    data: bytes

    def descriptor(self) -> int | None:
        return None


@dataclass
class FdHandle:
    """A read-only file the daemon opened for a generated node (a blob)."""

    node: Node
    fd: int

    def descriptor(self) -> int | None:
        return self.fd


@dataclass
class ReaderHandle:
    """A blob read straight from its chunks: the disk was too full to
    reassemble it into a file (reading history never needs free space)."""

    node: Node
    reader: BlobBytes

    def descriptor(self) -> int | None:
        return None


@dataclass
class NativeOpen:
    node: Node
    fh: NativeHandle
    direct: bool

    def descriptor(self) -> int | None:
        return self.fh.fd


@dataclass
class DirHandle:
    node: Node
    names: list[str] | None = None  # the listing replies index (with "." and "..")
    fresh: bool = False  # names were taken by opendir and no reply used them yet
    # The inode numbers replies gave for names[2:], while they answer with the
    # listing opendir vouched for (None after a rewind or a vanished entry).
    told: list[int | None] | None = None
    fd: int | None = None  # the native directory, open from opendir to releasedir

    def descriptor(self) -> int | None:
        return self.fd


@dataclass
class TabHandle:
    """An open writable file of ``.tab/`` (requirements.md, a scratch file)."""

    node: Node
    append: bool

    def descriptor(self) -> int | None:
        return None


Handle = DataHandle | FdHandle | ReaderHandle | NativeOpen | DirHandle | TabHandle
FileHandle = DataHandle | FdHandle | ReaderHandle | NativeOpen | TabHandle


class NativeSource(Protocol):
    """What the native provider asks of the native source in
    ``Operations.native``: ``mountd.passthrough.Passthrough`` has it all, and
    so must any class that takes its place (a subclass, or one of its own)."""

    root_fd: int
    reserved: frozenset[str]

    def close(self) -> None: ...
    async def slow(self, fn: Callable[..., T], *args: Any) -> T: ...
    def open_dir(self, rel: str) -> int: ...
    def entries(self, rel: str, fd: int) -> list[tuple[str, int]]: ...
    def lstat(self, rel: str) -> os.stat_result: ...
    def lstat_entry(self, rel_dir: str, fd: int, name: str) -> os.stat_result: ...
    def open_read(self, rel: str) -> int: ...
    def readlink(self, rel: str) -> bytes: ...
    def statvfs(self) -> os.statvfs_result: ...
    async def setattr(
        self, rel: str, fh: NativeHandle | None, change: SetAttr
    ) -> os.stat_result: ...
    async def setattr_open(self, fh: NativeHandle, change: SetAttr) -> os.stat_result:
        """``setattr`` of an open file no name leads to any more."""
        ...

    def own_fd(self, fh: NativeHandle) -> int:
        """The descriptor through which an open file no name leads to is changed."""
        ...

    def hold(self, rel: str) -> tuple[int, os.stat_result, str | None]:
        """An O_PATH descriptor of ``rel``, its stat, its hash if recorded."""
        ...

    def open(self, rel: str, flags: int, creds: Creds) -> Reply[NativeHandle]:
        """At once where no waiting is needed, else an awaitable (mountd.reply)."""
        ...

    def create(
        self, parent: str, name: str, mode: int, flags: int, creds: Creds
    ) -> Reply[tuple[NativeHandle, os.stat_result]]:
        """At once, or awaited where it must wait (the name exists and is
        to be opened, a layer to copy up)."""
        ...

    def write(self, fh: NativeHandle, off: int, buf: bytes) -> Reply[int]:
        """At once, or awaited where it must wait (bytes to keep first)."""
        ...

    async def fallocate(self, fh: NativeHandle, mode: int, off: int, length: int) -> None: ...
    def lseek(self, fh: NativeHandle, off: int, whence: int) -> int: ...
    async def tmpfile(
        self, parent: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]: ...
    async def link_unnamed(self, fh: NativeHandle, parent: str, name: str) -> os.stat_result: ...
    def flush(self, fh: NativeHandle) -> Reply[None]:
        """At once, or awaited where the record must be made in a worker thread."""
        ...

    async def fsync(self, fh: NativeHandle, datasync: bool) -> None: ...
    def release(self, fh: NativeHandle) -> Reply[None]:
        """At once where nothing is left to record (a reader, or a writer
        whose close recorded it), else awaited."""
        ...

    def release_reader(self, fh: NativeHandle) -> None: ...

    async def mkdir(self, parent: str, name: str, mode: int, creds: Creds) -> os.stat_result: ...
    async def mknod(
        self, parent: str, name: str, mode: int, rdev: int, creds: Creds
    ) -> os.stat_result: ...
    async def symlink(
        self, parent: str, name: str, target: bytes, creds: Creds
    ) -> os.stat_result: ...
    async def link(self, rel: str, parent: str, name: str) -> os.stat_result: ...
    async def unlink(self, parent: str, name: str) -> bool: ...
    async def rmdir(self, parent: str, name: str) -> None: ...
    async def rename(
        self,
        old_parent: str,
        old_name: str,
        new_parent: str,
        new_name: str,
        flags: int,
        moved: Callable[[], None] = ...,
    ) -> None: ...
    def getxattr(self, rel: str, name: str) -> bytes: ...
    def listxattr(self, rel: str) -> list[str]: ...
    def setxattr(self, rel: str, name: str, value: bytes) -> None: ...
    def removexattr(self, rel: str, name: str) -> None: ...


class Routes(Protocol):
    """What a provider asks of the router (``mountd.router.Router``)."""

    names: frozenset[str]  # the generated trees' names, reserved at the root
    trees: dict[Tree, SyntheticTree]

    def provider(self, tree: Tree) -> SyntheticTree: ...
    def route(self, node: Node) -> Provider: ...
    def route_child(self, parent: Node, name: str) -> Provider: ...
    def listed(self) -> list[str]: ...
    def below(self, rel: str) -> Iterator[tuple[Tree, str]]: ...


class Invalidates(Protocol):
    """What a provider asks of the kernel cache invalidation
    (``mountd.invalidator.Invalidator``)."""

    def gone(self, links: Iterable[tuple[int, str]]) -> None: ...
    def drop_listing(self, ino: int) -> None: ...


class Mount(Protocol):
    """What providers share with the adapter (``mountd.operations.Operations``).

    Typed by protocols (``Routes``, ``Invalidates``), not by the classes
    that implement them: this module is what the router, the invalidator
    and the adapter import, so it imports none of them."""

    engine: EngineAPI
    options: MountOptions
    table: InodeTable
    gen: Generation
    journal: Any
    native: NativeSource  # generated trees open blobs through it (slow(), root_fd)
    fastpath: FastPath  # kernel passthrough of native file data
    feed: ChangeFeed | None  # changes behind the mount (none for a world, or before it runs)
    handles: dict[int, Handle]
    src: str
    store: str

    @property
    def router(self) -> Routes: ...
    @property
    def invalidator(self) -> Invalidates: ...
    def add_handle(self, h: Handle) -> int: ...
    def invalidate_attrs(self, ino: int) -> None: ...
    def release(self, fh: int) -> Reply[None]: ...


class Provider(Protocol):
    """What the adapter asks of a tree, node by node."""

    # Its opens and listings are evidence for the access journal (the tab's are not).
    evidence: bool
    # The errno of a rename between this tree and another one.
    rename_across: int

    # The methods answering a request that may be answered at once return
    # their reply or an awaitable of it (``mountd.reply``): an ``async def``
    # fits, and so does a plain method that answers what needs no waiting
    # and hands back a coroutine for the rest (the native tree's).

    # -- attributes and names
    def attr(self, node: Node) -> Reply[pyfuse3.EntryAttributes]: ...
    def lookup(
        self, parent: Node, name: str, *, wait: bool = True
    ) -> Reply[tuple[Node, pyfuse3.EntryAttributes]]:
        """``name`` in ``parent``, without taking a kernel reference.  At the
        mount root the router sends a generated tree's name to that tree."""
        ...

    async def reply_entry(
        self, parent: Node, name: str, fd: int | None
    ) -> tuple[Node, pyfuse3.EntryAttributes]:
        """A listing's entry ``name`` (``fd``: the open native directory)."""
        ...

    def readlink(self, node: Node) -> bytes: ...

    # -- directories
    def open_dir(self, node: Node) -> int | None:
        """A descriptor the listing and its replies use (closed by the caller)."""
        ...

    async def listing(self, node: Node, fd: int | None) -> tuple[list[str], list[Node | None]]:
        """The names directory ``node`` shows, and the live node of each."""
        ...

    def keeps_listing(self, node: Node) -> bool:
        """The kernel may keep the directory's listing until it is
        invalidated: every change to it is (mountd.dirlist)."""
        ...

    def parent_ino(self, node: Node) -> int: ...
    def dir_path(self, node: Node) -> str:
        """The directory's path as the journal names it."""
        ...

    async def fsyncdir(self, node: Node) -> None: ...

    # -- files
    def open(
        self, node: Node, flags: int, ctx: pyfuse3.RequestContext
    ) -> Reply[pyfuse3.FileInfo]: ...

    async def read(self, h: FileHandle, off: int, size: int) -> bytes: ...
    def write(self, h: FileHandle, off: int, buf: bytes) -> Reply[int]: ...
    async def fallocate(self, h: FileHandle, mode: int, off: int, length: int) -> None: ...
    def lseek(self, h: FileHandle, off: int, whence: int) -> Reply[int]:
        """SEEK_DATA / SEEK_HOLE: the offset found (ENXIO: none)."""
        ...

    def flush(self, h: FileHandle, fh: int) -> Reply[None]: ...
    async def fsync(self, h: FileHandle, fh: int, datasync: bool) -> None: ...
    def release(self, h: FileHandle, fh: int) -> Reply[None]: ...

    # -- extended attributes
    def getxattr(self, node: Node, name: str) -> Reply[bytes]: ...
    async def listxattr(self, node: Node) -> list[bytes]: ...
    async def setxattr(self, node: Node, name: str, value: bytes) -> None: ...
    async def removexattr(self, node: Node, name: str) -> None: ...

    # -- changes (a read-only tree answers EROFS)
    async def setattr(
        self,
        node: Node,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        h: Handle | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes: ...

    def create(
        self, parent: Node, name: str, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> Reply[tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]]: ...

    async def tmpfile(
        self, parent: Node, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        """open(parent, O_TMPFILE): a file without a name, open."""
        ...

    async def mknod(
        self, parent: Node, name: str, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes: ...

    async def mkdir(
        self, parent: Node, name: str, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes: ...

    async def symlink(
        self, parent: Node, name: str, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes: ...

    async def link(self, node: Node, parent: Node, name: str) -> pyfuse3.EntryAttributes: ...
    async def unlink(self, parent: Node, name: str, ctx: pyfuse3.RequestContext) -> None: ...
    async def rmdir(self, parent: Node, name: str) -> None: ...
    async def rename(
        self,
        old_parent: Node,
        old: str,
        new_parent: Node,
        new: str,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None: ...


class ReadOnly:
    """The answers of a tree nothing may change: EROFS for every change,
    EINVAL for readlink (it holds no symlinks), EBADF for a write."""

    evidence = True
    rename_across = errno.EROFS

    def readlink(self, node: Node) -> bytes:
        raise fail(errno.EINVAL)

    async def fsyncdir(self, node: Node) -> None:
        return None

    async def write(self, h: FileHandle, off: int, buf: bytes) -> int:
        raise fail(errno.EBADF)

    async def fallocate(self, h: FileHandle, mode: int, off: int, length: int) -> None:
        raise fail(errno.EBADF)

    async def lseek(self, h: FileHandle, off: int, whence: int) -> int:
        if isinstance(h, FdHandle):
            return os.lseek(h.fd, off, whence)
        if isinstance(h, DataHandle):
            return seek_in(len(h.data), off, whence)
        raise fail(errno.EBADF)

    async def tmpfile(
        self, parent: Node, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        raise fail(errno.EROFS)

    async def flush(self, h: FileHandle, fh: int) -> None:
        return None

    async def fsync(self, h: FileHandle, fh: int, datasync: bool) -> None:
        return None

    async def setxattr(self, node: Node, name: str, value: bytes) -> None:
        raise fail(errno.EROFS)

    async def removexattr(self, node: Node, name: str) -> None:
        raise fail(errno.EROFS)

    async def setattr(
        self,
        node: Node,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        h: Handle | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        raise fail(errno.EROFS)

    async def create(
        self, parent: Node, name: str, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        raise fail(errno.EROFS)

    async def mknod(
        self, parent: Node, name: str, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise fail(errno.EROFS)

    async def mkdir(
        self, parent: Node, name: str, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise fail(errno.EROFS)

    async def symlink(
        self, parent: Node, name: str, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise fail(errno.EROFS)

    async def link(self, node: Node, parent: Node, name: str) -> pyfuse3.EntryAttributes:
        raise fail(errno.EROFS)

    async def unlink(self, parent: Node, name: str, ctx: pyfuse3.RequestContext) -> None:
        raise fail(errno.EROFS)

    async def rmdir(self, parent: Node, name: str) -> None:
        raise fail(errno.EROFS)

    async def rename(
        self,
        old_parent: Node,
        old: str,
        new_parent: Node,
        new: str,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        raise fail(errno.EROFS)


def seek_in(size: int, off: int, whence: int) -> int:
    """SEEK_DATA / SEEK_HOLE in ``size`` bytes without holes (a generated
    file's): data from ``off`` on, the one hole at the end."""
    if whence not in (os.SEEK_DATA, os.SEEK_HOLE):
        raise fail(errno.EINVAL)
    if off < 0 or off >= size:
        raise fail(errno.ENXIO)
    return off if whence == os.SEEK_DATA else size


def absent(name: str) -> int:
    """The errno for an extended attribute a node does not have.

    A security label the backing file lacks is reported the way a file system
    without labels reports it, EOPNOTSUPP: a security module, where one runs,
    answers for its own labels before the request reaches the daemon, and
    tools that see EOPNOTSUPP stop asking for every file of the mount
    (``ls -l`` asks ``security.selinux`` of each entry until then).  Labels
    the backing file has still pass through."""
    return errno.EOPNOTSUPP if name.startswith("security.") else errno.ENODATA


def read_only(fi: pyfuse3.FileInfo) -> pyfuse3.FileInfo:
    """Mark an open that cannot write: its close needs no FLUSH round trip
    (flush only records writes and reports the backing close's errors)."""
    binding.set_noflush(fi)
    return fi


def is_write(flags: int) -> bool:
    return flags & os.O_ACCMODE != os.O_RDONLY or bool(flags & os.O_TRUNC)
