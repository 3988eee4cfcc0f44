"""Hashing a written file at close by what was written.

A write through the mount ends in a rehash of the whole file (the hash
names the version).  For a big file whose change is small, most of that
work repeats the last hash.  This module keeps, for the few files hashed
last, the leaf CVs of the bytes hashed (``swfs.store.b3tree``: 32 bytes per MiB),
and the write session reports every change it makes through it
(``write``/``truncate``).  At the next hash, if every change since went
through here, only the leaves those changes touched are rehashed.

When is that sound?  The cached CVs describe the bytes the file held at
one stat (size, mtime, ctime) of one inode (st_dev, st_ino).  The entry
keeps the stat the file must have if only the changes it saw happened:

- a write or truncate through here fstat()s the file before the change;
  if the stat is not the entry's, something else changed the file (a
  writer behind the mount, a kernel passthrough writer, a truncate by
  path...) and the entry is dropped;  after the change, the entry takes the
  file's new stat and marks the leaves the change touched;
- a hash uses the entry only if the file's stat is the entry's when it
  starts, and no change through here is under way; it stores its own
  result only if no change through here started while it ran and the stat
  after hashing is the one before (else the file changed while read: the
  caller's own check rejects that hash, and the old entry, with every
  change since marked, stays valid).

So a change anywhere else is seen by the stat it leaves, as the engine sees
changes behind the mount everywhere (``check_file``); on a kernel with
fine-grained timestamps for changes after a stat (Linux 6.13+: ext4, xfs,
btrfs, tmpfs), every such change moves ctime.  What no stat can show is a
change behind the mount made in the microseconds between the fstat before
and after a write through here, or stores through a shared mapping another
process made writable before the last stat (the kernel moves the times at
the first store to a clean page only): the blind spots of the engine's own
stat signature, narrowed to concurrent writers.  A whole hash (``swfs
check``; a preserve that stores the bytes hashes them and records a
mismatch) names such bytes right again.  Anything else unexpected drops
the entry: the next hash is whole, and it refills the entry.

Entries are an LRU of a few files (2 GiB is 2,048 CVs: 64 KiB).  Files
below ``MIN_SIZE`` are hashed whole with blake3-py, as fast.
"""

from __future__ import annotations

import bisect
import logging
import os
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from swfs.store import b3tree
from swfs.store.fsutil import FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE
from swfs.store.fsutil import fallocate as _fallocate
from swfs.store.fsutil import hash_fd as hash_whole

log = logging.getLogger(__name__)

MIN_SIZE = 4 * b3tree.LEAF
FILES = 8
# Past this many separate dirty ranges an entry is dropped (a full hash is
# as cheap as tracking a scatter of writes).
MAX_RANGES = 4096
# Files with more leaves than this are not cached (1 MiB of CVs: 32 GiB).
MAX_LEAVES = 32 * 1024

Key = tuple[int, int]  # (st_dev, st_ino)
Sig = tuple[int, int, int]  # (st_size, st_mtime_ns, st_ctime_ns)


def _sig(st: os.stat_result) -> Sig:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass
class _Entry:
    hash: str  # blake3 of the bytes the CVs describe
    size: int
    cvs: bytes
    stat: Sig  # the file's stat if only the changes marked below happened
    dirty: list[tuple[int, int]] = field(default_factory=list)  # leaf ranges [a, b), sorted

    def mark(self, start: int, end: int) -> bool:
        """Leaves touched by bytes ``[start, end)``; False when too scattered."""
        if end <= start:
            return True
        a, b = start // b3tree.LEAF, (end - 1) // b3tree.LEAF + 1
        d = self.dirty
        i = bisect.bisect_left(d, (a, a))
        if i > 0 and d[i - 1][1] >= a:
            i -= 1
        j = i
        while j < len(d) and d[j][0] <= b:
            a, b = min(a, d[j][0]), max(b, d[j][1])
            j += 1
        d[i:j] = [(a, b)]
        return len(d) <= MAX_RANGES

    def reusable(self, i: int, size: int) -> bool:
        """Whether leaf ``i`` of the file at ``size`` has its cached CV."""
        if i * b3tree.LEAF >= self.size:
            return False
        if b3tree.leaf_len(size, i) != b3tree.leaf_len(self.size, i):
            return False
        k = bisect.bisect_right(self.dirty, (i, 1 << 62)) - 1
        return not (k >= 0 and self.dirty[k][0] <= i < self.dirty[k][1])


@dataclass
class _Inode:
    entry: _Entry | None = None
    writes: int = 0  # changes through here under way
    epoch: int = 0  # changes through here begun, ever (while this object lives)
    hashing: int = 0


class TreeCache:
    """Leaf CVs of the files hashed last, and the changes made to them
    since through the write session (see the module's description)."""

    def __init__(self, files: int = FILES, *, verify: bool | None = None) -> None:
        self._files = files
        # Check every hash by leaves against a whole hash (default: ``VERIFY``).
        self.verify = VERIFY if verify is None else verify
        self._lock = threading.Lock()
        self._inodes: dict[Key, _Inode] = {}
        self._lru: OrderedDict[Key, None] = OrderedDict()  # keys with an entry
        self.stats = {"whole": 0, "tree": 0, "incremental": 0, "leaves": 0, "dropped": 0}

    # -- changes through the mount

    def write(self, key: Key, fd: int, off: int, data: bytes | memoryview) -> int:
        """``os.pwrite(fd, data, off)``, tracked."""
        entry, before = self._begin(key, fd)
        try:
            n = os.pwrite(fd, data, off)
            after = os.fstat(fd)
        except BaseException:
            self._end(key, entry, None, None)
            raise
        self._end(key, entry, before, (after, off, off + n))
        return n

    def truncate(self, key: Key, fd: int, size: int) -> None:
        """``os.ftruncate(fd, size)``, tracked."""
        entry, before = self._begin(key, fd)
        try:
            os.ftruncate(fd, size)
            after = os.fstat(fd)
        except BaseException:
            self._end(key, entry, None, None)
            raise
        old = before[0] if before is not None else size
        self._end(key, entry, before, (after, min(old, size), max(old, size)))

    def fallocate(self, key: Key, fd: int, mode: int, off: int, length: int) -> None:
        """fallocate(2) of ``fd`` with ``mode``, tracked: a hole punched or a
        range zeroed changes those bytes, a grown size the tail."""
        entry, before = self._begin(key, fd)
        try:
            _fallocate(fd, mode, off, length)
            after = os.fstat(fd)
        except BaseException:
            self._end(key, entry, None, None)
            raise
        old = before[0] if before is not None else after.st_size
        new = after.st_size
        start, end = min(old, new), max(old, new)
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            if end <= start:  # no change of size: the range alone
                start, end = off, min(off + length, new)
            else:
                start, end = min(start, off), max(end, min(off + length, new))
        self._end(key, entry, before, (after, start, end))

    def forget(self, key: Key) -> None:
        """Drop what is known of ``key``: the next hash is whole."""
        with self._lock:
            inode = self._inodes.get(key)
            if inode is not None and inode.entry is not None:
                self._drop(key, inode)

    def _begin(self, key: Key, fd: int) -> tuple[_Entry | None, Sig | None]:
        with self._lock:
            inode = self._inodes.get(key)
            if inode is None:
                inode = self._inodes[key] = _Inode()
            inode.writes += 1
            inode.epoch += 1
            entry = inode.entry
        return entry, (_sig(os.fstat(fd)) if entry is not None else None)

    def _end(
        self,
        key: Key,
        entry: _Entry | None,
        before: Sig | None,
        done: tuple[os.stat_result, int, int] | None,
    ) -> None:
        with self._lock:
            inode = self._inodes[key]
            inode.writes -= 1
            if entry is not None and inode.entry is entry:
                if done is None or before != entry.stat or inode.writes:
                    # Failed, changed by someone else first, or another
                    # change is under way: what the file holds is not known.
                    self._drop(key, inode)
                else:
                    after, start, end = done
                    entry.stat = _sig(after)
                    if not entry.mark(start, end):
                        self._drop(key, inode)
            self._tidy(key, inode)

    def _drop(self, key: Key, inode: _Inode) -> None:
        inode.entry = None
        self._lru.pop(key, None)
        self.stats["dropped"] += 1

    def _tidy(self, key: Key, inode: _Inode) -> None:
        if inode.entry is None and not inode.writes and not inode.hashing:
            self._inodes.pop(key, None)

    # -- hashing

    def hash_fd(self, fd: int) -> str:
        """blake3 of the file behind ``fd`` as lowercase hex, like
        ``fsutil.hash_fd``: from leaves cached for it where every change
        since is known, else whole (then cached for next time).  A file that
        changes while hashed gets a hash of no version: callers compare its
        stat before and after, as they must for ``fsutil.hash_fd``."""
        st = os.fstat(fd)
        lib = b3tree.library()
        if lib is None or not stat.S_ISREG(st.st_mode) or st.st_size < MIN_SIZE:
            self.stats["whole"] += 1
            return hash_whole(fd)
        key, sig, size = (st.st_dev, st.st_ino), _sig(st), st.st_size
        with self._lock:
            inode = self._inodes.get(key)
            if inode is None:
                inode = self._inodes[key] = _Inode()
            inode.hashing += 1
            epoch, quiet = inode.epoch, not inode.writes
            base = inode.entry if quiet and inode.entry and inode.entry.stat == sig else None
            # A copy: writes mark the live entry meanwhile.
            dirty = list(base.dirty) if base is not None else []
        try:
            n = b3tree.leaf_count(size)
            if base is not None:
                snapshot = _Entry(base.hash, base.size, base.cvs, base.stat, dirty)
                todo = [i for i in range(n) if not snapshot.reusable(i, size)]
                keep = min(n, b3tree.leaf_count(base.size)) * b3tree.CV
                cvs = bytearray(base.cvs[:keep])
                cvs.extend(bytes(n * b3tree.CV - len(cvs)))
                b3tree.fill_leaves(lib, fd, size, cvs, todo)
                h = lib.root(cvs)
                self.stats["incremental"] += 1
                self.stats["leaves"] += len(todo)
            else:
                h, cvs = b3tree.hash_fd(lib, fd, size)
                self.stats["tree"] += 1
                self.stats["leaves"] += n
            if self.verify:
                whole = hash_whole(fd)
                if whole != h:
                    log.error("blake3 by leaves %s != whole %s (fd %d): using whole", h, whole, fd)
                    self.forget(key)
                    return whole
            steady = _sig(os.fstat(fd)) == sig
            with self._lock:
                if steady and inode.epoch == epoch and quiet and not inode.writes:
                    if n <= MAX_LEAVES:
                        inode.entry = _Entry(h, size, bytes(cvs), sig)
                        self._lru[key] = None
                        self._lru.move_to_end(key)
                        self._evict()
                    elif inode.entry is not None:
                        self._drop(key, inode)
            return h
        finally:
            with self._lock:
                inode.hashing -= 1
                self._tidy(key, inode)

    def _evict(self) -> None:
        while len(self._lru) > self._files:
            old, _ = self._lru.popitem(last=False)
            inode = self._inodes.get(old)
            if inode is not None:
                inode.entry = None
                self._tidy(old, inode)

    def cached(self, key: Key) -> str | None:
        """The hash whose leaves are kept for ``key`` (tests, the dump)."""
        with self._lock:
            inode = self._inodes.get(key)
            return inode.entry.hash if inode and inode.entry else None

    def report(self) -> str:
        """One line for the daemon's dump: files kept, hashes by kind."""
        with self._lock:
            files = len(self._lru)
            counts = ", ".join(f"{k}={v}" for k, v in self.stats.items())
        return f"close hash by leaves: {files} file(s) kept; {counts}"


# ``SWFS_B3TREE=verify``: every hash by leaves is checked against a whole
# hash (a debugging aid: it costs the whole hash again).
VERIFY = os.environ.get(b3tree.ENV) == "verify"

CACHE = TreeCache()


def hash_fd(fd: int) -> str:
    """``TreeCache.hash_fd`` of the process's cache."""
    return CACHE.hash_fd(fd)
