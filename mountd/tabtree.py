"""``.tab/``: the task's tab (``swfs.evidence.tab``) in the mount.

``requirements.md`` is the one writable file: each write goes straight to
the store (``STORE/tab/requirements.md``), so ``swfs tab`` sees it without
asking the daemon and a tab started by ``swfs tab new`` shows at once.
Editors that save through a temp file and a rename work: a new file in
``.tab/`` is a scratch file held in memory, which may only be written,
renamed onto ``requirements.md`` or removed.  ``reads.md``, ``unopened.md``
and ``TAB.md`` are built per caller (an excerpt only for a caller who may
read its source) from the access journal and the search index, in a thread.

The directory belongs to the mounting user (mode 0700; 0755 with
``--share-tab``, and then only the owner writes); the kernel enforces it
(``default_permissions``), root included as everywhere.  Nothing read here
is journaled: the tab is not evidence.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import pyfuse3
import trio

from mountd.caller import current_caller
from mountd.nodes import Tree
from mountd.synthetic import Entry, Generation, TreeDefaults
from swfs.api import Access
from swfs.evidence import access as journal_mod
from swfs.evidence.tab import (
    MAX_REQUIREMENTS_BYTES,
    OLD,
    REQUIREMENTS,
    Builder,
    Report,
    TabError,
    TabInfo,
    TabStore,
)
from swfs.find.search import Caller

log = logging.getLogger(__name__)

GENERATED = ("TAB.md", "reads.md", "unopened.md")
KEPT = 1.0  # seconds a built report answers the same caller when nothing changed
CACHED = 64
BUILDERS = 8  # TAB.md builders kept to go on from (one per tab and caller)
CACHED_BYTES = 64 << 20  # of rendered files kept (a long tab's reads.md alone is tens of MB)
MAX_SCRATCH = 32
NAME_MAX = 255


def _err(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


class TabTree(TreeDefaults):
    tree = Tree.TAB
    scope = "all"  # reads.md, unopened.md and TAB.md speak of any file (mountd.router)

    def listed(self) -> bool:
        """Reachable by name only: a recursive grep from the root skips the tab."""
        return False

    def __init__(self, engine: Any, gen: Generation, journal: Any, *, shared: bool) -> None:
        self.engine, self.gen, self.journal = engine, gen, journal
        self.store = TabStore(engine.store_dir)
        self.owner, self.group = os.getuid(), os.getgid()
        self.shared = shared
        self.scratch: dict[str, bytearray] = {}
        # (tab, caller, leaf) -> (stamp, when, bytes)
        self._leaves: OrderedDict[tuple[str, Caller, str], tuple[object, float, bytes]] = (
            OrderedDict()
        )
        self._limiter = trio.CapacityLimiter(1)
        self._building = trio.Lock()
        # (tab, caller) -> (what it is valid for, the builder of TAB.md)
        self._builders: OrderedDict[tuple[str, Caller], tuple[object, Builder]] = OrderedDict()
        self._write_limiter = trio.CapacityLimiter(1)
        self._lock = threading.Lock()  # scratch files and requirements.md
        self._mtime = time.time_ns()
        try:
            self.store.current()  # the first tab starts with the first mount
        except (OSError, TabError) as exc:
            log.error("tab: %s", exc)

    # -- reading

    def _dir_access(self) -> Access:
        return Access(self.owner, self.group, 0o755 if self.shared else 0o700)

    def _file_access(self) -> Access:
        return Access(self.owner, self.group, 0o644 if self.shared else 0o600)

    def _file(self, data: bytes, *, writable: bool = False) -> Entry:
        return Entry(
            False,
            self._file_access(),
            size=len(data),
            mtime_ns=self._mtime if writable else time.time_ns(),
            data=data,
            writable=writable,
        )

    def requirements(self) -> bytes:
        try:
            return self.store.requirements()
        except (OSError, TabError) as exc:
            log.error("tab: cannot read the requirements: %s", exc)
            raise _err(errno.EIO) from None

    def _tab(self, name: str) -> TabInfo | None:
        try:
            return self.store.current() if not name else self.store.get_old(name)
        except (OSError, TabError) as exc:
            log.error("tab: %s", exc)
            raise _err(errno.EIO) from None

    def _stamp(self, tab: TabInfo) -> object:
        index = self.engine.search_index
        return (
            self.journal.seq,
            tab.started,
            tab.requirements(),
            0 if index is None else index.generation,
            self.gen.value,
        )

    def _build(self, tab: TabInfo, caller: Caller, excerpts: bool) -> Report:
        """*slow*: runs in a thread.  Without ``excerpts`` (TAB.md and
        unopened.md) the builder of the last build goes on from the last
        event it took, as long as the workspace has not changed since: in a
        long tab most builds only add the reads made since the last."""
        search = None if self.engine.search_index is None else self.engine.search_index.search
        key = (tab.name, caller)
        valid = (tab.started, tab.ended, self.gen.value)
        builder: Builder | None = None
        if not excerpts:
            kept = self._builders.get(key)
            if kept is not None and kept[0] == valid:
                builder = kept[1]
        if builder is None:
            builder = Builder(
                self.engine.workspace,
                search,
                caller,
                views=self.engine.views,
                access=self.engine.evidence.access,
                excerpts=excerpts,
                keep_reads=excerpts,
            )
        note = ""
        if not self.journal.enabled:
            note = "recording is off on this mount (--no-journal): no reads or listings"
        else:
            self.journal.flush()  # what was done before this read is in it
            try:
                con = journal_mod.open_readonly(self.engine.store_dir)
            except journal_mod.JournalError as exc:
                note = str(exc)
            else:
                try:
                    builder.fold(
                        journal_mod.iter_events(
                            con, since=tab.started, until=tab.ended, after=builder.last_seq
                        )
                    )
                finally:
                    con.close()
        if not excerpts:
            self._builders[key] = (valid, builder)
            self._builders.move_to_end(key)
            while len(self._builders) > BUILDERS:
                self._builders.popitem(last=False)
        return builder.finish(tab, note=note)

    async def _generated(self, name: str, leaf: str) -> bytes:
        """The bytes of generated ``leaf`` of tab ``name`` ('' the current
        one) for the caller.  Built and rendered in a thread (a long tab's
        ``reads.md`` is tens of MB), and kept while nothing changed: one
        ``cat`` asks for it on lookup, getattr and open."""
        tab = self._tab(name)
        if tab is None:
            raise _err(errno.ENOENT)
        caller = current_caller()
        # One build at a time; a request that waited for one may find its
        # file made by it.
        async with self._building:
            stamp = self._stamp(tab)
            hit = self._leaves.get((name, caller, leaf))
            if hit is not None and hit[0] == stamp and time.monotonic() - hit[1] < KEPT:
                return hit[2]
            # TAB.md and unopened.md show no excerpts of reads: built
            # without them, and together.
            leaves = (leaf,) if leaf == "reads.md" else ("TAB.md", "unopened.md")
            rendered = await trio.to_thread.run_sync(
                self._render, tab, caller, leaves, limiter=self._limiter
            )
        now = time.monotonic()
        for one, data in rendered.items():
            key = (name, caller, one)
            self._leaves[key] = (stamp, now, data)
            self._leaves.move_to_end(key)
        # Only the fresh are of use, and the newest whatever its size.
        for key in [k for k, v in self._leaves.items() if now - v[1] >= KEPT]:
            del self._leaves[key]
        kept = sum(len(v[2]) for v in self._leaves.values())
        while len(self._leaves) > len(rendered) and (
            len(self._leaves) > CACHED or kept > CACHED_BYTES
        ):
            _, (_, _, gone) = self._leaves.popitem(last=False)
            kept -= len(gone)
        return rendered[leaf]

    def _render(self, tab: TabInfo, caller: Caller, leaves: tuple[str, ...]) -> dict[str, bytes]:
        """*slow*: runs in a thread."""
        rep = self._build(tab, caller, "reads.md" in leaves)
        out: dict[str, bytes] = {}
        for leaf in leaves:
            if leaf == "reads.md":
                out[leaf] = rep.reads_md()
            elif leaf == "unopened.md":
                out[leaf] = rep.unopened_md()
            else:
                out[leaf] = rep.tab_md()
        return out

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        if not path:
            return Entry(True, self._dir_access(), mtime_ns=self._mtime, writable=True)
        parts = path.split("/")
        if len(parts) == 1:
            leaf = parts[0]
            if leaf == REQUIREMENTS:
                return self._file(self.requirements(), writable=True)
            if leaf in GENERATED:
                return self._file(await self._generated("", leaf))
            if leaf == "@" + OLD:
                return Entry(True, self._dir_access(), mtime_ns=self._mtime)
            if leaf in self.scratch:
                return self._file(bytes(self.scratch[leaf]), writable=True)
            return None
        if parts[0] != "@" + OLD or len(parts) > 3:
            return None
        tab = self._tab(parts[1])
        if tab is None:
            return None
        if len(parts) == 2:
            return Entry(True, self._dir_access(), mtime_ns=int((tab.ended or 0) * 1e9))
        if parts[2] == REQUIREMENTS:
            return self._file(tab.requirements())
        if parts[2] in GENERATED:
            return self._file(await self._generated(parts[1], parts[2]))
        return None

    async def children(self, path: str) -> list[str]:
        if not path:
            return [REQUIREMENTS, *GENERATED, "@" + OLD, *self.scratch]
        if path == "@" + OLD:
            try:
                return [t.name for t in self.store.old()]
            except (OSError, TabError):
                return []
        if path.startswith("@" + OLD + "/") and path.count("/") == 1:
            return [REQUIREMENTS, *GENERATED]
        return []

    async def xattrs(self, path: str) -> Mapping[str, str]:
        return {}

    # -- writing (requirements.md and editors' scratch files only)

    def writable(self, path: str) -> bool:
        return path == REQUIREMENTS or path in self.scratch

    def content(self, path: str) -> bytes:
        if path == REQUIREMENTS:
            return self.requirements()
        data = self.scratch.get(path)
        if data is None:
            raise _err(errno.ENOENT)
        return bytes(data)

    def _store(self, path: str, data: bytes) -> None:
        if len(data) > MAX_REQUIREMENTS_BYTES:
            raise _err(errno.EFBIG)
        if path == REQUIREMENTS:
            try:
                self.store.save_requirements(data)
            except (OSError, TabError) as exc:
                log.error("tab: cannot save the requirements: %s", exc)
                raise _err(errno.EIO) from None
            self._mtime = time.time_ns()
        elif path in self.scratch:
            self.scratch[path] = bytearray(data)
        else:
            raise _err(errno.ENOENT)

    def _write(self, path: str, off: int, buf: bytes, append: bool) -> int:
        if not self.writable(path):
            raise _err(errno.EBADF)
        data = bytearray(self.content(path))
        if append:
            off = len(data)
        if off + len(buf) > MAX_REQUIREMENTS_BYTES:
            raise _err(errno.EFBIG)
        if off > len(data):
            data.extend(b"\0" * (off - len(data)))
        data[off : off + len(buf)] = buf
        self._store(path, bytes(data))
        return len(buf)

    def _truncate(self, path: str, size: int) -> None:
        if not self.writable(path):
            raise _err(errno.EROFS if path in GENERATED or path else errno.EACCES)
        data = self.content(path)
        self._store(path, data[:size] + b"\0" * max(0, size - len(data)))

    def _create(self, path: str) -> None:
        """A new file in ``.tab/`` (an editor's temp file)."""
        if "/" in path:
            raise _err(errno.EROFS)  # nothing is created under @old
        if path == REQUIREMENTS:
            self._store(path, b"")
            return
        if path in GENERATED or path == "@" + OLD:
            raise _err(errno.EEXIST)
        if len(path.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise _err(errno.ENAMETOOLONG)
        if len(self.scratch) >= MAX_SCRATCH:
            raise _err(errno.ENOSPC)
        self.scratch.setdefault(path, bytearray())

    def _rename(self, old: str, new: str) -> None:
        if "/" in old or "/" in new:
            raise _err(errno.EROFS)
        if not self.writable(old) or new in GENERATED or new == "@" + OLD:
            raise _err(errno.EACCES)
        if old == new:
            return
        data = self.content(old)
        if new != REQUIREMENTS and new not in self.scratch:
            if len(self.scratch) >= MAX_SCRATCH:
                raise _err(errno.ENOSPC)
            self.scratch[new] = bytearray()
        self._store(new, data)
        if old == REQUIREMENTS:
            # requirements.md always exists: renamed away (a backup), it is empty
            self._store(REQUIREMENTS, b"")
        else:
            del self.scratch[old]

    # Saving requirements.md fsyncs: in a thread, one change at a time.

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        def locked() -> Any:
            with self._lock:
                return fn(*args)

        return await trio.to_thread.run_sync(locked, limiter=self._write_limiter)

    async def write(self, path: str, off: int, buf: bytes, *, append: bool) -> int:
        n: int = await self._off_loop(self._write, path, off, buf, append)
        return n

    async def truncate(self, path: str, size: int) -> None:
        await self._off_loop(self._truncate, path, size)

    async def create(self, path: str) -> None:
        await self._off_loop(self._create, path)

    async def rename(self, old: str, new: str) -> None:
        await self._off_loop(self._rename, old, new)

    async def unlink(self, path: str) -> None:
        await self._off_loop(self._unlink, path)

    def _unlink(self, path: str) -> None:
        if path in self.scratch:
            del self.scratch[path]
            return
        if path == REQUIREMENTS or path in GENERATED or path == "@" + OLD:
            raise _err(errno.EACCES)
        raise _err(errno.EROFS if "/" in path else errno.ENOENT)
