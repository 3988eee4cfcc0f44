"""The native tree: byte-for-byte passthrough to SRC.  Every change to a
native file goes through the engine's write protocol (``engine.writes``, see
``swfs.history.writesession``), which decides what to preserve and when to record;
this module only does the system calls and moves the protocol's slow steps
to worker threads.

Paths are relative to SRC ('' is SRC itself).  Every call goes through a
directory fd opened beneath SRC without following symlinks, and uses the
``*at`` calls, so paths near PATH_MAX work and nothing escapes SRC.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from mountd import hop
from mountd.fsutil import (
    OPEN_FLAGS,
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    dir_fd,
    link_fd,
    open_beneath,
    renameat2,
    utimensat,
)
from mountd.poll import Poller
from mountd.reply import Reply, awaited
from swfs.api import RESERVED_ROOTS, EngineAPI, RecordedHash, RelPath, WriteSession
from swfs.store.fsutil import FALLOC_FL_ZERO_RANGE, without_atime

log = logging.getLogger(__name__)

T = TypeVar("T")


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
class NativeHandle:
    fd: int
    session: WriteSession | None = None  # opened for writing: the engine's write session
    # The stat the provider compares with what the kernel was told: what
    # the tree says the file is when ``fd`` holds its bytes elsewhere (a
    # world's blob), else ``fd``'s own fstat as the open took it.  None:
    # take ``fd``'s fstat then.
    stat: os.stat_result | None = None
    # A read-only open of a file whose stat matched its record: the hash
    # recorded with it (the access journal's hash of the read).
    hash: str | None = None

    @property
    def dirty(self) -> bool:
        """The session's ``dirty``: changed since the last record."""
        return self.session is not None and self.session.dirty

    @property
    def queued(self) -> RecordedHash | None:
        """The last record the session's close queued (its hash, once made)."""
        return None if self.session is None else self.session.queued

    @property
    def record_on_flush(self) -> bool:
        """The session's ``record_on_flush``: a close records a version."""
        return self.session is not None and self.session.record_on_flush

    def path(self) -> str | None:
        """The file's present name (None once unlinked, or if never written)."""
        return None if self.session is None else self.session.rel


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
        self.writes = engine.workspace.writes
        self.reserved = RESERVED_ROOTS  # the generated trees' names (the router's, once routed)
        self.limiter = trio.CapacityLimiter(8)

    def close(self) -> None:
        os.close(self.root_fd)

    async def slow(self, fn: Callable[..., T], *args: Any) -> T:
        """Run an engine call (or a blocking syscall) in a worker thread."""
        with self.poller.paused() if self.poller is not None else nullcontext():
            return await hop.run_sync(fn, *args, limiter=self.limiter)

    # -- names

    def is_hidden(self, rel: str) -> bool:
        return rel in self.hidden

    def check_new_name(self, parent: str, name: str) -> None:
        """Refuse to create or rename onto a reserved or hidden name."""
        if self.is_hidden(join(parent, name)):
            raise _err(errno.EPERM)
        if not parent and name in self.reserved:
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

    def lstat_entry(self, rel_dir: str, fd: int, name: str) -> os.stat_result:
        """Entry ``name`` of directory ``rel_dir`` (open as ``fd``, from
        ``open_dir``), as the mount shows it."""
        return os.stat(name, dir_fd=fd, follow_symlinks=False)

    def lstat(self, rel: str) -> os.stat_result:
        if not rel:
            return os.stat(self.root_fd)
        if self.is_hidden(rel):
            raise _err(errno.ENOENT)
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            return os.stat(name, dir_fd=pfd, follow_symlinks=False)

    def open_read(self, rel: str) -> int:
        """A read-only descriptor of file ``rel`` as the mount shows it
        (``.versions`` serves a present version's bytes from it).  The
        native file's access time stays as it was: a read of a version is not
        a read of the file (O_NOATIME is the owner's or root's right)."""
        return without_atime(lambda f: open_beneath(self.root_fd, rel, f), os.O_RDONLY)

    def readlink(self, rel: str) -> bytes:
        parent, name = split(rel)
        with dir_fd(self.root_fd, parent) as pfd:
            return os.readlink(os.fsencode(name), dir_fd=pfd)

    def statvfs(self) -> os.statvfs_result:
        return os.statvfs(self.root_fd)

    # -- attributes

    async def setattr(self, rel: str, fh: NativeHandle | None, change: SetAttr) -> os.stat_result:
        # The change feed leaves the path to this request (a chmod's event).
        with self.writes.changing(rel):
            return await self._setattr(rel, fh, change)

    async def _setattr(self, rel: str, fh: NativeHandle | None, change: SetAttr) -> os.stat_result:
        parent, name = split(rel)
        if change.size is not None:
            size = change.size
            if fh is not None and fh.session is not None:
                session = fh.session
                if session.needs_preserve:
                    await self.slow(session.truncate, size)  # keeps the bytes first
                else:
                    session.truncate(size)
            elif fh is not None:
                os.ftruncate(fh.fd, size)  # a read-only handle: EBADF or EINVAL
            else:

                def truncate() -> None:
                    with dir_fd(self.root_fd, parent) as pfd:
                        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
                    try:
                        os.ftruncate(fd, size)
                    finally:
                        os.close(fd)

                await self.slow(self.writes.truncate(rel, size).run, truncate)
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

    async def setattr_open(self, fh: NativeHandle, change: SetAttr) -> os.stat_result:
        """``setattr`` of a file no name leads to any more (unlinked, or
        replaced by a rename, while open), through a descriptor the mount
        has open on it, as ext4 allows.  Its write session has no name
        either: nothing is recorded (a version needs a name)."""
        fd = self.own_fd(fh)
        if change.size is not None:
            if fh.session is not None:
                fh.session.truncate(change.size)
            else:
                os.ftruncate(fd, change.size)  # a read-only descriptor: EINVAL
        if change.mode is not None:
            os.fchmod(fd, stat.S_IMODE(change.mode))
        if change.ctime:
            os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode))
        if change.uid is not None or change.gid is not None:
            uid = -1 if change.uid is None else change.uid
            gid = -1 if change.gid is None else change.gid
            os.fchown(fd, uid, gid)
        if change.atime_ns is not None or change.mtime_ns is not None:
            utimensat(fd, None, change.atime_ns, change.mtime_ns)
        return os.fstat(fd)

    def own_fd(self, fh: NativeHandle) -> int:
        """The descriptor through which a file no name leads to any more is
        changed (``setattr_open``, its extended attributes)."""
        return fh.fd

    def hold(self, rel: str) -> tuple[int, os.stat_result, str | None]:
        """An O_PATH descriptor of ``rel`` (not followed if a symlink), its
        stat as the mount shows it, and its recorded hash if the record is
        current: taken before a rename replaces it (``mountd.nodes.Held``)."""
        fd = open_beneath(self.root_fd, rel, os.O_PATH)
        try:
            st = os.fstat(fd)
            regular = stat.S_ISREG(st.st_mode)
            known = self.engine.workspace.unchanged_hash(RelPath(rel), st) if regular else None
        except BaseException:
            os.close(fd)
            raise
        return fd, st, known

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

    def open(self, rel: str, flags: int, creds: Creds) -> Reply[NativeHandle]:
        """At once for a read-only open of a file whose stat matches its
        record; any other awaited (mountd.reply): a writer's session begins
        in a worker thread, a file changed behind the mount is looked at
        first.  Nothing is left open while it waits."""
        if flags & os.O_ACCMODE != os.O_RDONLY:
            return self._open_writer(rel, flags, creds)
        if flags & os.O_TRUNC:  # which Linux honours: no open as recorded
            return self._open_checked(rel, flags)
        fd, st, known = self._open_reader(rel, flags)
        if known is None:
            os.close(fd)
            return self._open_checked(rel, flags)
        return NativeHandle(fd, stat=st, hash=known)

    def _open_reader(self, rel: str, flags: int) -> tuple[int, os.stat_result, str | None]:
        """A read-only descriptor of ``rel``, its stat, and its recorded hash
        if the stat matches the record (cheap)."""
        fd = open_beneath(self.root_fd, rel, flags & ~_STRIP)
        try:
            st = os.fstat(fd)
            return fd, st, self.engine.workspace.unchanged_hash(RelPath(rel), st)
        except BaseException:
            os.close(fd)
            raise

    async def _open_checked(self, rel: str, flags: int) -> NativeHandle:
        """A read-only open of a file changed behind the mount (or never
        seen): the engine looks at it first."""
        fd, st, known = self._open_reader(rel, flags)
        if known is None:
            await self.engine_check(rel)
            return NativeHandle(fd)  # the check may have seen it change since
        return NativeHandle(fd, stat=st, hash=known)

    async def _open_writer(self, rel: str, flags: int, creds: Creds) -> NativeHandle:
        truncate = bool(flags & os.O_TRUNC)

        def opener() -> int:
            fd = open_beneath(self.root_fd, rel, flags & ~_STRIP)
            if truncate and creds.uid != 0:
                # The kernel leaves clearing set-id bits on an O_TRUNC open
                # to us (the daemon's own truncation, as root, keeps them).
                try:
                    _drop_setid(fd)
                except BaseException:
                    os.close(fd)
                    raise
            return fd

        session = await self.slow(
            functools.partial(self.writes.begin_write, rel, opener, truncate=truncate)
        )
        return NativeHandle(session.fd, session)

    def create(
        self,
        parent: str,
        name: str,
        mode: int,
        flags: int,
        creds: Creds,
    ) -> Reply[tuple[NativeHandle, os.stat_result]]:
        """A new file, at once; awaited (mountd.reply) where the name exists
        already and ``flags`` open it (someone created it behind the mount
        since the kernel looked: the open may wait)."""
        self.check_new_name(parent, name)
        perm = stat.S_IMODE(mode) & ~creds.umask
        with dir_fd(self.root_fd, parent) as pfd:
            try:
                fd = os.open(
                    name,
                    (flags & OPEN_FLAGS & ~_STRIP)
                    | os.O_CREAT
                    | os.O_EXCL
                    | os.O_NOFOLLOW
                    | os.O_CLOEXEC,
                    perm,
                    dir_fd=pfd,
                )
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                return self._open_existing(join(parent, name), flags, creds)
            try:
                self._give(fd, pfd, creds, perm)
                session = self.writes.adopt_new(join(parent, name), fd)
            except BaseException:
                os.close(fd)
                raise
        return NativeHandle(fd, session), os.fstat(fd)

    async def _open_existing(
        self, rel: str, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        handle = await awaited(self.open(rel, flags & ~os.O_CREAT, creds))
        return handle, os.fstat(handle.fd)

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

    def write(self, fh: NativeHandle, off: int, buf: bytes) -> Reply[int]:
        """At once; awaited (mountd.reply) where the recorded bytes must be
        kept first (a worker thread)."""
        session = fh.session
        if session is None:
            return os.pwrite(fh.fd, buf, off)  # a read-only descriptor: EBADF
        if session.needs_preserve:
            return self._write_kept(session, off, buf)
        return session.write(off, buf)

    async def _write_kept(self, session: WriteSession, off: int, buf: bytes) -> int:
        """A write once the recorded bytes are kept (ENOSPC / EIO: nothing
        is written)."""
        await self.slow(session.preserve)
        return session.write(off, buf)

    async def fallocate(self, fh: NativeHandle, mode: int, off: int, length: int) -> None:
        """fallocate(2) through an open file.  One that changes what the file
        reads as (a hole punched, a range zeroed, the size grown) goes through
        the write session as a write does: the recorded bytes are kept first
        (ENOSPC / EIO: nothing is changed), a version is recorded at close."""
        session = fh.session
        if session is None:
            raise _err(errno.EBADF)  # not open for writing (the kernel checks first)
        if session.needs_preserve and session.fallocate_changes(mode, off, length):
            await self.slow(session.preserve)
        if mode & FALLOC_FL_ZERO_RANGE:
            # Zeroing a range may write it (a file system without unwritten
            # extents): not on the loop.
            await self.slow(session.fallocate, mode, off, length)
        else:
            # Changes of extents only, like a write's system call on the loop
            # (a thread hop costs a hundred times the call).
            session.fallocate(mode, off, length)

    @staticmethod
    def lseek(fh: NativeHandle, off: int, whence: int) -> int:
        """SEEK_DATA / SEEK_HOLE, as the backing file answers them (the
        descriptor's own position is never used: reads and writes take
        theirs from the kernel)."""
        return os.lseek(fh.fd, off, whence)

    async def tmpfile(
        self, parent: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        """open(parent, O_TMPFILE): a file without a name in ``parent``'s
        file system; nothing is recorded of it unless it is linked in
        (``link_unnamed``).  EOPNOTSUPP where the backing file system has
        no O_TMPFILE."""
        perm = stat.S_IMODE(mode) & ~creds.umask
        keep = os.O_ACCMODE | os.O_APPEND | os.O_NONBLOCK | os.O_DSYNC | os.O_SYNC | os.O_NOATIME
        with dir_fd(self.root_fd, parent) as pfd:
            fd = os.open(".", (flags & keep) | os.O_TMPFILE | os.O_CLOEXEC, perm, dir_fd=pfd)
            try:
                self._give(fd, pfd, creds, perm)
                session = self.writes.adopt_unnamed(fd)
            except BaseException:
                os.close(fd)
                raise
        return NativeHandle(fd, session), os.fstat(fd)

    async def link_unnamed(self, fh: NativeHandle, parent: str, name: str) -> os.stat_result:
        """linkat of a file without a name (an O_TMPFILE file) as ``name`` in
        ``parent``: from then on it is an ordinary new file, recorded at
        its writer's next close."""
        self.check_new_name(parent, name)
        rel = join(parent, name)
        with self.writes.changing(rel), dir_fd(self.root_fd, parent) as nfd:
            link_fd(fh.fd, nfd, name)
            if fh.session is not None:
                self.writes.named(fh.session, rel)
            return os.stat(name, dir_fd=nfd, follow_symlinks=False)

    def flush(self, fh: NativeHandle) -> Reply[None]:
        """close(2) of one of the caller's fds: at once, a write's record
        queued (``WriteSession.flush_later``); awaited, recorded in a worker
        thread, only where it cannot be queued now."""
        session = fh.session
        if session is not None:
            return None if session.flush_later() else self.slow(session.flush)
        os.close(os.dup(fh.fd))  # close() semantics of the backing fs (NFS write errors)
        return None

    async def fsync(self, fh: NativeHandle, datasync: bool) -> None:
        if fh.session is not None:
            await self.slow(fh.session.sync, datasync)
        else:
            await self.slow(os.fdatasync if datasync else os.fsync, fh.fd)

    def release(self, fh: NativeHandle) -> Reply[None]:
        """At once, a write's record queued (``WriteSession.release_later``);
        awaited, recorded in a worker thread, only where it cannot be."""
        if fh.session is None:
            self.release_reader(fh)
        elif not fh.session.release_later():
            return self.slow(fh.session.release)
        return None

    @staticmethod
    def release_reader(fh: NativeHandle) -> None:
        """``release`` of a handle without a write session: no waiting."""
        os.close(fh.fd)

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
            # The mode asked for, whatever the daemon's umask (077) and a
            # chown's clearing of set-id bits; never through a symlink
            # that took the name since (chmod follows one).
            fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
            try:
                if stat.S_IFMT(os.fstat(fd).st_mode) == (stat.S_IFMT(mode) or stat.S_IFREG):
                    os.chmod(f"/proc/self/fd/{fd}", perm)
            finally:
                os.close(fd)
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

        def unlink() -> bool:
            with dir_fd(self.root_fd, parent) as pfd:
                last = os.stat(name, dir_fd=pfd, follow_symlinks=False).st_nlink <= 1
                os.unlink(name, dir_fd=pfd)
            return last

        with dir_fd(self.root_fd, parent) as pfd:
            st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
            change = self.writes.unlink(rel, (pfd, name, st))
            if not change.needs_prepare():
                # Nothing to keep first (held, or not a file): unlink, answer,
                # record later (swfs.history.recorder).
                try:
                    os.unlink(name, dir_fd=pfd)
                except BaseException:
                    change.abort()
                    raise
                change.commit_later()
                return st.st_nlink <= 1
        # Preserve, unlink, record: one trip to a worker thread, not three.
        return await self.slow(change.run, unlink)

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
        exchange = bool(flags & RENAME_EXCHANGE)
        with dir_fd(self.root_fd, old_parent) as ofd, dir_fd(self.root_fd, new_parent) as nfd:
            replaces_file = False
            held: tuple[int, str, os.stat_result] | None = None
            if not flags & (RENAME_NOREPLACE | RENAME_EXCHANGE):
                try:
                    target = os.stat(new_name, dir_fd=nfd, follow_symlinks=False)
                except FileNotFoundError:
                    pass
                else:
                    replaces_file = not stat.S_ISDIR(target.st_mode)
                    held = (nfd, new_name, target)
            change = self.writes.rename(
                old, new, replaces_file=replaces_file, exchange=exchange, target=held
            )
            try:
                if change.needs_prepare():
                    await self.slow(change.prepare)
                renameat2(ofd, old_name, nfd, new_name, flags)
            except BaseException:
                change.abort()
                raise
            moved()
        # Recorded later, in order (swfs.history.recorder): not on the reply path.
        change.commit_later()

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
            # Unless the mount is writing it now: that writer records it, and
            # a check in the middle could record a half-written state.
            await self.slow(self.writes.check_behind, rel, self.engine.workspace.check_file)
        except Exception:
            log.exception("check_file(%r) failed", rel)
