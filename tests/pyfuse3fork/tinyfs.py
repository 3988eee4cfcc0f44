"""A tiny file system on the pyfuse3 fork (vendor/pyfuse3), for its tests.

``python -m tests.pyfuse3fork.tinyfs MNT LOG BACKING`` serves, in the
foreground, a root holding:

* ``d/``: a folder of two names, opened with ``FileInfo(cache_readdir=True,
  keep_cache=True)``;
* ``plain``: a file opened with a bare ``FileInfo(fh)``;
* ``noflush``: a file whose read-only opens set ``noflush``;
* ``pt``: a file whose opens put BACKING in the reply (``backing_id``,
  kernel passthrough) where the build and the kernel have it; its READs
  answer ``b"D"``s, BACKING holds other bytes.

Each request it answers appends one JSON line ``[name, ...]`` to LOG, so a
test sees which requests reached the daemon.  FALLOCATE and LSEEK of any
file, and TMPFILE in the root, are answered and logged with their
arguments.  LSEEK answers ``offset + 7`` (an offset no file system would
find), so a test can tell our answer from the kernel's own.

GETXATTR is a plain method (the fork calls it in its callback): it answers
``user.now`` at once, hands back a coroutine for ``user.later`` (answered
after a checkpoint in the worker task), and raises ENODATA at once for any
other name.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pyfuse3
import trio

ROOT = pyfuse3.ROOT_INODE
DIR, PLAIN, NOFLUSH, PT, TMP = range(ROOT + 1, ROOT + 6)
NAMES = {b"d": DIR, b"plain": PLAIN, b"noflush": NOFLUSH, b"pt": PT}
IN_DIR = {b"a": ROOT + 10, b"b": ROOT + 11}
CONTENT = b"hello\n"


class TinyFS(pyfuse3.Operations):
    enable_passthrough = True

    def __init__(self, log: Path, backing: Path) -> None:
        super().__init__()
        self.log = log.open("a", buffering=1)
        self.backing = backing
        self.sizes = {PLAIN: len(CONTENT), NOFLUSH: len(CONTENT), PT: backing.stat().st_size}
        self.backing_ids: dict[int, int] = {}

    def note(self, *what: Any) -> None:
        self.log.write(json.dumps(list(what)) + "\n")

    def _attr(self, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.generation = 0
        a.entry_timeout = 300
        a.attr_timeout = 300
        if inode in (ROOT, DIR):
            a.st_mode = stat.S_IFDIR | 0o755
            a.st_nlink = 2
        else:
            a.st_mode = stat.S_IFREG | 0o644
            a.st_nlink = 1
            a.st_size = self.sizes.get(inode, 0)
        a.st_uid = os.getuid()
        a.st_gid = os.getgid()
        a.st_blksize = 4096
        a.st_blocks = 1
        return a

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._attr(inode)

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        table = NAMES if parent_inode == ROOT else IN_DIR if parent_inode == DIR else {}
        if name not in table:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attr(table[name])

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self.note("opendir", inode)
        return pyfuse3.FileInfo(fh=inode, keep_cache=True, cache_readdir=inode == DIR)

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        self.note("readdir", fh, start_id)
        table = NAMES if fh == ROOT else IN_DIR
        for i, (name, inode) in enumerate(sorted(table.items())):
            if i < start_id:
                continue
            if not pyfuse3.readdir_reply(token, name, self._attr(inode), i + 1):
                return

    async def releasedir(self, fh: int) -> None:
        pass

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        fi = pyfuse3.FileInfo(fh=inode)
        if inode == NOFLUSH and flags & os.O_ACCMODE == os.O_RDONLY:
            fi.noflush = True
        if inode == PT and pyfuse3.passthrough_active():
            if inode not in self.backing_ids:
                fd = os.open(self.backing, os.O_RDONLY)  # kept open while mounted
                try:
                    self.backing_ids[inode] = pyfuse3.backing_open(fd)
                except OSError:  # not root: no passthrough, a plain open
                    self.backing_ids[inode] = 0
            fi.backing_id = self.backing_ids[inode]
            fi.keep_cache = fi.backing_id == 0  # passed through: the backing file's cache
        self.note("open", inode, fi.noflush, fi.backing_id)
        return fi

    async def read(self, fh: int, off: int, size: int) -> bytes:
        self.note("read", fh, off, size)
        if fh == PT:
            return b"D" * max(0, min(size, self.sizes[PT] - off))
        return CONTENT[off : off + size]

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.note("write", fh, off, len(buf))
        return len(buf)

    async def flush(self, fh: int) -> None:
        self.note("flush", fh)

    async def release(self, fh: int) -> None:
        self.note("release", fh)

    def getxattr(  # type: ignore[override]  # a reply or an awaitable
        self, inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> Any:
        if name == b"user.now":
            self.note("getxattr", inode, "at once")
            return b"now"
        if name == b"user.later":
            return self._later(inode)
        raise pyfuse3.FUSEError(errno.ENODATA)

    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        self.note("setxattr", inode, name.decode(), value.decode())

    async def _later(self, inode: int) -> bytes:
        await trio.lowlevel.checkpoint()
        self.note("getxattr", inode, "awaited")
        return b"later"

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._attr(inode)

    async def fallocate(self, fh: int, mode: int, offset: int, length: int) -> None:
        self.note("fallocate", fh, mode, offset, length)

    async def lseek(self, fh: int, offset: int, whence: int) -> int:
        self.note("lseek", fh, offset, whence)
        return offset + 7

    async def tmpfile(
        self, parent_inode: int, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self.note("tmpfile", parent_inode, stat.S_IFMT(mode) == stat.S_IFREG)
        return pyfuse3.FileInfo(fh=TMP), self._attr(TMP)


def main() -> None:
    mnt, log, backing = sys.argv[1:4]
    ops = TinyFS(Path(log), Path(backing))
    options = set(pyfuse3.default_options)
    options.add("fsname=tinyfs")
    options.discard("default_permissions")
    pyfuse3.init(ops, mnt, options)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
