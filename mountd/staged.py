"""The native tree of a ``--staged`` mount, the FUSE side: SRC with the
store's staged layer over it (``swfs.history.staging``).  Reads go to the
upper copy when there is one, else to SRC; every change copies the node up
first, then runs the plain passthrough's code on the upper layer, so the
engine's write protocol (preserve, record, settle) is the same one.  What a
change does to the layer (the SRC identity a copy keeps showing, whiteouts,
what a rename needs first, EXDEV for a folder SRC has) is the engine's
rule: ``swfs.history.copyup``.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable

from mountd.fsutil import RENAME_EXCHANGE
from mountd.passthrough import (
    Creds,
    NativeHandle,
    Passthrough,
    SetAttr,
    _err,
    join,
    split,
)
from mountd.poll import Poller
from mountd.reply import Reply, awaited
from swfs.api import EngineAPI
from swfs.history import copyup
from swfs.history.staging import UPPER, Staging


def native_tree(
    engine: EngineAPI, src: str, *, hidden: frozenset[str], poller: Poller | None = None
) -> Passthrough:
    """The native tree for ``engine``: staged when its workspace has a staged layer."""
    staging = engine.staging
    if isinstance(staging, Staging):
        return StagedPassthrough(engine, src, hidden=hidden, poller=poller, staging=staging)
    return Passthrough(engine, src, hidden=hidden, poller=poller)


class StagedPassthrough(Passthrough):
    def __init__(
        self,
        engine: EngineAPI,
        src: str,
        *,
        hidden: frozenset[str],
        poller: Poller | None = None,
        staging: Staging,
    ) -> None:
        super().__init__(engine, src, hidden=hidden, poller=poller)
        self.staging = staging
        # The workspace's records know every name of a hard-linked file.
        staging.other_names = engine.workspace.other_names
        self.top = Passthrough(engine, staging.upper, hidden=frozenset(), poller=poller)
        self.top.limiter = self.limiter
        self._reserved = self.reserved

    @property
    def reserved(self) -> frozenset[str]:
        return self._reserved

    @reserved.setter
    def reserved(self, names: frozenset[str]) -> None:
        self._reserved = names
        if "top" in self.__dict__:
            self.top.reserved = names

    def close(self) -> None:
        self.top.close()
        super().close()

    def _mapped(self, st: os.stat_result) -> os.stat_result:
        return copyup.shown(self.staging, st)

    def _exists(self, rel: str) -> bool:
        return copyup.exists(self.staging, rel)

    def _fresh(self, st: os.stat_result) -> os.stat_result:
        return copyup.made(self.staging, st)

    async def _copy_up(self, rel: str) -> None:
        if not self.staging.in_upper(rel):
            linked = await self.slow(self.staging.copy_up, rel)
            for other in linked:
                # Another name of the same SRC inode now lives in the layer:
                # the engine records its new inode, so a write through one
                # name is seen under all of them.
                await self.engine_check(other)

    def _own_handle(self, rel: str, fh: NativeHandle | None) -> NativeHandle | None:
        """``fh`` if it is open on the upper copy (not on SRC's file)."""
        if fh is None:
            return None
        try:
            a, b = os.fstat(fh.fd), self.staging.lstat_in(UPPER, rel)
        except OSError:
            return None
        return fh if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) else None

    # -- reading the tree

    def open_dir(self, rel: str) -> int:
        if self.staging.in_upper(rel):
            return self.top.open_dir(rel)
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().open_dir(rel)

    def entries(self, rel: str, fd: int) -> list[tuple[str, int]]:
        out = []
        for name, where in self.staging.names(rel).items():
            child = join(rel, name)
            if self.is_hidden(child):
                continue
            st = self.staging.stat_or_none(where, child)
            if st is None:
                continue
            out.append((name, self._mapped(st).st_ino))
        return out

    def lstat_entry(self, rel_dir: str, fd: int, name: str) -> os.stat_result:
        return self.lstat(join(rel_dir, name))

    def lstat(self, rel: str) -> os.stat_result:
        if rel and self.is_hidden(rel):
            raise _err(errno.ENOENT)
        if self.staging.in_upper(rel):
            return self._mapped(self.top.lstat(rel))
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().lstat(rel)

    def open_read(self, rel: str) -> int:
        if self.staging.in_upper(rel):
            return self.top.open_read(rel)
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().open_read(rel)

    def hold(self, rel: str) -> tuple[int, os.stat_result, str | None]:
        if self.staging.in_upper(rel):
            fd, st, known = self.top.hold(rel)
            return fd, self._mapped(st), known
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().hold(rel)

    def own_fd(self, fh: NativeHandle) -> int:
        """SRC's own file (open before it was copied up, then unlinked in the
        layer) is never changed: EROFS.  The layer's copy is."""
        upper = os.path.realpath(self.staging.upper) + "/"
        try:
            own = os.readlink(f"/proc/self/fd/{fh.fd}").startswith(upper)
        except OSError:
            # A name longer than the kernel can show: no name leads to SRC's
            # own file (hidden by the layer, its link count stays).
            own = os.fstat(fh.fd).st_nlink == 0
        if own:
            return fh.fd
        raise _err(errno.EROFS)

    def readlink(self, rel: str) -> bytes:
        if self.staging.in_upper(rel):
            return self.top.readlink(rel)
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().readlink(rel)

    # -- attributes

    async def setattr(self, rel: str, fh: NativeHandle | None, change: SetAttr) -> os.stat_result:
        if not self._exists(rel):
            raise _err(errno.ENOENT)
        await self._copy_up(rel)
        own = self._own_handle(rel, fh)
        return self._mapped(await self.top.setattr(rel, own, change))

    # -- files

    def open(self, rel: str, flags: int, creds: Creds) -> Reply[NativeHandle]:
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            return self._open_up(rel, flags, creds)
        if self.staging.in_upper(rel):
            return self.top.open(rel, flags, creds)
        if self.staging.lower_hidden(rel):
            raise _err(errno.ENOENT)
        return super().open(rel, flags, creds)

    async def _open_up(self, rel: str, flags: int, creds: Creds) -> NativeHandle:
        """An open that may change the file: of its copy in the layer."""
        if not self._exists(rel):
            raise _err(errno.ENOENT)
        await self._copy_up(rel)
        return await awaited(self.top.open(rel, flags, creds))

    async def create(  # always awaited: the layer's folders may need copying up first
        self, parent: str, name: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        self.check_new_name(parent, name)
        rel = join(parent, name)
        if self._exists(rel):
            if flags & os.O_EXCL:
                raise _err(errno.EEXIST)
            handle = await awaited(self.open(rel, flags & ~os.O_CREAT, creds))
            return handle, self._mapped(os.fstat(handle.fd))
        await self._copy_up(parent)
        handle, st = await awaited(self.top.create(parent, name, mode, flags, creds))
        return handle, self._fresh(st)

    async def tmpfile(
        self, parent: str, mode: int, flags: int, creds: Creds
    ) -> tuple[NativeHandle, os.stat_result]:
        if not self._exists(parent):
            raise _err(errno.ENOENT)
        await self._copy_up(parent)  # where it may be linked in later
        handle, st = await self.top.tmpfile(parent, mode, flags, creds)
        return handle, self._fresh(st)

    async def link_unnamed(self, fh: NativeHandle, parent: str, name: str) -> os.stat_result:
        await self._new_entry(parent, name)
        return self._mapped(await self.top.link_unnamed(fh, parent, name))

    # -- directory entries

    async def _new_entry(self, parent: str, name: str) -> None:
        self.check_new_name(parent, name)
        if self._exists(join(parent, name)):
            raise _err(errno.EEXIST)
        await self._copy_up(parent)

    async def mkdir(self, parent: str, name: str, mode: int, creds: Creds) -> os.stat_result:
        await self._new_entry(parent, name)
        return self._fresh(await self.top.mkdir(parent, name, mode, creds))

    async def mknod(
        self, parent: str, name: str, mode: int, rdev: int, creds: Creds
    ) -> os.stat_result:
        await self._new_entry(parent, name)
        return self._fresh(await self.top.mknod(parent, name, mode, rdev, creds))

    async def symlink(self, parent: str, name: str, target: bytes, creds: Creds) -> os.stat_result:
        await self._new_entry(parent, name)
        return self._fresh(await self.top.symlink(parent, name, target, creds))

    async def link(self, rel: str, parent: str, name: str) -> os.stat_result:
        if not self._exists(rel):
            raise _err(errno.ENOENT)
        await self._new_entry(parent, name)
        await self._copy_up(rel)
        return self._mapped(await self.top.link(rel, parent, name))

    async def unlink(self, parent: str, name: str) -> bool:
        rel = join(parent, name)
        if self.is_hidden(rel) or not self._exists(rel):
            raise _err(errno.ENOENT)
        remove = functools.partial(copyup.unlink, self.staging, rel)
        return await self.slow(self.writes.unlink(rel).run, remove)

    async def rmdir(self, parent: str, name: str) -> None:
        rel = join(parent, name)
        if self.is_hidden(rel) or not self._exists(rel):
            raise _err(errno.ENOENT)
        copyup.rmdir(self.staging, rel)

    async def rename(
        self,
        old_parent: str,
        old_name: str,
        new_parent: str,
        new_name: str,
        flags: int,
        moved: Callable[[], None] = lambda: None,
    ) -> None:
        old, new = join(old_parent, old_name), join(new_parent, new_name)
        if self.is_hidden(old) or not self._exists(old):
            raise _err(errno.ENOENT)
        self.check_new_name(new_parent, new_name)
        if flags & RENAME_EXCHANGE and self.is_hidden(new):
            raise _err(errno.ENOENT)
        staging = self.staging
        for step, rel in copyup.rename_steps(staging, old, new, flags):
            if step == "copy_up":
                await self._copy_up(rel)
            else:
                staging.whiteout(rel)
        if flags & RENAME_EXCHANGE:  # both names stay: no whiteout
            await self.top.rename(old_parent, old_name, new_parent, new_name, flags, moved)
            return

        def on_moved() -> None:
            staging.whiteout(old)
            moved()

        await self.top.rename(old_parent, old_name, new_parent, new_name, flags, on_moved)

    # -- extended attributes

    def getxattr(self, rel: str, name: str) -> bytes:
        if self.staging.in_upper(rel):
            return self.top.getxattr(rel, name)
        return super().getxattr(rel, name)

    def listxattr(self, rel: str) -> list[str]:
        if self.staging.in_upper(rel):
            return self.top.listxattr(rel)
        return super().listxattr(rel)

    def setxattr(self, rel: str, name: str, value: bytes) -> None:
        self.staging.copy_up(rel)
        self.top.setxattr(rel, name, value)

    def removexattr(self, rel: str, name: str) -> None:
        self.staging.copy_up(rel)
        self.top.removexattr(rel, name)


__all__ = ["StagedPassthrough", "native_tree", "split"]
