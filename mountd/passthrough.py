"""The native tree: byte-for-byte passthrough to SRC, plus the engine hooks
that keep history (preserve before overwrite, record after write).

Paths are relative to SRC ('' is SRC itself).  Every call goes through a
directory fd opened beneath SRC without following symlinks, and uses the
``*at`` calls, so paths near PATH_MAX work and nothing escapes SRC.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from mountd.fsutil import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    dir_fd,
    open_beneath,
    renameat2,
    utimensat,
)
from mountd.poll import Poller
from swfs.api import EngineAPI, RelPath

log = logging.getLogger(__name__)

T = TypeVar("T")

RESERVED = frozenset({".parsed", ".review", ".versions", ".search", ".tab"})
STORE_NAME = ".swfs"

# Flags a backing open never gets: creation is done by create(), and O_DIRECT
# needs aligned buffers that os.pread/os.pwrite cannot promise.
_STRIP = os.O_CREAT | os.O_EXCL | os.O_NOCTTY | os.O_DIRECT


def split(rel: str) -> tuple[str, str]:
    head, _, tail = rel.rpartition("/")
    return head, tail


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _drop_setid(fd: int) -> None:
    """Clear set-user-ID, and set-group-ID where group execution makes it one,
    as the kernel does when an unprivileged caller truncates or writes."""
    mode = os.fstat(fd).st_mode
    drop = stat.S_ISUID | (stat.S_ISGID if mode & stat.S_IXGRP else 0)
    if mode & drop:
        os.fchmod(fd, stat.S_IMODE(mode) & ~drop)


@dataclass
class Creds:
    uid: int
    gid: int
    umask: int


@dataclass
class Kept:
    """Shared by every open handle of one file: whether the engine has kept the
    bytes an overwrite would destroy.  Any record of a new version resets it."""

    preserved: bool = False


@dataclass
class NativeHandle:
    fd: int
    path: Callable[[], str | None]  # the file's present path (it may be renamed while open)
    kept: Kept = field(default_factory=Kept)
    written: bool = False  # changed (written or truncated) since the last record_write
    wrote: bool = False  # write() calls since the last record_write


@dataclass(frozen=True)
class SetAttr:
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime_ns: int | None = None
    mtime_ns: int | None = None
    # Only the change time moves (chown(f, -1, -1): the kernel forwards it as
    # a request that sets nothing), as on the backing file system.
    ctime: bool = False


class Passthrough:
    def __init__(
        self, engine: EngineAPI, src: str, *, hidden: frozenset[str], poller: Poller | None = None
    ) -> None:
        self.engine = engine
        self.poller = poller
        self.root_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.hidden = hidden  # relative paths that do not exist in the mount
        self.hidden_names = frozenset(split(h)[1] for h in hidden)
        self.limiter = trio.CapacityLimiter(8)
        # Paths an operation through the mount is changing right now: the
        # change feed leaves them to the operation's own record.
        self.busy: Counter[str] = Counter()

    @contextmanager
    def working(self, *rels: str | None) -> Iterator[None]:
        names = [r for r in rels if r is not None]
        self.busy.update(names)
        try:
            yield
        finally:
            self.busy.subtract(names)
            for r in names:
                if self.busy[r] <= 0:
                    del self.busy[r]

    def close(self) -> None:
        os.close(self.root_fd)

    async def slow(self, fn: Callable[..., T], *args: Any) -> T:
        """Run an engine call (or a blocking syscall) in a worker thread."""
        with self.poller.paused() if self.poller is not None else nullcontext():
            return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    # -- names

    def is_hidden(self, rel: str) -> bool:
        return rel in self.hidden

    def check_new_name(self, parent: str, name: str) -> None:
        """Refuse to create or rename onto a reserved or hidden name."""
        if self.is_hidden(join(parent, name)):
            raise _err(errno.EPERM)
        if not parent and name in RESERVED:
            raise _err(errno.EEXIST)

    # -- reading the tree

    def open_dir(self, rel: str) -> int:
        """A descriptor of directory ``rel`` to list it and stat its entries
        (the caller closes it)."""
        return open_beneath(self.root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)

    def entries(self, rel: str, fd: int) -> list[tuple[str, int]]:
        """``(name, inode number)`` of what directory ``rel`` (open as ``fd``)
        shows through the mount, from the directory alone (no stat)."""
        with os.scandir(fd) as it:
            out = [(e.name, e.inode()) for e in it]
        if self.hidden_names.intersection(n for n, _ in out):
            out = [(n, i) for n, i in out if not self.is_hidden(join(rel, n))]
        return out

    def lstat(self, rel: str) -> os.stat_result:
        if not rel:
            return os.stat(self.root_fd)
        if self.is_hidden(rel):
            raise _err(errno.ENOENT)
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)

    def readlink(self, rel: str) -> bytes:
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            return os.readlink(os.fsencode(name), dir_fd=pfd)

    def statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.root_fd)

    # -- attributes

    async def setattr(
        self, rel: str, fh: NativeHandle | None, change: SetAttr, kept: Kept
    ) -> os.stat_result:
        with self.working(rel):
            return await self._setattr(rel, fh, change, kept)

    async def _setattr(
        self, rel: str, fh: NativeHandle | None, change: SetAttr, kept: Kept
    ) -> os.stat_result:
        parent, name = split(rel)
        if change.size is not None:
            if fh is not None:
                if not fh.kept.preserved:
                    await self.engine_preserve(rel)
                    fh.kept.preserved = True
                os.ftruncate(fh.fd, change.size)
                fh.written = fh.wrote = True  # recorded on close (flush), release or fsync
            else:
                await self.engine_preserve(rel)
                with dir_fd(self.root_fd, parent) as pfd:
                    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
                try:
                    os.ftruncate(fd, change.size)
                finally:
                    os.close(fd)
                kept.preserved = False
                await self.engine_record_write(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            target = name if rel else "."
            if change.mode is not None:
                if fh is not None:
                    os.fchmod(fh.fd, stat.S_IMODE(change.mode))
                else:
                    self._chmod_nofollow(pfd, target, stat.S_IMODE(change.mode))
            if change.ctime:
                self._touch_ctime(pfd, target, fh)
            if change.uid is not None or change.gid is not None:
                uid = -1 if change.uid is None else change.uid
                gid = -1 if change.gid is None else change.gid
                if fh is not None:
                    os.fchown(fh.fd, uid, gid)
                else:
                    os.chown(target, uid, gid, dir_fd=pfd, follow_symlinks=False)
            if change.atime_ns is not None or change.mtime_ns is not None:
                if fh is not None:
                    utimensat(fh.fd, None, change.atime_ns, change.mtime_ns)
                else:
                    utimensat(pfd, target, change.atime_ns, change.mtime_ns)
            if fh is not None:
                return os.fstat(fh.fd)
            return os.stat(target, dir_fd=pfd, follow_symlinks=False)

    def _touch_ctime(self, pfd: int, name: str, fh: NativeHandle | None) -> None:
        """Move only the change time.  A chmod to the mode the file has: unlike
        chown(-1, -1), it never clears set-id bits (the daemon may set them)."""
        if fh is not None:
            os.fchmod(fh.fd, stat.S_IMODE(os.fstat(fh.fd).st_mode))
            return
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            # No mode of its own and no set-id bits to lose.
            os.chown(name, -1, -1, dir_fd=pfd, follow_symlinks=False)
        else:
            self._chmod_nofollow(pfd, name, stat.S_IMODE(st.st_mode))

    @staticmethod
    def _chmod_nofollow(pfd: int, name: str, mode: int) -> None:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise _err(errno.EOPNOTSUPP)  # Linux symlinks have no mode of their own
            os.chmod(f"/proc/self/fd/{fd}", mode)
        finally:
            os.close(fd)

    # -- files

    async def open(
        self, rel: str, flags: int, path: Callable[[], str | None], kept: Kept, creds: Creds
    ) -> NativeHandle:
        writes = flags & os.O_ACCMODE != os.O_RDONLY
        with self.working(rel if writes else None):
            return await self._open(rel, flags, path, kept, creds, writes)

    async def _open(
        self,
        rel: str,
        flags: int,
        path: Callable[[], str | None],
        kept: Kept,
        creds: Creds,
        writes: bool,
    ) -> NativeHandle:
        if writes:
            await self.engine_check(rel)
        if flags & os.O_TRUNC and writes:
            await self.engine_preserve(rel)
        fd = open_beneath(self.root_fd, rel, flags & ~_STRIP)
        if flags & os.O_TRUNC and writes and creds.uid != 0:
            # The kernel leaves clearing set-id bits on an O_TRUNC open to us
            # (the daemon's own truncation, as root, keeps them).
            try:
                _drop_setid(fd)
            except BaseException:
                os.close(fd)
                raise
        if not writes:
            try:
                unchanged = self.engine.is_unchanged(RelPath(rel), os.fstat(fd))
            except BaseException:
                os.close(fd)
                raise
            if not unchanged:  # changed behind the mount (or never seen): look now
                await self.engine_check(rel)
        truncated = bool(flags & os.O_TRUNC and writes)
        if writes:
            # check_file above may just have recorded a change made behind the mount.
            kept.preserved = truncated
        return NativeHandle(fd, path, kept, written=truncated)

    async def create(
        self,
        parent: str,
        name: str,
        mode: int,
        flags: int,
        creds: Creds,
        path: Callable[[], str | None],
        kept: Kept,
    ) -> tuple[NativeHandle, os.stat_result]:
        """``kept`` is the file's shared state, should it exist after all."""
        self.check_new_name(parent, name)
        rel = join(parent, name)
        perm = stat.S_IMODE(mode) & ~creds.umask
        with dir_fd(self.root_fd, parent) as pfd:
            try:
                fd = os.open(
                    name,
                    (flags & ~_STRIP) | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    perm,
                    dir_fd=pfd,
                )
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                # Someone created it behind the mount since the kernel looked.
                handle = await self.open(rel, flags & ~os.O_CREAT, path, kept, creds)
                return handle, os.fstat(handle.fd)
            try:
                self._give(fd, pfd, creds, perm)
            except BaseException:
                os.close(fd)
                raise
        # Nothing recorded to keep in a new file.
        handle = NativeHandle(fd, path, Kept(preserved=True), written=True)
        return handle, os.fstat(fd)

    @staticmethod
    def _give(fd: int, pfd: int, creds: Creds, perm: int) -> None:
        """Hand a node the daemon (root) created to the caller, as the kernel would."""
        setgid_dir = bool(os.fstat(pfd).st_mode & stat.S_ISGID)
        gid = -1 if setgid_dir else creds.gid
        os.fchown(fd, creds.uid, gid)
        if setgid_dir and stat.S_ISDIR(os.fstat(fd).st_mode):
            perm |= stat.S_ISGID
        # chown may clear set-id bits and the daemon's umask must not matter.
        os.fchmod(fd, perm)

    @staticmethod
    def read(fh: NativeHandle, off: int, size: int) -> bytes:
        return os.pread(fh.fd, size, off)

    async def write(self, fh: NativeHandle, off: int, buf: bytes) -> int:
        if not fh.kept.preserved:
            rel = fh.path()
            if rel is not None:
                await self.engine_preserve(rel)
            fh.kept.preserved = True
        n = os.pwrite(fh.fd, buf, off)
        fh.written = fh.wrote = True
        return n

    async def flush(self, fh: NativeHandle) -> None:
        """close(2) of one of the caller's fds.  Unlike release, the kernel waits
        for it, so recording here orders the write before whatever the caller
        does next (an editor's rename of its temp file over the original)."""
        os.close(os.dup(fh.fd))  # close() semantics of the backing fs (NFS write errors)
        if fh.wrote:
            # Not after a mere O_TRUNC: a shell's `> f` closes its first fd before
            # writing, and the empty file in between is no version.
            await self.record(fh)

    async def fsync(self, fh: NativeHandle, datasync: bool) -> None:
        await self.slow(os.fdatasync if datasync else os.fsync, fh.fd)
        await self.record(fh)

    async def release(self, fh: NativeHandle) -> None:
        os.close(fh.fd)
        await self.record(fh)

    async def record(self, fh: NativeHandle) -> None:
        """Tell the engine about what ``fh`` changed since the last record."""
        if not fh.written:
            return
        fh.kept.preserved = False  # the bytes are a recorded version now: keep them first
        rel = fh.path()
        if rel is not None:
            try:
                with self.working(rel):
                    await self.engine_record_write(rel)
            except Exception:
                # The bytes are on disk whatever happens here: failing close()
                # would only scare the writer.  The next flush, release or
                # check_file records them.
                log.exception("record_write(%r) failed", rel)
                return
        fh.written = fh.wrote = False

    # -- directory entries

    async def mkdir(self, parent: str, name: str, mode: int, creds: Creds) -> os.stat_result:
        self.check_new_name(parent, name)
        perm = stat.S_IMODE(mode) & ~creds.umask
        with dir_fd(self.root_fd, parent) as pfd:
            os.mkdir(name, perm, dir_fd=pfd)
            fd = os.open(
                name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd
            )
            try:
                self._give(fd, pfd, creds, perm)
                return os.fstat(fd)
            finally:
                os.close(fd)

    async def mknod(
        self, parent: str, name: str, mode: int, rdev: int, creds: Creds
    ) -> os.stat_result:
        self.check_new_name(parent, name)
        perm = stat.S_IMODE(mode) & ~creds.umask
        with dir_fd(self.root_fd, parent) as pfd:
            os.mknod(name, stat.S_IFMT(mode) | perm, rdev, dir_fd=pfd)
            os.chown(name, creds.uid, self._gid(pfd, creds), dir_fd=pfd, follow_symlinks=False)
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)

    async def symlink(self, parent: str, name: str, target: bytes, creds: Creds) -> os.stat_result:
        self.check_new_name(parent, name)
        with dir_fd(self.root_fd, parent) as pfd:
            os.symlink(target, os.fsencode(name), dir_fd=pfd)
            os.chown(name, creds.uid, self._gid(pfd, creds), dir_fd=pfd, follow_symlinks=False)
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)

    @staticmethod
    def _gid(pfd: int, creds: Creds) -> int:
        return -1 if os.fstat(pfd).st_mode & stat.S_ISGID else creds.gid

    async def link(self, rel: str, parent: str, name: str) -> os.stat_result:
        self.check_new_name(parent, name)
        old_parent, old_name = split(rel)
        with dir_fd(self.root_fd, old_parent) as ofd, dir_fd(self.root_fd, parent) as nfd:
            os.link(old_name, name, src_dir_fd=ofd, dst_dir_fd=nfd, follow_symlinks=False)
            return os.stat(name, dir_fd=nfd, follow_symlinks=False)

    async def unlink(self, parent: str, name: str) -> bool:
        """True when that was the file's last name (its inode is free now,
        unless a descriptor or the blob store still holds it)."""
        rel = join(parent, name)
        if self.is_hidden(rel):
            raise _err(errno.ENOENT)

        def unlink() -> bool:  # one trip to a worker thread, not two
            self.engine.preserve_inode(RelPath(rel))
            with dir_fd(self.root_fd, parent) as pfd:
                last = os.stat(name, dir_fd=pfd, follow_symlinks=False).st_nlink <= 1
                os.unlink(name, dir_fd=pfd)
            self.engine.record_unlink(RelPath(rel))
            return last

        with self.working(rel):
            return await self.slow(unlink)

    async def rmdir(self, parent: str, name: str) -> None:
        if self.is_hidden(join(parent, name)):
            raise _err(errno.ENOENT)
        with dir_fd(self.root_fd, parent) as pfd:
            os.rmdir(name, dir_fd=pfd)

    async def rename(
        self,
        old_parent: str,
        old_name: str,
        new_parent: str,
        new_name: str,
        flags: int,
        moved: Callable[[], None] = lambda: None,
    ) -> None:
        """``moved()`` runs as soon as the names have changed, before the
        engine hears of it: what the engine's record makes the daemon
        invalidate must find the names as they are now."""
        old, new = join(old_parent, old_name), join(new_parent, new_name)
        if self.is_hidden(old):
            raise _err(errno.ENOENT)
        self.check_new_name(new_parent, new_name)
        with self.working(old, new):
            await self._rename(old_parent, old_name, new_parent, new_name, flags, moved)

    async def _rename(
        self,
        old_parent: str,
        old_name: str,
        new_parent: str,
        new_name: str,
        flags: int,
        moved: Callable[[], None],
    ) -> None:
        old, new = join(old_parent, old_name), join(new_parent, new_name)
        with dir_fd(self.root_fd, old_parent) as ofd, dir_fd(self.root_fd, new_parent) as nfd:
            if flags & RENAME_EXCHANGE:
                renameat2(ofd, old_name, nfd, new_name, flags)
                moved()
                # Both names still exist, each with the other's bytes.
                await self.engine_check(old)
                await self.engine_check(new)
                return
            if not flags & RENAME_NOREPLACE:
                try:
                    target = os.stat(new_name, dir_fd=nfd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    if not stat.S_ISDIR(target.st_mode):
                        await self.slow(self.engine.preserve_inode, RelPath(new))
            renameat2(ofd, old_name, nfd, new_name, flags)
            moved()
        await self.slow(self.engine.record_rename, RelPath(old), RelPath(new))

    # -- extended attributes of native files

    def _xattr(self, fn: Callable[..., T], rel: str, *args: Any) -> T:
        if not rel:
            return fn(self.root_fd, *args)
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            # lgetxattr and friends through the directory fd: no symlink is followed.
            path = b"/proc/self/fd/%d/" % pfd + os.fsencode(name)
            return fn(path, *args, follow_symlinks=False)

    def getxattr(self, rel: str, name: str) -> bytes:
        return self._xattr(os.getxattr, rel, name)

    def listxattr(self, rel: str) -> list[str]:
        return self._xattr(os.listxattr, rel)

    def setxattr(self, rel: str, name: str, value: bytes) -> None:
        self._xattr(os.setxattr, rel, name, value)

    def removexattr(self, rel: str, name: str) -> None:
        self._xattr(os.removexattr, rel, name)

    # -- engine hooks

    async def engine_check(self, rel: str) -> None:
        """Let the engine notice changes made behind the mount.  Advisory: a
        failure here must not keep anyone from their native file."""
        try:
            await self.slow(self.engine.check_file, RelPath(rel))
        except Exception:
            log.exception("check_file(%r) failed", rel)

    async def engine_preserve(self, rel: str) -> None:
        await self.slow(self.engine.preserve, RelPath(rel))

    async def engine_record_write(self, rel: str) -> None:
        await self.slow(self.engine.record_write, RelPath(rel))
