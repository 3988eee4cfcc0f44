"""Low-level file helpers: durable saves, reflink and copy, blake3 hashing.

Everything here works on plain paths and file descriptors and knows nothing of
the store.  Functions are blocking; async callers run them in a thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import logging
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import blake3

log = logging.getLogger(__name__)

# linux/fs.h: _IOW(0x94, 9, int)
FICLONE = 0x40049409
# linux/fs.h: _IOW(0x94, 13, struct file_clone_range)
FICLONERANGE = 0x4020940D
_CLONE_RANGE = struct.Struct("=qQQQ")  # src_fd, src_offset, src_length, dest_offset

# Reading a file below this size in one go is cheaper than any setup.
SMALL_FILE = 4 * 1024 * 1024
# Chunk size for reads of big files: large enough that blake3 can spread one
# update() over several threads, small enough to bound memory.
CHUNK = 16 * 1024 * 1024

# FICLONE answers these when the filesystem pair cannot share extents; the
# caller then copies.  Anything else (EBADF, EIO, ENOSPC...) is a real error.
_NO_REFLINK = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EINVAL, errno.ENOTTY})
# copy_file_range / sendfile answers meaning "not for this pair of files": try
# the next, more general method instead.
_NO_FAST_COPY = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})


def open_dir_noatime(path: str | os.PathLike[str]) -> int:
    """A directory's fd for the engine's own listings: O_NOATIME, so scans
    and the change feed do not move the access time a user's stat shows
    (under relatime a listing would).  Falls back where NOATIME is refused."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return os.open(path, flags | os.O_NOATIME)
    except PermissionError:
        return os.open(path, flags)


@contextlib.contextmanager
def scan_dir(path: str | os.PathLike[str]) -> Iterator[Iterator[os.DirEntry[str]]]:
    """``os.scandir`` of ``path`` that leaves its access time alone (an
    ``OSError`` from opening it is raised at entry)."""
    fd = open_dir_noatime(path)
    try:
        with os.scandir(fd) as it:
            yield it
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (a new or renamed name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written (it may write less)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def save_file(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically and durably.

    Readers see either the old file or the whole new one, also after a crash:
    the bytes go to a temp file in the same directory, are fsynced, renamed over
    ``path``, and the directory is fsynced so the rename itself survives.  On
    failure the temp file is removed and ``path`` is untouched.
    """
    target = Path(path)
    directory = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        try:
            os.fchmod(fd, mode)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def reflink(src_fd: int, dst_fd: int) -> bool:
    """Make ``dst_fd`` share ``src_fd``'s extents (copy-on-write clone).

    True when cloned; False when the filesystem cannot (then copy instead).
    Other errors are raised.
    """
    return _clone(dst_fd, FICLONE, src_fd)


def reflink_range(src_fd: int, offset: int, length: int, dst_fd: int, dst_offset: int) -> bool:
    """Make ``length`` bytes of ``dst_fd`` at ``dst_offset`` share the
    extents of ``src_fd`` at ``offset`` (FICLONERANGE).  Offsets must be
    block-aligned, and ``length`` too unless the range ends at the end of
    ``src_fd``.  True when cloned; False when the file systems cannot (or
    the range is not aligned for them: EINVAL).  Other errors are raised."""
    return _clone(dst_fd, FICLONERANGE, _CLONE_RANGE.pack(src_fd, offset, length, dst_offset))


def _clone(dst_fd: int, request: int, arg: int | bytes) -> bool:
    try:
        fcntl.ioctl(dst_fd, request, arg)
    except OSError as exc:
        if exc.errno in _NO_REFLINK:
            return False
        raise
    return True


# linux/falloc.h: the fallocate(2) modes the mount serves (mode 0 allocates).
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_libc.fallocate.restype = ctypes.c_int


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    """fallocate(2) with its ``mode`` (``os.posix_fallocate`` has none)."""
    while _libc.fallocate(fd, mode, offset, length) != 0:
        err = ctypes.get_errno()
        if err != errno.EINTR:
            raise OSError(err, f"fallocate: {os.strerror(err)}")


def fallocate_changes(mode: int, offset: int, length: int, size: int) -> bool:
    """Whether fallocate(2) with ``mode`` over ``[offset, offset + length)`` of
    a file of ``size`` bytes changes what it reads as: a hole punched or a
    range zeroed (bytes), or the size grown.  An allocation within the size
    changes nothing a read sees."""
    if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
        return True
    return not mode & FALLOC_FL_KEEP_SIZE and offset + length > size


def data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The ``(start, end)`` ranges of ``fd`` below ``size`` that hold data
    (SEEK_DATA / SEEK_HOLE); one range of everything where the filesystem
    cannot tell.  What lies between them reads as zeros."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # nothing but a hole up to the end
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                yield pos, size
                return
            raise
        if start >= size:
            return
        end = min(end, size)
        yield start, end
        pos = end


def copy_fd(src_fd: int, dst_fd: int) -> int:
    """Copy all of ``src_fd`` (from offset 0) to ``dst_fd`` (an empty file),
    holes as holes: only the data extents are copied, and the copy is
    truncated up to the source's size.

    Each extent goes by ``copy_file_range`` (in-kernel, server-side or
    reflinked where the filesystem can), else ``sendfile``, else plain reads
    and writes.  Neither descriptor's file position is relied on.  Returns
    the size of the copy.
    """
    size = os.fstat(src_fd).st_size
    for start, end in data_extents(src_fd, size):
        _copy_range(src_fd, dst_fd, start, end)
    os.ftruncate(dst_fd, size)  # the trailing hole, if any
    return size


def _copy_range(src_fd: int, dst_fd: int, start: int, end: int) -> None:
    offset = start
    try:
        while offset < end:
            n = os.copy_file_range(src_fd, dst_fd, min(CHUNK, end - offset), offset, offset)
            if n == 0:
                return  # the source shrank
            offset += n
        return
    except OSError as exc:
        if exc.errno not in _NO_FAST_COPY:
            raise
        log.debug("copy_file_range unavailable (%s), falling back", exc)
    os.lseek(dst_fd, offset, os.SEEK_SET)
    try:
        while offset < end:
            n = os.sendfile(dst_fd, src_fd, offset, min(CHUNK, end - offset))
            if n == 0:
                return
            offset += n
        return
    except OSError as exc:
        if exc.errno not in _NO_FAST_COPY:
            raise
        log.debug("sendfile unavailable (%s), falling back", exc)
    while offset < end:
        chunk = os.pread(src_fd, min(CHUNK, end - offset), offset)
        if not chunk:
            return
        write_all_at(dst_fd, chunk, offset)
        offset += len(chunk)


def write_all_at(fd: int, data: bytes, offset: int) -> None:
    """``os.pwrite`` until every byte is written."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def hash_bytes(data: bytes | memoryview) -> str:
    """blake3 of ``data`` as lowercase hex."""
    return blake3.blake3(data).hexdigest()


def _new_hasher() -> blake3.blake3:
    return blake3.blake3(max_threads=blake3.blake3.AUTO)


def hash_fd(fd: int) -> str:
    """blake3 of the whole file behind ``fd`` (from offset 0 to EOF, whatever
    the file position), as lowercase hex.

    Reads, never maps: a file truncated while mapped raises SIGBUS, which would
    kill the daemon, and a descriptor usually points at a live user file.
    Holes (SEEK_HOLE) are hashed as the zeros they read as, without reading
    them: a sparse file costs what it holds, plus hashing the zeros.
    """
    # Ask for what the file holds (one byte more, to see its end), never
    # SMALL_FILE regardless: a 4 MiB buffer shrunk to a small file's size
    # on every close leaves glibc's heaps holding megabytes per thread.
    want = min(os.fstat(fd).st_size, SMALL_FILE) + 1
    head = os.pread(fd, want, 0)
    if len(head) < want:
        return hash_bytes(head)  # the whole file
    hasher = _new_hasher()
    hasher.update(head)
    offset = len(head)
    size = max(os.fstat(fd).st_size, offset)
    while True:
        hole = _next_hole(fd, offset, size)
        if hole is not None:
            start, end = hole
            if start == offset:
                hash_zeros(hasher, end - start)
                offset = end
                continue
            want = min(CHUNK, start - offset)
        else:
            want = CHUNK
        chunk = os.pread(fd, want, offset)
        if not chunk:
            return hasher.hexdigest()
        hasher.update(chunk)
        offset += len(chunk)


# Holes are hashed from a read-only anonymous mapping: every page of it is
# the kernel's shared zero page, so it costs no memory however long it is,
# and blake3 reads the same 4 KiB over and over from the CPU's cache instead
# of streaming a real buffer through memory.  Long enough that one update()
# spreads over every thread blake3 may use.
_ZERO_MAP_LEN = 64 * 1024 * 1024
_zero_view: memoryview | None = None
_zero_lock = threading.Lock()


def _zeros() -> memoryview:
    global _zero_view
    if _zero_view is None:
        with _zero_lock:
            if _zero_view is None:
                try:
                    m = mmap.mmap(
                        -1,
                        _ZERO_MAP_LEN,
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                        prot=mmap.PROT_READ,
                    )
                    _zero_view = memoryview(m)
                except (OSError, ValueError, AttributeError):
                    _zero_view = memoryview(bytes(4 * 1024 * 1024))  # no such mapping here
    return _zero_view


def hash_zeros(hasher: blake3.blake3, n: int) -> None:
    """Feed ``hasher`` ``n`` zero bytes (a hole) without reading or
    allocating them."""
    zeros = _zeros()
    while n > 0:
        step = min(n, len(zeros))
        hasher.update(zeros[:step])
        n -= step


def _next_hole(fd: int, offset: int, size: int) -> tuple[int, int] | None:
    """The first hole at or after ``offset`` as ``(start, end)``, ``end``
    capped at ``size`` (the size known when hashing began: bytes appended
    meanwhile are read, not assumed); None if there is none before ``size``
    or the filesystem cannot tell.  The hole is re-checked by the caller's
    read of what follows it, never trusted beyond ``size``."""
    if offset >= size:
        return None
    try:
        start = os.lseek(fd, offset, os.SEEK_HOLE)
        if start >= size:
            return None
        try:
            end = os.lseek(fd, start, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            end = size  # a hole to the end of the file
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENXIO, errno.EOPNOTSUPP):
            return None
        raise
    return start, min(end, size)


def hash_file(path: str | os.PathLike[str], *, mmap: bool = True) -> str:
    """blake3 of the file at ``path`` as lowercase hex.

    Big files are memory-mapped and hashed on several threads when the blake3
    binding supports it.  Pass ``mmap=False`` for a file another process may
    truncate meanwhile (a mapped read past the new end is SIGBUS); blobs and
    other files only swfs writes are safe to map.  Unmapped, the read leaves
    the file's access time alone (``open_to_read``); a mapping moves it.
    """
    size = os.stat(path).st_size
    if mmap and size > SMALL_FILE and hasattr(blake3.blake3, "update_mmap"):
        hasher = _new_hasher()
        hasher.update_mmap(os.fspath(path))
        return hasher.hexdigest()
    fd = open_to_read(path)
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


TEXT_SNIFF = 8192  # bytes looked at to tell text from binary


def holds_binary(fd: int) -> bool:
    """Whether the file behind ``fd`` is binary by the access journal's rule: a NUL
    in its first ``TEXT_SNIFF`` bytes (text files get line ranges)."""
    return b"\0" in os.pread(fd, TEXT_SNIFF, 0)


def open_to_read(path: str | os.PathLike[str], flags: int = 0) -> int:
    """Open a workspace file for the engine to read without moving its access
    time: looking at a file must not change what ``stat`` says of it.
    O_NOATIME is the owner's (or root's) right; anyone else reads it the
    ordinary way."""
    return without_atime(lambda f: os.open(path, f), os.O_RDONLY | os.O_CLOEXEC | flags)


def reopen_to_read(fd: int) -> int:
    """A new read-only descriptor of the file ``fd`` is open on (which may be
    open for writing only, and may have no name left), as ``open_to_read``
    opens one: through ``/proc/self/fd``, which names the open file itself."""
    return open_to_read(f"/proc/self/fd/{fd}")


def without_atime(opener: Callable[[int], int], flags: int) -> int:
    """``opener(flags | O_NOATIME)``, or ``opener(flags)`` where the caller
    may not ask that (EPERM: neither the file's owner nor root)."""
    try:
        return opener(flags | os.O_NOATIME)
    except PermissionError as exc:
        if exc.errno != errno.EPERM:
            raise
        return opener(flags)
