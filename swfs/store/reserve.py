"""Space held back in the store so that a full disk can be freed.

Like ZFS's slop space: the store keeps a file of allocated blocks
(``reserve`` in the store directory) that nothing but the changes that free
space may use.  A delete or truncate through the mount, and ``swfs gc``,
spend it when the disk is full (``spent``): the freed blocks let them keep
the bytes that go (when they fit) and write their own bookkeeping (an LMDB
transaction needs new pages, the state log a line).  Afterwards the reserve is
filled again from whatever the change freed.  Writes that only add bytes
never use it: they fail with ENOSPC while the reserve is still held.

The size is 1/32 of the file system (as ZFS's slop), at least
``RESERVE_MIN`` (but at most 1/8 of a tiny file system) and at most
``RESERVE_MAX``.  Filling is best effort: on a
disk already full the reserve holds what could be had.  Where a file system
cannot allocate ahead (no ``fallocate``, copy-on-write ones that do not
honour it) the reserve is only as good as the file system makes it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

RESERVE_NAME = "reserve"
RESERVE_MIN = 1 << 20
RESERVE_MAX = 64 << 20
_STEP = 256 << 10  # allocated this much at a time, so a nearly full disk gives what it has

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or quota, or an LMDB commit) is full."""
    if isinstance(exc, OSError):
        return exc.errno in NO_SPACE
    text = str(exc)
    return "No space left" in text or "quota exceeded" in text.lower()


def default_size(path: Path) -> int:
    """1/32 of the file system that holds ``path``, within the bounds (and
    never more than 1/8 of a tiny one)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return RESERVE_MIN
    total = st.f_blocks * st.f_frsize
    return min(max(RESERVE_MIN, min(RESERVE_MAX, total // 32)), total // 8)


class Reserve:
    """The store's reserve file; thread-safe."""

    def __init__(self, store_dir: Path, size: int | None = None) -> None:
        self.path = store_dir / RESERVE_NAME
        self._size = size
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """The size the reserve is filled to."""
        if self._size is None:
            self._size = default_size(self.path.parent)
        return self._size

    def held(self) -> int:
        """Bytes the reserve holds now (allocated blocks)."""
        try:
            return os.stat(self.path).st_blocks * 512
        except OSError:
            return 0

    def fill(self) -> int:
        """Allocate the reserve up to its size, as far as the disk allows
        (never an error); the bytes it holds."""
        with self._lock:
            return self._fill()

    def _fill(self) -> int:
        want = self.size
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            log.warning("%s: cannot open the reserve: %s", self.path, exc.strerror)
            return 0
        try:
            have = os.fstat(fd).st_size
            if have > want:  # sized down since (mount --reserve)
                os.ftruncate(fd, want)
                have = want
            while have < want:
                step = min(_STEP, want - have)
                try:
                    os.posix_fallocate(fd, have, step)
                except OSError as exc:
                    if exc.errno not in NO_SPACE:
                        log.warning("%s: cannot allocate the reserve: %s", self.path, exc.strerror)
                    break
                have += step
            if have < want:
                # A partial step may have left blocks past the last whole one.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, have)
            return os.fstat(fd).st_blocks * 512
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def spent(self) -> Iterator[int]:
        """Free the reserve for the block (yields the bytes freed), then fill
        it again from what the block freed.  Blocks that spend it run one
        at a time."""
        with self._lock:
            freed = 0
            with contextlib.suppress(OSError):
                freed = os.stat(self.path).st_blocks * 512
                os.truncate(self.path, 0)
            if freed:
                log.warning("disk full: spending the store's reserve (%d bytes)", freed)
            try:
                yield freed
            finally:
                self._fill()
