"""What our patched pyfuse3 adds for speed, and the policy for using it.

**The receive loop.**  After each reply the loop reads the FUSE descriptor
again for up to the poll window (``--poll-us``), without the GIL, before it
goes back to the event loop: a tool that walks a tree sends its next request
within microseconds, and picking that up costs a read(2) where a pass of the
event loop costs Python scheduling and an epoll wake-up.  With it,
``mountd.poll``'s loop-pass polling is switched off (it would only spin a
second time).  Stock pyfuse3 has no such loop; then ``mountd.poll`` polls as
before.

**Kernel passthrough** (``--passthrough=on`` or ``auto``; libfuse 3.17 or
newer under pyfuse3, a kernel with FUSE passthrough, a daemon running as
root): a read-only open of a native file is answered with a backing id, and
the kernel reads the backing file itself, its page cache included: the
daemon sees neither those reads nor their cost.

Only read-only opens of files larger than ``SMALL_FILE`` are passed through
by choice.  A small file is read in one or two requests, after which the
kernel's page cache (kept across opens: ``keep_cache``) answers every read
with no request at all.  Passed through, each read of it goes to the
backing file, and each such read marks the atime the kernel holds stale
(``fuse_file_accessed`` -> ``fuse_invalidate_atime`` in the kernel's
fs/fuse/passthrough.c), so the next ``stat``/``fstat`` of the file (``grep``
and ``cat`` make one after every open) is a GETATTR: a warm ``grep -r`` would
cost a request per file, every time.  Past ``SMALL_FILE`` the cold read the
kernel does itself is worth more than that request.

A write is not passed through by choice either, for it must reach the
daemon: the write session keeps the recorded bytes before the first in-place
change and records a version at close (``swfs.history.writesession``), and it can do
neither for writes it never sees.  The access journal still records each
passthrough open as a read of that file, but without the byte and line
ranges read (the reads never reach the daemon).  So while the journal
records, ``auto`` passes through binary files only (a NUL in the first
8 KiB: ``swfs.store.fsutil.holds_binary``, the rule by which the journal gives
text files line ranges and binary ones none): a text file's reads reach
the daemon and keep their lines (``lines=1-200`` in the lineage), where a
binary file's byte ranges say little a reader of the lineage can use, and
its reads are what big files are (data, PDFs, archives).  ``on`` passes
through every file, the user's say-so; ``--no-journal`` with ``auto`` too.

The kernel allows one backing file per inode, and once an inode is open for
passthrough it fails (EIO) any open of it that is not.  So all passthrough
opens of a node share one backing id, dropped at the last release; a
read-only open while the node has page-cache opens (a writer) is served by
the daemon as before; and an open for writing while the node has
passthrough opens must pass through too.  Such a writer keeps history by
other means: the recorded bytes are kept at open (before the kernel can
write), and at flush, fsync and release a change of size, mtime or ctime
since the last look marks the session written, so it records a version as
if it had seen the writes (a rehash that finds the same bytes records
nothing).

Whenever passthrough cannot be had (off, stock libfuse, the kernel declined
at INIT, registration refused) opens are served as before; the reason is
logged once.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pyfuse3

from mountd import binding
from mountd.options import PassthroughMode
from mountd.passthrough import NativeHandle
from mountd.reply import Reply
from swfs.store.fsutil import holds_binary

log = logging.getLogger(__name__)

PASSTHROUGH_MODES: tuple[PassthroughMode, ...] = ("auto", "on", "off")


# Read-only opens of files up to this size go through the page cache, not
# passthrough (see above): one read request's worth, the kernel's readahead.
SMALL_FILE = 128 * 1024


def passthrough_unavailable() -> str | None:
    """Why this daemon cannot ask for passthrough (None: it can ask)."""
    why = binding.passthrough_unavailable_why()
    if why is not None:
        return why
    if os.geteuid() != 0:
        return "the kernel lets only root register backing files"
    return None


class FastPath:
    def __init__(self, mode: PassthroughMode, *, journal: bool = False) -> None:
        if mode not in PASSTHROUGH_MODES:
            raise ValueError(f"passthrough must be one of {', '.join(PASSTHROUGH_MODES)}")
        self.mode = mode
        # Text files keep their reads (and the journal their line ranges).
        self.binary_only = mode == "auto" and journal
        if mode == "off":
            self.why_not: str | None = "--passthrough=off"
        else:
            self.why_not = passthrough_unavailable()
        self.wanted = self.why_not is None
        self._backing: dict[int, list[int]] = {}  # ino -> [backing id, passthrough opens]
        self._cached: Counter[int] = Counter()  # ino -> live page-cache opens
        # fh -> (ino, passed through, a writer's (size, mtime, ctime) at the last look)
        self._handles: dict[int, tuple[int, bool, tuple[int, int, int] | None]] = {}
        self._checked = False
        self.passed = 0  # opens passed through, ever

    def prepare(self, ops: Any, poll_window: float) -> None:
        """Before ``pyfuse3.init``: what to ask the kernel for, and the loop's spin."""
        ops.enable_passthrough = self.wanted
        if not self.wanted:
            log.info("kernel passthrough off: %s", self.why_not)
        if binding.set_spin_window(poll_window):
            ops.poller.window = 0.0  # the loop spins in pyfuse3 instead

    @property
    def active(self) -> bool:
        if not self.wanted:
            return False
        if not self._checked:  # INIT is answered by the time the first open comes
            self._checked = True
            if not binding.passthrough_active():
                self._off("the kernel did not offer FUSE passthrough at INIT")
                return False
            what = "binary native files" if self.binary_only else "native files"
            log.info("kernel passthrough on: read-only opens of %s", what)
        return self.wanted

    def _off(self, why: str) -> None:
        self.wanted, self.why_not = False, why
        log.warning("kernel passthrough off: %s", why)

    def opened(
        self,
        fi: pyfuse3.FileInfo,
        fh: int,
        ino: int,
        handle: NativeHandle,
        flags: int,
        slow: Callable[..., Awaitable[Any]],
        *,
        size: int,
    ) -> Reply[None]:
        """A native file of ``size`` bytes was opened (``fi`` about to be
        returned): pass it through when it may, or must.  At once, but for
        a writer whose recorded bytes must be kept first (awaited:
        mountd.reply)."""
        entry = self._backing_for(fi, fh, ino, handle, flags, size)
        if entry is None:
            return None
        session = handle.session
        if session is not None and session.needs_preserve:
            return self._pass_kept(fi, fh, ino, handle, entry, slow)
        self._pass(fi, fh, ino, handle, entry)
        return None

    async def _pass_kept(
        self,
        fi: pyfuse3.FileInfo,
        fh: int,
        ino: int,
        handle: NativeHandle,
        entry: list[int],
        slow: Callable[..., Awaitable[Any]],
    ) -> None:
        """Pass a writer through once its recorded bytes are kept: the kernel
        writes without us from the reply on.  ENOSPC/EIO fails the open,
        nothing written."""
        assert handle.session is not None
        await slow(handle.session.preserve)
        self._pass(fi, fh, ino, handle, entry)

    def created(self, fi: pyfuse3.FileInfo, fh: int, ino: int) -> None:
        """A native file was created (``fi`` about to be returned): never
        passed through (its writes are recorded at close), so counted as an
        open through the page cache."""
        self._through_cache(fi, fh, ino)

    def _through_cache(self, fi: pyfuse3.FileInfo, fh: int, ino: int) -> None:
        """Count an open that goes through the page cache (direct I/O has no
        page cache to conflict with a passthrough open)."""
        if not fi.direct_io:
            self._cached[ino] += 1
            self._handles[fh] = (ino, False, None)

    def _backing_for(
        self,
        fi: pyfuse3.FileInfo,
        fh: int,
        ino: int,
        handle: NativeHandle,
        flags: int,
        size: int,
    ) -> list[int] | None:
        """The node's backing entry if this open is to pass through (None:
        it goes through the page cache, counted as such)."""
        entry = self._backing.get(ino)
        if entry is None:
            read_only = flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_TRUNC
            small = size <= SMALL_FILE
            if (
                not self.active
                or not read_only
                or small
                or self._cached[ino]
                or (self.binary_only and not _binary(handle.fd))
            ):
                self._through_cache(fi, fh, ino)
                return None
            try:
                entry = self._backing[ino] = [binding.backing_open(handle.fd), 0]
            except OSError as exc:
                self._off(f"registering a backing file: {exc.strerror or exc}")
                self._cached[ino] += 1
                self._handles[fh] = (ino, False, None)
                return None
        return entry

    def _pass(
        self, fi: pyfuse3.FileInfo, fh: int, ino: int, handle: NativeHandle, entry: list[int]
    ) -> None:
        session = handle.session
        entry[1] += 1
        binding.set_backing(fi, entry[0])
        fi.direct_io = False
        fi.keep_cache = False  # no page cache of ours: the backing file has it
        self._handles[fh] = (ino, True, None if session is None else _stamp(handle.fd))
        self.passed += 1

    def passed_through(self, fh: int) -> bool:
        """Whether the open ``fh`` is passed through (its writes, if any,
        never went through the kernel's page cache of the file)."""
        got = self._handles.get(fh)
        return got is not None and got[1]

    def note_writes(self, fh: int, handle: NativeHandle) -> None:
        """Before a flush, fsync or release: a passthrough writer whose file
        changed since the last look is marked written (its writes never came
        through the daemon)."""
        got = self._handles.get(fh)
        if got is None or got[2] is None or handle.session is None:
            return
        now = _stamp(handle.fd)
        if now != got[2]:
            self._handles[fh] = (got[0], True, now)
            handle.session.dirty = handle.session.record_on_flush = True

    def released(self, fh: int) -> None:
        got = self._handles.pop(fh, None)
        if got is None:
            return
        ino, passed, _ = got
        if not passed:
            self._cached[ino] -= 1
            if self._cached[ino] <= 0:
                del self._cached[ino]
            return
        entry = self._backing[ino]
        entry[1] -= 1
        if entry[1] == 0:
            del self._backing[ino]
            try:
                binding.backing_close(entry[0])
            except OSError as exc:  # the kernel keeps its own reference
                log.warning("closing backing id %d: %s", entry[0], exc)

    def report(self) -> str:
        state = "on" if self.wanted and self._checked else (self.why_not or "not yet asked")
        live = len(self._backing)
        return f"passthrough: {state}; {self.passed} opens passed through, {live} files live"


def _binary(fd: int) -> bool:
    try:
        return holds_binary(fd)
    except OSError:
        return False  # the daemon's read will say what is wrong


def _stamp(fd: int) -> tuple[int, int, int]:
    st = os.fstat(fd)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns
