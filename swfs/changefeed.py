"""The change feed: what changes in SRC behind the mount, seen by inotify.

A background object (``run()`` / ``stop()``) the daemon's lifecycle starts.
One task reads the kernel's inotify queue and sends what it names, as paths
relative to SRC, into a bounded trio memory channel; another coalesces them
per path and, once a path has been quiet for a moment, has the engine look at
it (``check_file``, the rescan's per-path record) in a worker thread, then
tells the daemon which paths changed so it can drop the kernel's caches of
them.  The periodic rescan stays the backstop for whatever this misses:

- a new directory gets a watch, and is walked at once, since files may be
  created in it before the watch exists;
- a directory moved (or moved away) changes paths below it that no event
  names: the engine rescans the tree (a stat per file, hashing only what moved);
- the kernel's queue overflowing (``IN_Q_OVERFLOW``) means events were lost:
  the engine rescans the tree;
- the per-user watch limit (``fs.inotify.max_user_watches``) being reached
  leaves the rest of the tree to the rescan, with a logged warning.

The store (and ``.swfs``) is never watched.  Events of the daemon's own
writes through the mount arrive like any others: the ``skip`` callback drops
paths the daemon is writing right now (it records them itself), and for the
rest ``check_file`` finds the stat signature the engine recorded and does
nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import math
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from swfs.api import RESERVED_ROOTS, STORE_NAME, RelPath, WriteProtocol
from swfs.store.fsutil import scan_dir

log = logging.getLogger(__name__)

# <sys/inotify.h>
# A batch of events at most this long is first sorted on the loop: paths
# whose stat signature is already recorded need no check in a thread.
ON_LOOP_CHECKS = 32

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
# Events after which a path's inode may have other extended attributes than
# the daemon last listed (``ChangeFeed.touched``).
TOUCH_MASK = IN_ATTRIB | IN_CREATE | IN_MOVED_TO
IN_CLOEXEC = os.O_CLOEXEC

WATCH_MASK = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
    | IN_EXCL_UNLINK
)

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

SETTLE = 0.02  # seconds a path must be quiet after a close, create, delete or rename
QUIET = 0.3  # after a bare write: the writer may not be done (no close seen yet)
MAX_DELAY = 1.0  # a path written without pause is still looked at this often
CHANNEL = 4096  # events in flight between the reader and the coalescer


class FeedEngine(Protocol):
    """What the feed asks of the engine."""

    @property
    def src(self) -> Path: ...

    @property
    def store_dir(self) -> Path: ...

    @property
    def writes(self) -> WriteProtocol: ...

    def check_file(self, rel: RelPath) -> object: ...

    def is_unchanged(self, rel: RelPath, st: os.stat_result) -> bool:
        """Cheap: ``st`` is the stat signature ``rel``'s record holds."""
        ...

    def scan(self) -> object: ...


class Inotify:
    """The inotify calls, through libc (the standard library has none)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        self._libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self.fd: int = fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def add_watch(self, path: str, mask: int) -> int:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), ctypes.c_uint32(mask))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(wd)

    def rm_watch(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self.fd, wd)  # EINVAL if already gone: fine

    def read(self) -> list[tuple[int, int, int, str]]:
        """The queued events as (wd, mask, cookie, name); [] if none."""
        try:
            buf = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        out = []
        off = 0
        while off + _EVENT.size <= len(buf):
            wd, mask, cookie, length = _EVENT.unpack_from(buf, off)
            off += _EVENT.size
            raw = buf[off : off + length].split(b"\0", 1)[0]
            off += length
            out.append((wd, mask, cookie, os.fsdecode(raw)))
        return out


@dataclass
class Event:
    """What the reader saw for one path."""

    rel: str
    mask: int
    old: str | None = None  # IN_MOVED_TO paired with its IN_MOVED_FROM


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _below(rel: str, prefix: str) -> bool:
    return rel == prefix or rel.startswith(prefix + "/")


class ChangeFeed:
    """Changes made in SRC behind the mount, recorded by the engine within a
    fraction of a second, and handed to ``changed`` (the daemon's cache
    invalidation) on the trio thread."""

    def __init__(
        self,
        engine: FeedEngine,
        *,
        changed: Callable[[list[str]], None] = lambda rels: None,
        skip: Callable[[list[str]], set[str]] = lambda rels: set(),
        touched: Callable[[list[str] | None], None] = lambda rels: None,
        hidden: Iterable[str] = (STORE_NAME, *RESERVED_ROOTS),
    ) -> None:
        self.engine = engine
        self.changed = changed
        self.skip = skip
        # Paths whose inode may have changed attributes or extended attributes
        # behind the mount (IN_ATTRIB), or now names another inode (IN_CREATE,
        # IN_MOVED_TO, a file found in a new directory), told as soon as their
        # event is read, before any coalescing or skipping; None: events were
        # lost.  On the trio thread.
        self.touched = touched
        self.src = str(engine.src)
        self.hidden_top = frozenset(hidden)
        self.store = os.path.realpath(engine.store_dir)
        self._ino: Inotify | None = None
        self._wd: dict[int, str] = {}  # watch descriptor -> directory (relative)
        self._by_dir: dict[str, int] = {}
        self._limited = False  # the watch limit was hit: the rescan covers the rest
        self._watched = False  # every directory got its watch when the feed started
        self._lock = threading.Lock()  # the watch maps: the loop reads, threads add
        self._scope: trio.CancelScope | None = None
        self.batches = 0  # batches handed to the engine (tests, status)

    # -- lifecycle

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        try:
            ino = Inotify()
        except OSError as exc:
            log.warning(
                "%s: no change notification (%s): changes behind the mount are seen "
                "by the periodic rescan only",
                self.src,
                exc.strerror,
            )
            task_status.started()
            return
        self._ino = ino
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                count = await trio.to_thread.run_sync(self._watch_tree, "")
                log.info("%s: watching %d directories for changes", self.src, count)
                self._watched = True
                send, receive = trio.open_memory_channel[Event | None](CHANNEL)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._read, send)
                        nursery.start_soon(self._coalesce, receive)
                        task_status.started()
                except Exception:
                    # A bug here must not take the mount down: the rescan remains.
                    log.exception(
                        "%s: the change feed stopped; changes behind the mount are "
                        "seen by the periodic rescan only",
                        self.src,
                    )
        finally:
            self._watched = False
            self._scope = None
            self._ino = None
            ino.close()

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    @property
    def watching(self) -> bool:
        """Every directory of the tree is watched, and events are being read:
        a change of any file's attributes behind the mount reaches ``touched``
        (a hard link from outside the tree aside).  False before the first
        walk has watched them all, once the watch limit is hit, and once the
        feed stops."""
        return self._watched and not self._limited and self._ino is not None

    # -- watches (in a worker thread: a large tree takes a while)

    def _hidden(self, rel: str) -> bool:
        if rel.split("/", 1)[0] in self.hidden_top:
            return True
        path = os.path.join(self.src, rel)
        return path == self.store or path.startswith(self.store + os.sep)

    def _watch_tree(self, top: str) -> int:
        """Watch ``top`` and every directory below it; how many were added."""
        count = 0
        for rel in self._dirs(top):
            if self._watch(rel):
                count += 1
            elif self._limited:
                break
        return count

    def _dirs(self, top: str) -> Iterator[str]:
        stack = [top]
        while stack:
            rel = stack.pop()
            if rel and self._hidden(rel):
                continue
            yield rel
            try:
                with scan_dir(os.path.join(self.src, rel)) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(_join(rel, e.name))
            except OSError:
                continue

    def _watch(self, rel: str) -> bool:
        ino = self._ino
        if ino is None or self._limited:
            return False
        try:
            wd = ino.add_watch(os.path.join(self.src, rel), WATCH_MASK)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                self._limited = True
                log.warning(
                    "%s: the inotify watch limit is reached (%d watches; raise "
                    "fs.inotify.max_user_watches): changes behind the mount in the "
                    "directories not watched are seen by the periodic rescan only",
                    self.src,
                    len(self._wd),
                )
            elif exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                log.warning("%s: cannot watch: %s", rel or ".", exc.strerror)
            return False
        with self._lock:
            old = self._wd.get(wd)
            if old is not None and old != rel:
                self._by_dir.pop(old, None)  # the same directory under its new name
            self._wd[wd] = rel
            self._by_dir[rel] = wd
        return True

    def _moved_dir(self, old: str | None, new: str | None) -> None:
        """A watched directory (and everything below it) moved or left the tree."""
        if old is None:
            return
        with self._lock:
            for rel in [r for r in self._by_dir if _below(r, old)]:
                wd = self._by_dir.pop(rel)
                if new is None:
                    self._wd.pop(wd, None)
                    if self._ino is not None:
                        self._ino.rm_watch(wd)
                else:
                    moved = new + rel[len(old) :]
                    self._wd[wd] = moved
                    self._by_dir[moved] = wd

    # -- reading

    async def _read(self, send: trio.MemorySendChannel[Event | None]) -> None:
        ino = self._ino
        assert ino is not None
        async with send:
            while True:
                await trio.lowlevel.wait_readable(ino.fd)
                events = self._events(ino.read())
                self._touch(events)
                for ev in events:
                    await send.send(ev)

    def _touch(self, events: list[Event | None]) -> None:
        if any(ev is None for ev in events):
            touched: list[str] | None = None
        else:
            touched = [ev.rel for ev in events if ev is not None and ev.mask & TOUCH_MASK]
            if not touched:
                return
        try:
            self.touched(touched)
        except Exception:
            log.exception("%s: telling the daemon of changed attributes failed", self.src)

    def _events(self, raw: list[tuple[int, int, int, str]]) -> list[Event | None]:
        """Paths from raw events (None: events were lost, rescan everything).
        A move's two halves come in one read; they are paired by cookie."""
        out: list[Event | None] = []
        moved_from: dict[int, tuple[str, int]] = {}
        for wd, mask, cookie, name in raw:
            if mask & IN_Q_OVERFLOW:
                out.append(None)
                continue
            with self._lock:
                parent = self._wd.get(wd)
                if mask & IN_IGNORED:
                    if parent is not None and self._by_dir.get(parent) == wd:
                        del self._by_dir[parent]
                    self._wd.pop(wd, None)
                    continue
            if parent is None:
                continue
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                if parent == "":
                    log.warning("%s: the workspace root was moved or deleted", self.src)
                continue
            rel = _join(parent, name)
            if self._hidden(rel):
                continue
            if mask & IN_MOVED_FROM:
                moved_from[cookie] = (rel, mask)
                out.append(Event(rel, mask))
                continue
            if mask & IN_MOVED_TO:
                old = moved_from.pop(cookie, None)
                if mask & IN_ISDIR:
                    self._moved_dir(old[0] if old else None, rel)
                out.append(Event(rel, mask, old=old[0] if old else None))
                continue
            out.append(Event(rel, mask))
        for rel, mask in moved_from.values():
            if mask & IN_ISDIR:
                self._moved_dir(rel, None)  # moved out of the tree
        return out

    # -- coalescing

    async def _coalesce(self, receive: trio.MemoryReceiveChannel[Event | None]) -> None:
        due: dict[str, float] = {}  # path -> when to look at it
        first: dict[str, float] = {}  # path -> when its first unhandled event came
        new_dirs: set[str] = set()
        rescan = False
        async with receive:
            while True:
                now = trio.current_time()
                wake = min(due.values(), default=math.inf)
                if rescan:
                    wake = min(wake, now + SETTLE)
                ev: Event | None = None
                got = False
                with trio.move_on_at(wake):
                    ev = await receive.receive()
                    got = True
                now = trio.current_time()
                if got:
                    if ev is None:
                        rescan = True
                        continue
                    for rel in (ev.rel, ev.old):
                        if rel is None:
                            continue
                        first.setdefault(rel, now)
                        if ev.mask & ~IN_MODIFY:
                            when = now + SETTLE
                            due[rel] = min(due.get(rel, when), when)
                        else:  # a write with no close yet: wait for a pause
                            due[rel] = min(now + QUIET, first[rel] + MAX_DELAY)
                    if ev.mask & IN_ISDIR and ev.mask & (IN_CREATE | IN_MOVED_TO):
                        new_dirs.add(ev.rel)
                    if ev.mask & IN_ISDIR and ev.mask & (IN_MOVED_FROM | IN_MOVED_TO):
                        # Paths below it changed with no event of their own.
                        rescan = True
                    continue
                ready = sorted(r for r, t in due.items() if t <= now)
                for rel in ready:
                    del due[rel]
                    first.pop(rel, None)
                dirs = sorted(d for d in new_dirs if d in ready or rescan)
                new_dirs.difference_update(dirs)
                await self._handle(ready, dirs, rescan)
                rescan = False

    async def _handle(self, rels: list[str], dirs: list[str], rescan: bool) -> None:
        try:
            if rels:
                skip = self.skip(rels)
                rels = [r for r in rels if r not in skip]
            if not (rels or dirs or rescan):
                return
            self.batches += 1
            found: list[str] = []
            if dirs or rescan:
                found = await trio.to_thread.run_sync(self._watch_new, dirs, rescan)
            if found:
                # Made before their directory's watch: no event named them.
                self.touched(found)
                # A file in a new directory may be one the daemon is creating
                # right now: it records that itself, and a check here could
                # record its empty first state as a version of its own.
                skip = self.skip(found)
                found = [r for r in found if r not in skip]
            todo = [*rels, *found]
            if not rescan and len(todo) <= ON_LOOP_CHECKS:
                # Most events of a busy mount are its own writes, recorded at
                # their close and seen again here: no thread for those.
                todo = [r for r in todo if not self._recorded(r)]
            if todo or rescan:
                await trio.to_thread.run_sync(self._record, todo, rescan)
            # The kernel drops what it keeps of every path, recorded or not:
            # the invalidator compares what it told the kernel with the file.
            self.changed(sorted(set(rels) | set(found)))
        except Exception:
            # One bad batch must not end the feed; the rescan covers its paths.
            log.exception("%s: handling changes behind the mount failed", self.src)

    def _recorded(self, rel: str) -> bool:
        """Cheap, on the loop (one lstat, one record head): ``rel`` is a
        regular file whose stat signature is its record's, so a check would
        find nothing to record."""
        try:
            st = os.lstat(os.path.join(self.src, rel))
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and self.engine.is_unchanged(RelPath(rel), st)

    def _watch_new(self, dirs: list[str], rescan: bool) -> list[str]:
        """In a worker thread: watch new directories; the files found in them
        (none when a rescan will look at everything anyway)."""
        found: list[str] = []
        for top in dirs:
            self._watch_tree(top)
            if not rescan:
                found += self._files_below(top)
        return found

    def _record(self, rels: list[str], rescan: bool) -> None:
        """In a worker thread: have the engine record what changed."""
        if rescan:
            try:
                self.engine.scan()
            except Exception:
                log.exception("%s: rescan after lost or moved events failed", self.src)
        for rel in rels:
            try:
                # Skipped if a write through the mount began since the batch
                # was sorted: that write records the file itself.
                self.engine.writes.check_behind(rel, self.engine.check_file)
            except Exception:
                log.exception("%s: recording a change made behind the mount failed", rel)

    def _files_below(self, top: str) -> list[str]:
        out = []
        for rel in self._dirs(top):
            try:
                with scan_dir(os.path.join(self.src, rel)) as it:
                    for e in it:
                        try:
                            if stat.S_ISREG(e.stat(follow_symlinks=False).st_mode):
                                out.append(_join(rel, e.name))
                        except OSError:
                            continue
            except OSError:
                continue
        return out
