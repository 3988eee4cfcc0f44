"""The native tree of a world (``swfs mount --at NAME``): the files of a
snapshot, read-only, with the public methods of ``mountd.passthrough.Passthrough``.

The names, sizes, modes, owners and times come from the snapshot's manifest
(``swfs.history.world``), laid out once at mount as a *skeleton*: a private
directory tree of empty sparse files with those attributes, so that the
directory descriptors, ``*at`` stats and inode numbers the adapter relies on
are real and stable.  The bytes never go there: opening a file opens its
blob (reassembled from the blob store's chunks on first use, in a worker
thread).  Every change is EROFS.  The skeleton costs one small metadata
write per file (no data), and is removed at unmount.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import trio

from mountd.fsutil import dir_fd, open_beneath
from mountd.passthrough import Creds, NativeHandle, Passthrough, SetAttr, split
from mountd.poll import Poller
from mountd.staged import native_tree
from swfs import permissions
from swfs.api import RESERVED_ROOTS, Access, EngineAPI, RelPath
from swfs.history.world import World

log = logging.getLogger(__name__)

T = TypeVar("T")

SKELETON_PREFIX = "swfs-world-"


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
        _sweep_stale()
        self.skeleton = Path(
            tempfile.mkdtemp(prefix=f"{SKELETON_PREFIX}{os.getpid()}-", dir=_skeleton_parent())
        )
        try:
            _lay_out(engine, self.skeleton, src)
            self.root_fd = os.open(self.skeleton, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except BaseException:
            shutil.rmtree(self.skeleton, ignore_errors=True)
            raise

    def close(self) -> None:
        os.close(self.root_fd)
        shutil.rmtree(self.skeleton, ignore_errors=True)

    async def slow(self, fn: Callable[..., T], *args: Any) -> T:
        with self.poller.paused() if self.poller is not None else nullcontext():
            return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

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


def _skeleton_parent() -> str:
    """Where skeletons go: a tmpfs if there is one (no disk writes, and its
    sparse files take no memory), else the temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _lay_out(world: World, root: Path, src: str) -> None:
    """The skeleton of ``world`` under ``root``: directories, then one empty
    file per manifest entry with its size (a hole), mode, owner and time.
    Modes and owners are the snapshot's (``World.access``): a folder it kept
    no mode for is owner-only, never the workspace root's.
    About five system calls a file, each directory opened once."""
    as_root = os.geteuid() == 0
    dirs: set[str] = set()
    for rel in [*world.records, *(f"{d}/." for d in world.dirs if d)]:
        head = rel.rpartition("/")[0]
        while head and head not in dirs:
            dirs.add(head)
            head = head.rpartition("/")[0]
    at_ns = int(world.dir_times() * 1e9)
    old_umask = os.umask(0)  # modes are the manifest's, exactly
    fds: dict[str, int] = {"": os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)}
    try:
        for d in sorted(dirs, key=lambda r: r.count("/")):
            parent, name = split(d)
            os.mkdir(name, 0o700, dir_fd=fds[parent])
            fds[d] = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fds[parent])
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for rel, rec in world.records.items():
            parent, name = split(rel)
            acc = _access(world, rel, directory=False)
            fd = os.open(name, create, acc.mode & 0o777, dir_fd=fds[parent])
            try:
                if rec.size:
                    os.ftruncate(fd, rec.size)
                if as_root and (acc.uid, acc.gid) != (0, 0):
                    os.fchown(fd, acc.uid, acc.gid)
                if acc.mode & ~0o777:  # set-id and sticky bits: after the chown
                    os.fchmod(fd, acc.mode)
                os.utime(fd, ns=(rec.mtime_ns, rec.mtime_ns))
            finally:
                os.close(fd)
        # Directories last: their modes may forbid adding to them.
        for d in sorted(fds, key=lambda r: -r.count("/")):
            acc = _access(world, d, directory=True)
            if as_root:
                os.fchown(fds[d], acc.uid, acc.gid)
            os.fchmod(fds[d], acc.mode)
            os.utime(fds[d], ns=(at_ns, at_ns))
    finally:
        os.umask(old_umask)
        for fd in fds.values():
            os.close(fd)


def _access(world: World, rel: str, *, directory: bool) -> Access:
    """The owner and mode the snapshot recorded for ``rel``, narrowed by the
    live path's (``World.access``); owner-only where none was recorded."""
    acc = world.access(RelPath(rel))
    return acc or permissions.owner_only(world.store_dir, directory=directory)


def _sweep_stale() -> None:
    """Remove the skeletons of world daemons that died without unmounting."""
    tmp = Path(_skeleton_parent())
    with contextlib.suppress(OSError):
        for p in tmp.glob(f"{SKELETON_PREFIX}*"):
            pid = p.name[len(SKELETON_PREFIX) :].partition("-")[0]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                log.info("removing the skeleton of a world that is gone: %s", p)
                shutil.rmtree(p, ignore_errors=True)
            except PermissionError:
                continue
