"""A plain pyfuse3 passthrough, the stand-in and reference for ``--mounter ref``.

It maps each kernel inode to the native inode number and answers every request
with the matching ``os`` call on the underlying path or file descriptor.  It is
what "a tuned pyfuse3 passthrough" means in bench/README.md: no caching tricks
beyond the kernel's entry and attribute caches, one file descriptor per open.

Run in the foreground: ``python -m bench.refpassthrough SRC MNT``; it unmounts
on SIGINT/SIGTERM or when ``fusermount3 -u MNT`` is run.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import stat
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyfuse3
import trio
from pyfuse3 import FUSEError

log = logging.getLogger(__name__)

Inode = int


def _fuse_error(exc: OSError) -> FUSEError:
    return FUSEError(exc.errno or errno.EIO)


class Passthrough(pyfuse3.Operations):
    """Inodes are the native ``st_ino`` (the root directory maps to ROOT_INODE)."""

    enable_writeback_cache = False

    def __init__(self, source: str) -> None:
        super().__init__()
        self._root_ino = os.lstat(source).st_ino
        self._paths: dict[Inode, set[str]] = {pyfuse3.ROOT_INODE: {source}}
        self._lookups: defaultdict[Inode, int] = defaultdict(int)
        self._lookups[pyfuse3.ROOT_INODE] = 1

    # -- inode bookkeeping

    def _ino(self, native: int) -> Inode:
        return pyfuse3.ROOT_INODE if native == self._root_ino else native

    def _path(self, inode: Inode) -> str:
        paths = self._paths.get(inode)
        if not paths:
            raise FUSEError(errno.ENOENT)
        return next(iter(paths))

    def _child(self, parent: Inode, name: bytes) -> str:
        return os.path.join(self._path(parent), os.fsdecode(name))

    def _remember(self, inode: Inode, path: str) -> None:
        self._lookups[inode] += 1
        self._paths.setdefault(inode, set()).add(path)

    def _forget_path(self, inode: Inode, path: str) -> None:
        paths = self._paths.get(inode)
        if paths and len(paths) > 1:
            paths.discard(path)

    def _attr(self, st: os.stat_result) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = self._ino(st.st_ino)
        attr.generation = 0
        attr.entry_timeout = 300
        attr.attr_timeout = 300
        attr.st_mode = st.st_mode
        attr.st_nlink = st.st_nlink
        attr.st_uid = st.st_uid
        attr.st_gid = st.st_gid
        attr.st_rdev = st.st_rdev
        attr.st_size = st.st_size
        attr.st_blksize = st.st_blksize
        attr.st_blocks = st.st_blocks
        attr.st_atime_ns = st.st_atime_ns
        attr.st_mtime_ns = st.st_mtime_ns
        attr.st_ctime_ns = st.st_ctime_ns
        return attr

    def _lstat(self, path: str) -> os.stat_result:
        try:
            return os.lstat(path)
        except OSError as exc:
            raise _fuse_error(exc) from None

    # -- lookups and attributes

    async def lookup(
        self, parent_inode: Inode, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        if name == b".":
            path = self._path(parent_inode)
        elif name == b"..":
            path = os.path.dirname(self._path(parent_inode))
        else:
            path = self._child(parent_inode, name)
        attr = self._attr(self._lstat(path))
        if name not in (b".", b".."):
            self._remember(attr.st_ino, path)
        return attr

    async def forget(self, inode_list: Sequence[tuple[Inode, int]]) -> None:
        for inode, nlookup in inode_list:
            left = self._lookups[inode] - nlookup
            if left > 0:
                self._lookups[inode] = left
            else:
                self._lookups.pop(inode, None)
                if inode != pyfuse3.ROOT_INODE:
                    self._paths.pop(inode, None)

    async def getattr(self, inode: Inode, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._attr(self._lstat(self._path(inode)))

    async def setattr(
        self,
        inode: Inode,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        path = self._path(inode)
        target: int | str = path if fh is None else fh
        try:
            if fields.update_size:
                os.truncate(target, attr.st_size)
            if fields.update_mode:
                os.chmod(target, stat.S_IMODE(attr.st_mode))
            if fields.update_uid or fields.update_gid:
                uid = attr.st_uid if fields.update_uid else -1
                gid = attr.st_gid if fields.update_gid else -1
                os.chown(target, uid, gid)
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path) if fh is None else os.fstat(fh)
                atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                os.utime(target, ns=(atime, mtime))
            st = os.lstat(path) if fh is None else os.fstat(fh)
        except OSError as exc:
            raise _fuse_error(exc) from None
        return self._attr(st)

    async def readlink(self, inode: Inode, ctx: pyfuse3.RequestContext) -> bytes:
        try:
            return os.fsencode(os.readlink(self._path(inode)))
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        sv = os.statvfs(self._path(pyfuse3.ROOT_INODE))
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
        ):
            setattr(out, name, getattr(sv, name))
        out.f_namemax = sv.f_namemax
        return out

    # -- directories

    async def opendir(self, inode: Inode, ctx: pyfuse3.RequestContext) -> int:
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        path = self._path(fh)
        try:
            with os.scandir(path) as it:
                entries = sorted(
                    ((e.inode(), e.name, e.stat(follow_symlinks=False)) for e in it),
                    key=lambda t: t[0],
                )
        except OSError as exc:
            raise _fuse_error(exc) from None
        # The native inode numbers are the stable readdir offsets (two hard links
        # to one inode in one directory may lose one name across a buffer refill:
        # acceptable for benchmark trees, which have none).
        for ino, name, st in entries:
            if ino <= start_id:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attr(st), ino):
                break
            self._remember(self._ino(ino), os.path.join(path, name))

    async def mkdir(
        self, parent_inode: Inode, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        try:
            os.mkdir(path, mode & ~ctx.umask)
            os.chown(path, ctx.uid, ctx.gid)
        except OSError as exc:
            raise _fuse_error(exc) from None
        attr = self._attr(self._lstat(path))
        self._remember(attr.st_ino, path)
        return attr

    async def rmdir(self, parent_inode: Inode, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        path = self._child(parent_inode, name)
        st = self._lstat(path)
        try:
            os.rmdir(path)
        except OSError as exc:
            raise _fuse_error(exc) from None
        self._forget_path(self._ino(st.st_ino), path)

    async def unlink(self, parent_inode: Inode, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        path = self._child(parent_inode, name)
        st = self._lstat(path)
        try:
            os.unlink(path)
        except OSError as exc:
            raise _fuse_error(exc) from None
        self._forget_path(self._ino(st.st_ino), path)

    async def symlink(
        self, parent_inode: Inode, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(parent_inode, name)
        try:
            os.symlink(target, path)
            os.chown(path, ctx.uid, ctx.gid, follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None
        attr = self._attr(self._lstat(path))
        self._remember(attr.st_ino, path)
        return attr

    async def link(
        self, inode: Inode, new_parent_inode: Inode, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        path = self._child(new_parent_inode, new_name)
        try:
            os.link(self._path(inode), path, follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None
        attr = self._attr(self._lstat(path))
        self._remember(attr.st_ino, path)
        return attr

    async def rename(
        self,
        parent_inode_old: Inode,
        name_old: bytes,
        parent_inode_new: Inode,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        if flags:
            raise FUSEError(errno.EINVAL)
        old = self._child(parent_inode_old, name_old)
        new = self._child(parent_inode_new, name_new)
        st = self._lstat(old)
        try:
            os.rename(old, new)
        except OSError as exc:
            raise _fuse_error(exc) from None
        inode = self._ino(st.st_ino)
        paths = self._paths.setdefault(inode, set())
        paths.discard(old)
        paths.add(new)

    # -- files

    async def open(self, inode: Inode, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        try:
            fd = os.open(self._path(inode), flags & ~os.O_CREAT)
        except OSError as exc:
            raise _fuse_error(exc) from None
        return pyfuse3.FileInfo(fh=fd)

    async def create(
        self, parent_inode: Inode, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        path = self._child(parent_inode, name)
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_TRUNC, mode & ~ctx.umask)
            os.fchown(fd, ctx.uid, ctx.gid)
            attr = self._attr(os.fstat(fd))
        except OSError as exc:
            raise _fuse_error(exc) from None
        self._remember(attr.st_ino, path)
        return pyfuse3.FileInfo(fh=fd), attr

    async def read(self, fh: int, off: int, size: int) -> bytes:
        try:
            return os.pread(fh, size, off)
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        try:
            return os.pwrite(fh, buf, off)
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def flush(self, fh: int) -> None:
        return None

    async def release(self, fh: int) -> None:
        try:
            os.close(fh)
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def fsync(self, fh: int, datasync: bool) -> None:
        try:
            (os.fdatasync if datasync else os.fsync)(fh)
        except OSError as exc:
            raise _fuse_error(exc) from None

    # -- extended attributes

    async def getxattr(self, inode: Inode, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        try:
            return os.getxattr(self._path(inode), name, follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def listxattr(self, inode: Inode, ctx: pyfuse3.RequestContext) -> list[bytes]:
        try:
            names = os.listxattr(self._path(inode), follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None
        return [os.fsencode(n) for n in names]

    async def setxattr(
        self, inode: Inode, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        try:
            os.setxattr(self._path(inode), name, value, follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None

    async def removexattr(self, inode: Inode, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        try:
            os.removexattr(self._path(inode), name, follow_symlinks=False)
        except OSError as exc:
            raise _fuse_error(exc) from None


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.refpassthrough", description=__doc__)
    parser.add_argument("source")
    parser.add_argument("mountpoint")
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="refpassthrough: %(levelname)s %(message)s",
    )
    ops = Passthrough(os.path.abspath(args.source))
    options = set(pyfuse3.default_options)
    options.add("fsname=refpassthrough")
    pyfuse3.init(ops, args.mountpoint, options)

    def _stop(signum: int, frame: Any) -> None:
        pyfuse3.terminate()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    clean = False
    try:
        trio.run(pyfuse3.main)
        clean = True
    finally:
        # After a crash, leave the mount to the caller's cleanup (fusermount3 -u):
        # unmounting here could make a half-dead mount look empty.
        pyfuse3.close(unmount=clean)
    return 0


if __name__ == "__main__":
    sys.exit(main())
