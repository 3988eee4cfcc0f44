"""The native tree of a world (``swfs mount --at NAME``): the files of a
snapshot, read-only, with the public methods of ``mountd.passthrough.Passthrough``.

Names, sizes, modes, owners and times are answered from the world's
*skeleton* (``swfs.history.skeleton``: which paths and folders the world
shows, laid out by the engine as a private tree of empty sparse files, so
the directory descriptors, ``*at`` stats and inode numbers the adapter
relies on are real and stable).  Opening a file opens its blob (reassembled
from the blob store's chunks on first use, in a worker thread).  Every
change is EROFS.  The skeleton is removed at unmount.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, NoReturn, TypeVar

import trio

from mountd import hop
from mountd.fsutil import dir_fd, open_beneath
from mountd.passthrough import Creds, NativeHandle, Passthrough, SetAttr, split
from mountd.poll import Poller
from mountd.staged import native_tree
from swfs.api import RESERVED_ROOTS, EngineAPI
from swfs.history.skeleton import Skeleton
from swfs.history.world import World

T = TypeVar("T")


def _erofs() -> NoReturn:
    raise OSError(errno.EROFS, os.strerror(errno.EROFS))


def native_source(
    engine: EngineAPI, src: str, *, hidden: frozenset[str], poller: Poller | None = None
) -> Passthrough | WorldNative:
    """The native tree for ``engine``: a world's snapshot, else SRC itself or
    its staged layer (``mountd.staged.native_tree``)."""
    if isinstance(engine, World):
        return WorldNative(engine, src, hidden=hidden, poller=poller)
    return native_tree(engine, src, hidden=hidden, poller=poller)


def is_world(engine: object) -> bool:
    return isinstance(engine, World)


class WorldNative:
    def __init__(
        self, engine: World, src: str, *, hidden: frozenset[str], poller: Poller | None = None
    ) -> None:
        self.engine = engine
        self.poller = poller
        self.hidden: frozenset[str] = frozenset()  # the store is no part of a manifest
        self.hidden_names: frozenset[str] = frozenset()
        self.writes = engine.writes
        self.reserved = RESERVED_ROOTS
        self.limiter = trio.CapacityLimiter(8)
        self.skeleton = Skeleton(engine)
        self.root_fd = self.skeleton.root_fd

    def close(self) -> None:
        self.skeleton.close()

    async def slow(self, fn: Callable[..., T], *args: Any) -> T:
        with self.poller.paused() if self.poller is not None else nullcontext():
            return await hop.run_sync(fn, *args, limiter=self.limiter)

    # -- names
    def is_hidden(self, rel: str) -> bool:
        return False

    def check_new_name(self, parent: str, name: str) -> None:
        _erofs()

    # -- reading the tree
    def open_dir(self, rel: str) -> int:
        return open_beneath(self.root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)

    def entries(self, rel: str, fd: int) -> list[tuple[str, int]]:
        with os.scandir(fd) as it:
            return [(e.name, e.inode()) for e in it]

    def lstat(self, rel: str) -> os.stat_result:
        if not rel:
            return os.stat(self.root_fd)
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)

    @staticmethod
    def lstat_entry(rel_dir: str, fd: int, name: str) -> os.stat_result:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)

    def open_read(self, rel: str) -> int:
        """A descriptor of the world's bytes of ``rel``, for reading."""
        self.lstat(rel)
        return self.engine.open_file(rel)

    def readlink(self, rel: str) -> bytes:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    def statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.engine.src)

    # -- files
    async def open(self, rel: str, flags: int, creds: Creds) -> NativeHandle:
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            _erofs()
        st = self.lstat(rel)  # ENOENT / ENOTDIR as the tree says
        # The blob's descriptor is another inode: the provider compares the
        # skeleton's stat (what the kernel was told), which never changes.
        return NativeHandle(await self.slow(self.engine.open_file, rel), stat=st)

    @staticmethod
    def read(fh: NativeHandle, off: int, size: int) -> bytes:
        return os.pread(fh.fd, size, off)

    def write(self, fh: NativeHandle, off: int, buf: bytes) -> int:
        _erofs()

    @staticmethod
    def flush(fh: NativeHandle) -> None:
        pass  # nothing is ever written

    async def fsync(self, fh: NativeHandle, datasync: bool) -> None:
        pass

    @staticmethod
    def release(fh: NativeHandle) -> None:
        os.close(fh.fd)

    @staticmethod
    def release_reader(fh: NativeHandle) -> None:
        os.close(fh.fd)

    # -- every change is refused
    async def setattr(self, rel: str, fh: NativeHandle | None, change: SetAttr) -> os.stat_result:
        _erofs()

    async def setattr_open(self, fh: NativeHandle, change: SetAttr) -> os.stat_result:
        _erofs()

    def own_fd(self, fh: NativeHandle) -> int:
        _erofs()

    def hold(self, rel: str) -> tuple[int, os.stat_result, str | None]:
        _erofs()  # nothing is ever replaced

    async def create(
        self, parent: str, name: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        _erofs()

    async def fallocate(self, fh: NativeHandle, mode: int, off: int, length: int) -> None:
        _erofs()

    @staticmethod
    def lseek(fh: NativeHandle, off: int, whence: int) -> int:
        return os.lseek(fh.fd, off, whence)

    async def tmpfile(
        self, parent: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        _erofs()

    async def link_unnamed(self, fh: NativeHandle, parent: str, name: str) -> os.stat_result:
        _erofs()

    async def mkdir(self, parent: str, name: str, mode: int, creds: Creds) -> os.stat_result:
        _erofs()

    async def mknod(
        self, parent: str, name: str, mode: int, rdev: int, creds: Creds
    ) -> os.stat_result:
        _erofs()

    async def symlink(self, parent: str, name: str, target: bytes, creds: Creds) -> os.stat_result:
        _erofs()

    async def link(self, rel: str, parent: str, name: str) -> os.stat_result:
        _erofs()

    async def unlink(self, parent: str, name: str) -> bool:
        _erofs()

    async def rmdir(self, parent: str, name: str) -> None:
        _erofs()

    async def rename(
        self,
        old_parent: str,
        old_name: str,
        new_parent: str,
        new_name: str,
        flags: int,
        moved: Callable[[], None] = lambda: None,
    ) -> None:
        _erofs()

    # -- extended attributes: a manifest keeps none of the file's own
    def getxattr(self, rel: str, name: str) -> bytes:
        self.lstat(rel)
        raise OSError(errno.ENODATA, os.strerror(errno.ENODATA))

    def listxattr(self, rel: str) -> list[str]:
        self.lstat(rel)
        return []

    def setxattr(self, rel: str, name: str, value: bytes) -> None:
        _erofs()

    def removexattr(self, rel: str, name: str) -> None:
        _erofs()

    async def engine_check(self, rel: str) -> None:
        pass
