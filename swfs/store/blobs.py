"""The content-addressed blob store: preserved bytes of recorded versions.

A blob is named by the blake3 of the whole file it keeps, as before; it is
stored as a *manifest* listing content-defined chunks (FastCDC), each named by
its own blake3 and compressed with zstd, the way borg and restic keep
backups.  A version that differs from the last by one byte costs the one or
two chunks around that byte plus a manifest, not a second copy.  Holes (and
runs of zeros a whole chunk long) are stored as nothing at all.

Layout under ``root``::

    manifests/ab/cdef0123...  the manifest of the blob whose blake3 is
                              ``abcdef0123...`` (64 hex; two-hex fan-out)
    chunks/ab/cdef0123...     a chunk whose *uncompressed* bytes hash to
                              ``abcdef0123...``
    ab/cdef0123...            a whole-file blob of the format before chunks:
                              chunked when the store is opened
                              (``swfs.store.upgrade``); never read here
    cache/<hash>              a blob reassembled for readers that need a
                              path (the daemon's ``.versions``); disposable
    tmp/<pid>-<rand>          a file being written; linked into place when complete
    lock                      flock: writers hold it shared, ``collect()``
                              exclusive

Chunk file: one codec byte, then the payload: ``z`` a zstd frame, ``r`` the
raw bytes (when zstd would not make them smaller), ``c`` the raw bytes from
offset ``CLONE_AT`` (a block boundary) on, sharing the extents of the
workspace file they were cloned from (``clone_fd``, on xfs and btrfs).

Manifest file (little-endian)::

    b"SWFSMAN1"  u64 size  u32 count
    count x ( u64 offset  u32 length  u8 kind  ... )
        kind 0 (chunk):  32-byte blake3 digest of the chunk
        kind 1 (inline): u32 n, n bytes of a chunk file's content (codec byte
                         first): small files live in their manifest
    entries are sorted by offset and do not overlap; any byte not covered by
    an entry is zero (a hole)

Invariants (``swfs.check`` relies on them):

- A file under its final name holds exactly what its name says (a chunk's
  bytes, a manifest of a blob with that hash); it was complete and fsynced
  before a link made it visible (inside a ``deferring_syncs`` block: before
  the block ends, while its bytes have another durable copy).  Nothing is
  rewritten.
- Every chunk a manifest names was fsynced and linked before the manifest
  was: a crash leaves at most chunks nobody names, which ``collect()`` drops.
  One write's chunks wait complete in ``tmp/`` while their fsyncs run in a
  pool of threads (the file system then commits them together, not one
  journal transaction per chunk); they are linked once all are durable.
- Only ``tmp/`` may hold partial files; ``cleanup_temp()`` removes those left
  by a process that died.  ``cache/`` may be emptied at any time.

Removing a blob (``remove``) drops its manifest only; ``collect()`` then
deletes the chunks no manifest names (mark and sweep under the exclusive
lock, so no writer is between storing a chunk and naming it).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import blake3
import pyfastcdc
import zstandard

from swfs.api import Hash
from swfs.store.fsutil import (
    fsync_dir,
    hash_bytes,
    hash_fd,
    hash_zeros,
    open_to_read,
    reflink_range,
    write_all,
    write_all_at,
)
from swfs.store.upgrade import Fault, chunk_whole_file_blobs, has_whole_file_blobs

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

BLOB_MODE = 0o400
DIR_MODE = 0o700
TMP_DIR = "tmp"
MANIFEST_DIR = "manifests"
CHUNK_DIR = "chunks"
CACHE_DIR = "cache"
LOCK_FILE = "lock"

# FastCDC sizes.  Restic cuts 512 KiB..8 MiB and borg around 2 MiB for
# backups of whole trees; a workspace's versions are many small edits of the
# same files, so smaller chunks keep the cost of a one-byte edit low (one or
# two chunks of ~160 KiB, the average FastCDC gives for avg 128K + min 32K)
# while a 1 GiB file still needs fewer than 10,000 chunk files.
CHUNK_MIN = 32 * 1024
CHUNK_AVG = 128 * 1024
CHUNK_MAX = 512 * 1024
# Files up to this size are kept inside their manifest: one file per version
# instead of a manifest and a chunk, each a filesystem block at least.
INLINE_MAX = CHUNK_MIN
ZSTD_LEVEL = 3
# clone_fd's grid: a cloned chunk costs a file and an fsync but no copy, so
# its pieces are larger than FastCDC's; block-aligned, as FICLONERANGE wants.
# Files up to CLONE_MIN are chunked (put_fd): a clone's block of header per
# chunk and its fsync cost more than copying a few chunks.
CLONE_CHUNK = 4 * 1024 * 1024
CLONE_MIN = 1024 * 1024
# Threads that fsync one write's chunks together (``_link_pending``), or
# clone pieces of a file (``clone_fd``, CLONE_WINDOW pieces at a time).
FSYNC_THREADS = 16
CLONE_WINDOW = 4
# Reads of a data extent go this far at a time: memory stays flat whatever
# the file's size.
READ_SIZE = 4 * 1024 * 1024
# verify(deep=False) reassembles blobs up to this size anyway.
SHALLOW_MAX = 4 * 1024 * 1024
# Reassembled blobs kept for readers needing a path; older unused ones go.
CACHE_BYTES = 1 << 30
CACHE_KEEP_SECS = 120.0
CACHE_RESCAN = 1024  # additions between scans of cache/ while under CACHE_BYTES

_MAGIC = b"SWFSMAN1"
_HEAD = struct.Struct("<8sQI")
_ENTRY = struct.Struct("<QIB")
_INLINE_LEN = struct.Struct("<I")
_KIND_CHUNK = 0
_KIND_INLINE = 1
_CODEC_ZSTD = b"z"
_CODEC_RAW = b"r"
# A chunk cloned from a workspace file (``clone_fd``): its bytes start at
# CLONE_AT, a block boundary, so that they can share the file's extents.
_CODEC_CLONE = b"c"
CLONE_AT = 4096
_ZEROS = bytes(max(CHUNK_MAX, READ_SIZE))
_ZVIEW = memoryview(_ZEROS)

_HASH_RE = re.compile(r"[0-9a-f]{64}")
_FANOUT_RE = re.compile(r"[0-9a-f]{2}")
_REST_RE = re.compile(r"[0-9a-f]{62}")
# Hard links that cannot be made for reasons other than a bug: a filesystem
# without them, too many links, protected_hardlinks.
_NO_LINK = frozenset({errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP})


class HashMismatch(Exception):
    """The bytes stored are not the bytes the caller said they were."""

    def __init__(self, *, expected: str, actual: str, source: str) -> None:
        super().__init__(f"{source}: expected blake3 {expected[:16]}..., got {actual[:16]}...")
        self.expected = expected
        self.actual = actual
        self.source = source


class CorruptBlob(OSError):
    """A stored chunk or manifest does not hold what its name says (EIO)."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EIO, f"corrupt blob store: {what}")


def check_hash(h: str) -> Hash:
    """``h`` if it is a well-formed blob name; a path must never come from
    anything else (no '..', no '/')."""
    if not _HASH_RE.fullmatch(h):
        raise ValueError(f"not a blake3 hex digest: {h!r}")
    return Hash(h)


@dataclass(frozen=True)
class Extent:
    """One manifest entry: ``length`` bytes at ``offset``, from chunk
    ``chunk`` (hex) or from ``inline`` (a chunk file's content)."""

    offset: int
    length: int
    chunk: str | None = None
    inline: bytes | None = None


@dataclass(frozen=True)
class Manifest:
    size: int
    extents: tuple[Extent, ...]

    def encode(self) -> bytes:
        parts = [_HEAD.pack(_MAGIC, self.size, len(self.extents))]
        for e in self.extents:
            if e.chunk is not None:
                parts.append(_ENTRY.pack(e.offset, e.length, _KIND_CHUNK))
                parts.append(bytes.fromhex(e.chunk))
            else:
                assert e.inline is not None
                parts.append(_ENTRY.pack(e.offset, e.length, _KIND_INLINE))
                parts.append(_INLINE_LEN.pack(len(e.inline)))
                parts.append(e.inline)
        return b"".join(parts)

    @classmethod
    def decode(cls, raw: bytes, what: str) -> Manifest:
        try:
            magic, size, count = _HEAD.unpack_from(raw, 0)
            if magic != _MAGIC:
                raise ValueError("bad magic")
            pos = _HEAD.size
            extents = []
            end = 0
            for _ in range(count):
                offset, length, kind = _ENTRY.unpack_from(raw, pos)
                pos += _ENTRY.size
                if offset < end or offset + length > size or length == 0:
                    raise ValueError("extents out of order")
                end = offset + length
                if kind == _KIND_CHUNK:
                    digest = raw[pos : pos + 32]
                    if len(digest) != 32:
                        raise ValueError("truncated")
                    extents.append(Extent(offset, length, chunk=digest.hex()))
                    pos += 32
                elif kind == _KIND_INLINE:
                    (n,) = _INLINE_LEN.unpack_from(raw, pos)
                    pos += _INLINE_LEN.size
                    data = raw[pos : pos + n]
                    if len(data) != n:
                        raise ValueError("truncated")
                    extents.append(Extent(offset, length, inline=data))
                    pos += n
                else:
                    raise ValueError(f"unknown entry kind {kind}")
            if pos != len(raw):
                raise ValueError("trailing bytes")
        except (struct.error, ValueError) as exc:
            raise CorruptBlob(f"{what}: bad manifest ({exc})") from None
        return cls(size, tuple(extents))

    def chunks(self) -> Iterator[str]:
        for e in self.extents:
            if e.chunk is not None:
                yield e.chunk


def _pack_chunk(data: bytes | memoryview) -> bytes:
    packed = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    if len(packed) < len(data):
        return _CODEC_ZSTD + packed
    return _CODEC_RAW + bytes(data)


def _unpack_chunk(raw: bytes, length: int, what: str, *, exact: bool = True) -> bytes:
    codec, payload = raw[:1], raw[1:]
    if codec == _CODEC_CLONE:
        data = raw[CLONE_AT:]
    elif codec == _CODEC_RAW:
        data = payload
    elif codec == _CODEC_ZSTD:
        try:
            data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=length)
        except zstandard.ZstdError as exc:
            raise CorruptBlob(f"{what}: {exc}") from None
    else:
        raise CorruptBlob(f"{what}: unknown codec {codec!r}")
    if len(data) != length if exact else len(data) > length:
        raise CorruptBlob(f"{what}: {len(data)} bytes, expected {length}")
    return data


class _ExtentReader:
    """``readinto`` over ``[start, end)`` of a descriptor, for FastCDC's
    stream cutter; stops early (short) if the file shrinks meanwhile."""

    def __init__(self, fd: int, start: int, end: int) -> None:
        self.fd, self.pos, self.end = fd, start, end

    def readinto(self, buf: memoryview) -> int:
        want = min(len(buf), self.end - self.pos, READ_SIZE)
        if want <= 0:
            return 0
        n = os.preadv(self.fd, [buf[:want]], self.pos)
        self.pos += n
        return n


class BlobReader:
    """Random access to one blob's bytes (``pread``), reassembled from its
    chunks; each chunk is checked against its hash as it is read."""

    def __init__(self, store: BlobStore, h: Hash, manifest: Manifest) -> None:
        self.store, self.hash, self.manifest = store, h, manifest
        self.size = manifest.size
        self._starts = [e.offset for e in manifest.extents]
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    def _extent_bytes(self, i: int) -> bytes:
        data = self._cache.get(i)
        if data is None:
            data = self.store._extent_bytes(self.manifest.extents[i], self.hash)
            self._cache[i] = data
            if len(self._cache) > 4:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(i)
        return data

    def pread(self, size: int, offset: int) -> bytes:
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        out = bytearray(end - offset)  # zeros: holes need no writing
        i = max(0, bisect.bisect_right(self._starts, offset) - 1)
        extents = self.manifest.extents
        while i < len(extents) and extents[i].offset < end:
            e = extents[i]
            lo, hi = max(offset, e.offset), min(end, e.offset + e.length)
            if lo < hi:
                data = self._extent_bytes(i)
                out[lo - offset : hi - offset] = data[lo - e.offset : hi - e.offset]
            i += 1
        return bytes(out)


@dataclass
class _Piece:
    """One grid piece of a file ``clone_fd`` keeps: ``data`` None for a
    hole; ``tmp`` the chunk temp holding it (None: nothing to store)."""

    pos: int
    length: int
    data: bytes | None = None
    tmp: Path | None = None
    name: str = ""
    declined: bool = False
    error: BaseException | None = None


class _NewChunks(set[str]):
    """The chunks one write stores, and ``pending``: those written to a
    complete temp, not yet linked (``_link_pending``), and ``syncs``: the
    fsyncs of those temps under way in the pool."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[str, Path] = {}
        self.syncs: list[Future[None]] = []


def _piecewise_hasher() -> blake3.blake3:
    """A hasher fed a chunk (~160 KiB) at a time: one thread.  Spreading
    pieces that small over threads made hashing seven times slower."""
    return blake3.blake3()


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class CollectStats:
    chunks_kept: int = 0
    chunks_removed: int = 0
    bytes_removed: int = 0


class BlobStore:
    """Blobs under ``root``; see the module docstring for the layout."""

    def __init__(self, root: Path, *, upgrade_fault: Fault | None = None) -> None:
        """``upgrade_fault``: called at each step of chunking whole-file
        blobs of the old format (``swfs.store.upgrade``); a test raises
        from it."""
        self.root = Path(root)
        self.tmp = self.root / TMP_DIR
        self.manifests = self.root / MANIFEST_DIR
        self.chunks = self.root / CHUNK_DIR
        self.cache = self.root / CACHE_DIR
        self.root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        for d in (self.tmp, self.manifests, self.chunks, self.cache):
            d.mkdir(mode=DIR_MODE, exist_ok=True)
        self._lock_path = self.root / LOCK_FILE
        self._cache_lock = threading.Lock()
        self._no_clone: set[int] = set()  # st_dev of files clone_fd cannot reflink here
        self._pool: ThreadPoolExecutor | None = None  # fsyncs of a batch of chunks
        self._pool_lock = threading.Lock()
        # The cache's size as of the last scan plus what was added here since
        # (None: not scanned yet); a scan only when that passes the limit, or
        # every CACHE_RESCAN additions (other processes add to it too).
        self._cache_used: int | None = None
        self._cache_added = 0
        self.cache_scans = 0
        # The fsyncs a thread's ``deferring_syncs`` block owes (``_pending``).
        self._local = threading.local()
        self.upgraded = 0  # whole-file blobs this open chunked
        if has_whole_file_blobs(self.root):
            self.upgraded = chunk_whole_file_blobs(
                self, is_mismatch=lambda exc: isinstance(exc, HashMismatch), fault=upgrade_fault
            )

    # -- names

    def manifest_path(self, h: str) -> Path:
        h = check_hash(h)
        return self.manifests / h[:2] / h[2:]

    def chunk_path(self, c: str) -> Path:
        c = check_hash(c)
        return self.chunks / c[:2] / c[2:]

    def path(self, h: str) -> Path:
        """The file that stores blob ``h``: its manifest.  Not its bytes:
        use ``readable_path`` or ``open``."""
        return self.manifest_path(h)

    # -- reading

    def has(self, h: str) -> bool:
        return self.manifest_path(h).is_file()

    def manifest(self, h: str) -> Manifest:
        """Blob ``h``'s manifest.  FileNotFoundError if not stored,
        CorruptBlob if unreadable."""
        raw = self.manifest_path(h).read_bytes()
        return Manifest.decode(raw, f"manifest {h[:16]}")

    def reader(self, h: str) -> BlobReader:
        """A ``pread`` reader of blob ``h`` (FileNotFoundError if not stored)."""
        h = check_hash(h)
        return BlobReader(self, h, self.manifest(h))

    def readable_path(self, h: str) -> Path:
        """A path of a file holding exactly blob ``h``'s bytes, for readers
        that need one (the daemon serves ``.versions`` from it): the blob
        reassembled into ``cache/`` (sparse where the blob has holes,
        checked against ``h``).  FileNotFoundError if not stored."""
        h = check_hash(h)
        cached = self.cache / h
        with contextlib.suppress(FileNotFoundError):
            os.utime(cached)  # used now: not evicted soon
            return cached
        m = self.manifest(h)
        self._materialise(h, m, cached)
        self._trim_cache(keep=h, added=cached)
        return cached

    def lazy_path(self, h: str) -> Path:
        """Where ``readable_path(h)`` is or will be, without reassembling
        anything: hand it out cheaply, then open it with ``open_path``."""
        return self.cache / check_hash(h)

    def readable_path_of(self, path: str | os.PathLike[str]) -> Path:
        """``path`` (from ``lazy_path``, or any other) made readable."""
        p = Path(path)
        if p.parent == self.cache and _HASH_RE.fullmatch(p.name):
            return self.readable_path(p.name)
        return p

    def open_path(self, path: str | os.PathLike[str]) -> int:
        """A read-only descriptor on ``path`` (from ``lazy_path``), its blob
        reassembled first if need be; any other path is simply opened."""
        return os.open(self.readable_path_of(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)

    def open(self, h: str) -> int:
        """A read-only descriptor on blob ``h``'s bytes (the caller closes it).
        FileNotFoundError if it is not stored."""
        return os.open(self.readable_path(h), os.O_RDONLY | os.O_CLOEXEC)

    def read_bytes(self, h: str) -> bytes:
        r = self.reader(h)
        return r.pread(r.size, 0)

    def size(self, h: str) -> int:
        """Blob ``h``'s size in bytes (FileNotFoundError if not stored)."""
        fd = os.open(self.manifest_path(h), os.O_RDONLY | os.O_CLOEXEC)
        try:
            head = os.pread(fd, _HEAD.size, 0)
        finally:
            os.close(fd)
        try:
            magic, size, _count = _HEAD.unpack(head)
        except struct.error:
            magic = None
        if magic != _MAGIC:
            raise CorruptBlob(f"manifest {h[:16]}: bad header")
        return int(size)

    def verify(self, h: str, *, deep: bool = True) -> bool:
        """True if blob ``h`` exists and its bytes hash to ``h``.  With
        ``deep=False`` a big blob made of chunks only is checked to parse and
        to name chunks that exist (``bad_chunks`` checks their bytes once,
        however many versions share them)."""
        try:
            m = self.manifest(h)
            if not deep and m.size > SHALLOW_MAX and all(e.inline is None for e in m.extents):
                return all(self.chunk_path(c).is_file() for c in m.chunks())
            hasher = _piecewise_hasher()
            for piece in self._iter_bytes(Hash(h), m):
                hasher.update(piece)
            return hasher.hexdigest() == h
        except (FileNotFoundError, CorruptBlob):
            return False

    def missing_chunks(self, h: str) -> list[str]:
        """The chunks blob ``h``'s manifest names that are not stored."""
        try:
            m = self.manifest(h)
        except (FileNotFoundError, CorruptBlob):
            return []
        return [c for c in dict.fromkeys(m.chunks()) if not self.chunk_path(c).is_file()]

    def iter_hashes(self) -> Iterator[Hash]:
        """Every stored blob, in no particular order."""
        yield from _iter_fanout(self.manifests)

    def iter_chunks(self) -> Iterator[Hash]:
        yield from _iter_fanout(self.chunks)

    def bad_chunks(self) -> Iterator[tuple[Hash, str]]:
        """Chunks whose bytes do not hash to their name, with the reason."""
        for c in self.iter_chunks():
            try:
                raw = self.chunk_path(c).read_bytes()
                data = _unpack_chunk(raw, CLONE_CHUNK, f"chunk {c[:16]}", exact=False)
            except FileNotFoundError:
                continue  # collected meanwhile
            except CorruptBlob as exc:
                yield c, str(exc.strerror)
                continue
            except ValueError:
                # zstd refused to fit the frame into CHUNK_MAX: too long.
                yield c, "longer than any chunk"
                continue
            if hash_bytes(data) != c:
                yield c, "content does not match its hash"

    def total_bytes(self) -> int:
        """Bytes the store occupies on disk (allocated blocks of manifests
        and chunks; the disposable cache not counted)."""
        total = 0
        for d in (self.manifests, self.chunks):
            for h in _iter_fanout(d):
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(d / h[:2] / h[2:]).st_blocks * 512
        return total

    # -- writing

    def put_bytes(self, data: bytes) -> Hash:
        """Store ``data``; its hash."""
        h = Hash(hash_bytes(data))
        if self.has(h):
            return h
        with self._writing() as new_chunks:
            extents = tuple(self._chunk_buffer(memoryview(data), 0, new_chunks, inline=True))
            self._commit_manifest(h, Manifest(len(data), extents), new_chunks)
        return h

    def clone_fd(self, fd: int, *, expected: str) -> bool:
        """Keep the file behind ``fd`` as blob ``expected``, chunked like any
        other, where the store's file system shares extents with the file's
        (xfs, btrfs): each ``CLONE_CHUNK`` piece on a fixed grid is a chunk
        file that shares the piece's extents (FICLONERANGE), not a copy, so
        the first write into a large recorded file copies only the blocks
        it changes (the file system's copy on write), and the blob is read,
        checked and collected like any other.  The pieces are still read
        once, to name them.  False, nothing stored, where it cannot (ext4,
        another file system): ``put_fd`` then.  HashMismatch (nothing
        stored) if the clone does not hold ``expected``."""
        if self.has(expected):
            return True
        st = os.fstat(fd)
        if st.st_dev in self._no_clone or st.st_size <= CLONE_MIN:
            return False
        size = st.st_size
        grid = range(0, size, CLONE_CHUNK)
        with self._writing() as new_chunks:
            hasher = _piecewise_hasher()
            extents: list[Extent] = []
            cloned = False
            for i in range(0, len(grid), CLONE_WINDOW):
                # A few pieces at a time in the pool: cloning and reading
                # back wait on the disk; hashing in order stays here.
                batch = self._map(
                    lambda pos: self._clone_piece(fd, pos, size), grid[i : i + CLONE_WINDOW]
                )
                try:
                    for p in batch:
                        if p.error is not None:
                            raise p.error
                        if p.declined and not cloned:
                            self._no_clone.add(st.st_dev)  # asked once per file system
                            return False
                        if p.declined:  # past the end: the file shrank meanwhile
                            raise HashMismatch(
                                expected=expected, actual=hasher.hexdigest(), source=f"fd {fd}"
                            )
                        if p.data is None:
                            _hash_zeros(hasher, p.length)  # a hole: stored as nothing
                            continue
                        cloned = True
                        hasher.update(p.data)
                        if p.tmp is None:
                            continue  # zeros (stored as nothing), or short: a mismatch below
                        c, tmp, p.tmp = p.name, p.tmp, None
                        if c in new_chunks or self.chunk_path(c).is_file():
                            self._discard(tmp)
                        else:
                            new_chunks.pending[c] = tmp
                            new_chunks.add(c)
                        extents.append(Extent(p.pos, p.length, chunk=c))
                finally:
                    for p in batch:
                        if p.tmp is not None:
                            self._discard(p.tmp)
            actual = hasher.hexdigest()
            if actual != expected:
                raise HashMismatch(expected=expected, actual=actual, source=f"fd {fd}")
            if not self.manifest_path(expected).is_file():
                self._commit_manifest(Hash(expected), Manifest(size, tuple(extents)), new_chunks)
        return True

    def _clone_piece(self, fd: int, pos: int, size: int) -> _Piece:
        """Clone the grid piece of ``fd`` at ``pos`` into a chunk temp
        (codec ``c``: the bytes from ``CLONE_AT``) and read it back, so that
        the name is that of what the chunk holds whatever ``fd`` does
        meanwhile.  Never raises (a pool thread): errors come back in the
        piece, its temp removed."""
        p = _Piece(pos, min(CLONE_CHUNK, size - pos))
        tmp = None
        try:
            if _seek(fd, pos, os.SEEK_DATA, size) >= pos + p.length:
                return p  # a hole
            tmp, dst = self._new_temp()
            try:
                os.pwrite(dst, _CODEC_CLONE, 0)
                if not reflink_range(fd, pos, p.length, dst, CLONE_AT):
                    p.declined = True
                    self._discard(tmp)
                    return p
                p.data = os.pread(dst, p.length + 1, CLONE_AT)
                if len(p.data) != p.length or _is_zero(memoryview(p.data)):
                    self._discard(tmp)  # short (it shrank), or zeros
                    return p
                os.fchmod(dst, BLOB_MODE)
                os.fsync(dst)  # here, in the pool, beside the other pieces' clones
            finally:
                os.close(dst)
            p.name, p.tmp = hash_bytes(p.data), tmp
        except BaseException as exc:
            if tmp is not None:
                self._discard(tmp)
            p.error, p.tmp = exc, None
            try:
                _reraise_naming(exc, tmp or self.tmp)
            except OSError as named:
                p.error = named
        return p

    def put_fd(self, fd: int, *, expected: str | None = None) -> Hash:
        """Store the whole file behind ``fd`` (from offset 0), chunked; holes
        are read as nothing.  The hash is taken of the bytes chunked, so a
        source that changes meanwhile cannot give a blob a wrong name.
        HashMismatch (no blob stored) if ``expected`` is given and differs.

        If blob ``expected`` is already stored, nothing is read and
        ``expected`` is returned: the caller's question, "are these bytes
        kept?", is answered, and preserving before every in-place write stays
        cheap.  Hash ``fd`` separately to learn whether it still holds them."""
        if expected is not None and self.has(expected):
            return Hash(expected)
        return self._put_fd(fd, expected=expected, source=f"fd {fd}")

    def link_in(self, path: Path, *, expected: str | None = None) -> Hash:
        """Keep the bytes of ``path``, a workspace file about to be unlinked
        or renamed over, and return their hash.  HashMismatch (nothing
        stored) if ``expected`` is given and the file does not hold those
        bytes; call again without ``expected`` to keep whatever it holds.

        The bytes are chunked like any other (a hard link to the inode, as
        the store once made, would keep a full copy of every version)."""
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        fd = open_to_read(path, os.O_NOFOLLOW)
        try:
            if expected is not None and self.has(expected):
                # Nothing to store, but unlike put_fd say whether the file
                # still holds those bytes: after the unlink nobody can tell.
                actual = hash_fd(fd)
                if actual != expected:
                    raise HashMismatch(expected=expected, actual=actual, source=str(path))
                return Hash(expected)
            return self._put_fd(fd, expected=expected, source=str(path))
        finally:
            os.close(fd)

    def remove(self, h: str) -> None:
        """Forget blob ``h`` (no error if it is not there).  Its chunks stay
        until ``collect()`` finds that no other blob names them."""
        for p in (self.manifest_path(h), self.cache / check_hash(h)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def collect(self) -> CollectStats:
        """Delete the chunks no manifest names (mark and sweep).  Holds the
        exclusive lock, so no writer has a chunk stored and not yet named;
        a crash part way leaves only more unnamed chunks for the next run."""
        stats = CollectStats()
        with self._locked(fcntl.LOCK_EX):
            live: set[bytes] = set()
            for h in list(_iter_fanout(self.manifests)):
                try:
                    m = self.manifest(h)
                except FileNotFoundError:
                    continue
                except CorruptBlob:
                    # Cannot tell what it names: keep everything rather than
                    # guess (``swfs check`` reports the manifest).
                    log.warning("manifest %s unreadable: collecting nothing", h[:16])
                    return stats
                live.update(bytes.fromhex(c) for c in m.chunks())
            for c in list(self.iter_chunks()):
                if bytes.fromhex(c) in live:
                    stats.chunks_kept += 1
                    continue
                p = self.chunk_path(c)
                with contextlib.suppress(FileNotFoundError):
                    stats.bytes_removed += os.stat(p).st_blocks * 512
                    os.unlink(p)
                    stats.chunks_removed += 1
        if stats.chunks_removed:
            log.info(
                "collected %d unreferenced chunk(s), %d bytes",
                stats.chunks_removed,
                stats.bytes_removed,
            )
        return stats

    def cleanup_temp(self) -> int:
        """Remove temp files of writers that are gone (crashed or killed);
        the number removed.  Temps of live processes are left alone."""
        removed = 0
        for entry in os.scandir(self.tmp):
            if entry.is_dir(follow_symlinks=False):
                continue
            pid_part = entry.name.split("-", 1)[0]
            if pid_part.isdigit() and _alive(int(pid_part)):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
        if removed:
            log.info("removed %d leftover temp file(s) from %s", removed, self.tmp)
        return removed

    # -- internals: writing

    @contextlib.contextmanager
    def _locked(self, how: int) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, how)
            yield
        finally:
            os.close(fd)  # releases the lock

    @contextlib.contextmanager
    def _writing(self) -> Iterator[_NewChunks]:
        """The shared lock for one blob's chunks and manifest; on failure,
        the chunks this write added are dropped if nothing names them (and
        its temps not yet linked, always)."""
        new_chunks = _NewChunks()
        try:
            with self._locked(fcntl.LOCK_SH):
                yield new_chunks
        except BaseException as exc:
            if new_chunks:
                self._drop_unnamed(new_chunks)
            _reraise_naming(exc, self.root)
            raise
        finally:
            for tmp in new_chunks.pending.values():
                self._discard(tmp)

    def _drop_unnamed(self, chunks: set[str]) -> None:
        """After a failed write: delete those of ``chunks`` no manifest
        names, if the exclusive lock is free now (else ``collect()`` will)."""
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return
            for h in _iter_fanout(self.manifests):
                with contextlib.suppress(FileNotFoundError, CorruptBlob):
                    chunks.difference_update(self.manifest(h).chunks())
            for c in chunks:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.chunk_path(c))
        except OSError as exc:
            log.warning("could not drop the chunks of a failed write: %s", exc)
        finally:
            os.close(fd)

    def _put_fd(self, fd: int, *, expected: str | None, source: str) -> Hash:
        with self._writing() as new_chunks:
            hasher = _piecewise_hasher()
            extents: list[Extent] = []
            size = os.fstat(fd).st_size
            if size <= INLINE_MAX:
                data = os.pread(fd, INLINE_MAX + 1, 0)
                hasher.update(data)
                extents.extend(self._chunk_buffer(memoryview(data), 0, new_chunks, inline=True))
                size = len(data)
            else:
                size = self._chunk_fd(fd, size, hasher, extents, new_chunks)
            h = Hash(hasher.hexdigest())
            if expected is not None and h != expected:
                raise HashMismatch(expected=expected, actual=h, source=source)
            # Another writer may have stored it meanwhile.
            if not self.manifest_path(h).is_file():
                self._commit_manifest(h, Manifest(size, tuple(extents)), new_chunks)
        return h

    def _chunk_fd(
        self,
        fd: int,
        size: int,
        hasher: blake3.blake3,
        extents: list[Extent],
        new_chunks: _NewChunks,
    ) -> int:
        """Chunk the data extents of ``fd`` up to ``size``, hashing holes as
        the zeros they read as; the size actually covered (less if the file
        shrank meanwhile)."""
        pos = 0
        while pos < size:
            data_at = _seek(fd, pos, os.SEEK_DATA, size)
            if data_at > pos:
                _hash_zeros(hasher, data_at - pos)
                pos = data_at
            if pos >= size:
                break
            hole_at = min(_seek(fd, pos, os.SEEK_HOLE, size), size)
            cdc = pyfastcdc.FastCDC(CHUNK_AVG, min_size=CHUNK_MIN, max_size=CHUNK_MAX)
            reader = _ExtentReader(fd, pos, hole_at)
            for piece in cdc.cut_stream(reader):
                hasher.update(piece.data)
                extents.extend(self._chunk_buffer(piece.data, pos, new_chunks, inline=False))
                pos += piece.length
            if pos < hole_at:
                return pos  # shrank while read: what was read is the blob
        return size

    def _chunk_buffer(
        self, data: memoryview, offset: int, new_chunks: _NewChunks, *, inline: bool
    ) -> Iterator[Extent]:
        """Extents for ``data`` at ``offset``: inline (one small piece),
        nothing for zeros, else one stored chunk per FastCDC cut."""
        if not data:
            return
        if inline and len(data) <= INLINE_MAX:
            if not _is_zero(data):
                yield Extent(offset, len(data), inline=_pack_chunk(data))
            return
        if len(data) > CHUNK_MAX:
            cdc = pyfastcdc.FastCDC(CHUNK_AVG, min_size=CHUNK_MIN, max_size=CHUNK_MAX)
            for piece in cdc.cut_buf(data):
                yield from self._chunk_buffer(
                    piece.data, offset + piece.offset, new_chunks, inline=False
                )
            return
        if _is_zero(data):
            return  # a hole in the making
        c = hash_bytes(data)
        if c not in new_chunks and not self.chunk_path(c).is_file():
            self._store_chunk(c, _pack_chunk(data), new_chunks)
        yield Extent(offset, len(data), chunk=c)

    def _store_chunk(self, c: str, packed: bytes, new_chunks: _NewChunks) -> None:
        """Write chunk ``c`` to a temp, pending: ``_commit_manifest`` makes
        the pending chunks of a write durable in one batch, then links them."""
        tmp, fd = self._new_temp()
        try:
            deferred = self._pending()
            try:
                write_all(fd, packed)
                os.fchmod(fd, BLOB_MODE)
                if deferred is not None:
                    deferred.file(fd)
            finally:
                os.close(fd)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise
        new_chunks.pending[c] = tmp
        new_chunks.add(c)
        if deferred is None:
            # Durable while the next chunks are cut: _link_pending waits for it.
            new_chunks.syncs.append(self._executor().submit(_fsync_path, tmp))

    def _link_pending(self, new_chunks: _NewChunks) -> None:
        """Make the pending chunks durable, then give them their names, and
        make the names durable: fsyncs in parallel, so that the file system
        commits them in a few journal transactions, not one per chunk (on
        ext4 one fsync after another was two thirds of keeping a file)."""
        pending = new_chunks.pending
        for sync in new_chunks.syncs:
            sync.result()  # every pending temp was fsynced (clone pieces: by their clone)
        fans = {c[:2] for c in new_chunks}
        made = [fan for fan in fans if not (self.chunks / fan).is_dir()]
        for fan in made:
            (self.chunks / fan).mkdir(mode=DIR_MODE, exist_ok=True)
        if made:
            self._sync_dir(self.chunks)
        for c, tmp in list(pending.items()):
            self._link_into(tmp, self.chunk_path(c))
            del pending[c]
        # The chunks' names must be durable before a manifest names them.
        self._sync_dirs([self.chunks / fan for fan in fans])

    def _parallel(self, fn: Callable[[Path], object], paths: list[Path]) -> None:
        """``fn`` of each path, in the pool; the first error raised."""
        self._map(fn, paths)

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(x) for x in items]``, run in the pool when more than one."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        return list(self._executor().map(fn, items))

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="swfs-blobs")
            return self._pool

    def _commit_manifest(self, h: Hash, m: Manifest, new_chunks: _NewChunks) -> None:
        tmp, fd = self._new_temp()
        try:
            try:
                write_all(fd, m.encode())
                os.fchmod(fd, BLOB_MODE)
                # Its bytes become durable beside the chunks' names; it is
                # named only after them.
                deferred = self._pending()
                if deferred is not None:
                    deferred.file(fd)
                    self._link_pending(new_chunks)
                else:
                    synced = self._executor().submit(os.fsync, fd)
                    try:
                        self._link_pending(new_chunks)
                    finally:
                        synced.result()
            finally:
                os.close(fd)
            final = self.manifest_path(h)
            self._link_into(tmp, final)
            self._sync_dir(final.parent)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise

    def _temp_name(self) -> Path:
        # The pid lets cleanup_temp tell a live writer's temp from litter.
        return self.tmp / f"{os.getpid()}-{secrets.token_hex(8)}"

    def _new_temp(self) -> tuple[Path, int]:
        tmp = self._temp_name()
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_RDWR, 0o600)
        except OSError as exc:
            _reraise_naming(exc, tmp)
            raise
        return tmp, fd

    def _sync_dir(self, path: Path) -> None:
        pending = self._pending()
        if pending is None:
            fsync_dir(path)
        else:
            pending.folder(path)

    def _sync_dirs(self, paths: list[Path]) -> None:
        pending = self._pending()
        if pending is None:
            self._parallel(fsync_dir, paths)
        else:
            for path in paths:
                pending.folder(path)

    def _pending(self) -> _PendingSyncs | None:
        pending: _PendingSyncs | None = getattr(self._local, "pending", None)
        return pending

    @contextlib.contextmanager
    def deferring_syncs(self) -> Iterator[None]:
        """*slow* at exit: what this thread stores in the block is fsynced
        when the block ends (or whenever PENDING_MAX files wait), not one
        fsync per file and folder as it is stored.  For a batch of stores
        whose bytes have another copy until the block ends (the links an
        unlink holds: swfs.history.recorder): one fsync per kept file cost
        about 15 ms on ext4, against 0.4 ms for the rest of a small file's
        store.  Nested blocks sync at the outermost one's end."""
        if self._pending() is not None:
            yield
            return
        pending = self._local.pending = _PendingSyncs()
        try:
            yield
        finally:
            self._local.pending = None
            pending.sync()

    def _link_into(self, tmp: Path, final: Path) -> None:
        """Give the complete, fsynced temp ``tmp`` its final name."""
        fan = final.parent
        if not fan.is_dir():
            fan.mkdir(mode=DIR_MODE, exist_ok=True)
            self._sync_dir(fan.parent)
        # link, not rename: rename would replace a file another thread stored
        # meanwhile (same bytes, but under a reader's feet); link fails instead.
        try:
            os.link(tmp, final)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            os.rename(tmp, final)  # a filesystem without hard links
            return
        self._discard(tmp)

    @staticmethod
    def _discard(tmp: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    # -- internals: reading

    def _extent_bytes(self, e: Extent, h: str) -> bytes:
        if e.inline is not None:
            return _unpack_chunk(e.inline, e.length, f"blob {h[:16]} at {e.offset}")
        assert e.chunk is not None
        what = f"chunk {e.chunk[:16]} of blob {h[:16]}"
        try:
            raw = self.chunk_path(e.chunk).read_bytes()
        except FileNotFoundError:
            raise CorruptBlob(f"{what} is missing") from None
        data = _unpack_chunk(raw, e.length, what)
        if hash_bytes(data) != e.chunk:
            raise CorruptBlob(f"{what}: content does not match its hash")
        return data

    def _iter_bytes(self, h: Hash, m: Manifest) -> Iterator[bytes | memoryview]:
        """Blob ``h``'s bytes in order, holes as zeros."""
        pos = 0
        for e in m.extents:
            yield from _zeros(e.offset - pos)
            yield self._extent_bytes(e, h)
            pos = e.offset + e.length
        yield from _zeros(m.size - pos)

    def _materialise(self, h: Hash, m: Manifest, final: Path) -> None:
        tmp, fd = self._new_temp()
        try:
            try:
                hasher = _piecewise_hasher()
                pos = 0
                for e in m.extents:
                    _hash_zeros(hasher, e.offset - pos)
                    data = self._extent_bytes(e, h)
                    hasher.update(data)
                    write_all_at(fd, data, e.offset)
                    pos = e.offset + e.length
                _hash_zeros(hasher, m.size - pos)
                os.ftruncate(fd, m.size)  # trailing hole
                if hasher.hexdigest() != h:
                    raise CorruptBlob(f"blob {h[:16]} reassembles to other bytes")
                os.fchmod(fd, BLOB_MODE)
            finally:
                os.close(fd)
            # Disposable: no fsync; a crash loses only the cache.
            with contextlib.suppress(FileExistsError):
                os.link(tmp, final)
            self._discard(tmp)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise

    def clear_cache(self) -> int:
        """Drop every reassembled blob from ``cache/`` (disposable: an open
        descriptor keeps reading, the next open reassembles again); the
        bytes freed.  What a full disk gives up first."""
        freed = 0
        with self._cache_lock:
            for entry in os.scandir(self.cache):
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    os.unlink(entry.path)
                    freed += st.st_blocks * 512
            self._cache_used = 0
        return freed

    def _trim_cache(self, *, keep: str, added: Path | None = None) -> None:
        """Drop the least recently used reassembled blobs beyond
        ``CACHE_BYTES``, sparing any used in the last ``CACHE_KEEP_SECS``
        (a path handed out a moment ago must still open).  ``added`` (just
        reassembled) counts towards the size known since the last scan; the
        directory is scanned only once that passes the limit (or every
        ``CACHE_RESCAN`` additions), not on every addition."""
        with self._cache_lock:
            if added is not None and self._cache_used is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._cache_used += os.stat(added).st_blocks * 512
                self._cache_added += 1
                if self._cache_used <= CACHE_BYTES and self._cache_added < CACHE_RESCAN:
                    return
            self.cache_scans += 1
            self._cache_added = 0
            entries = []
            total = 0
            for entry in os.scandir(self.cache):
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    entries.append((st.st_mtime, st.st_blocks * 512, entry.path, entry.name))
            self._cache_used = total
            if total <= CACHE_BYTES:
                return
            cutoff = time.time() - CACHE_KEEP_SECS
            for mtime, used, path, name in sorted(entries):
                if total <= CACHE_BYTES or mtime > cutoff:
                    break
                if name == keep:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                    total -= used
            # Still over (all recent): the next addition scans again.
            self._cache_used = total


def _iter_fanout(root: Path) -> Iterator[Hash]:
    try:
        fans = list(os.scandir(root))
    except FileNotFoundError:
        return
    for fan in fans:
        if not (fan.is_dir(follow_symlinks=False) and _FANOUT_RE.fullmatch(fan.name)):
            continue
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(fan.path):
                if _REST_RE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    yield Hash(fan.name + entry.name)


def _seek(fd: int, pos: int, whence: int, size: int) -> int:
    """lseek SEEK_DATA / SEEK_HOLE; ``size`` past the last data (ENXIO), or
    where the filesystem cannot tell (all data, no holes)."""
    try:
        return os.lseek(fd, pos, whence)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return size
        if exc.errno == errno.EINVAL:
            return pos if whence == os.SEEK_DATA else size
        raise


def _zeros(n: int) -> Iterator[memoryview]:
    while n > 0:
        step = min(n, len(_ZEROS))
        yield _ZVIEW[:step]
        n -= step


def _is_zero(data: memoryview) -> bool:
    # startswith compares with memcmp; memoryview == goes byte by byte.
    return len(data) <= len(_ZEROS) and _ZEROS.startswith(data)


def _hash_zeros(hasher: blake3.blake3, n: int) -> None:
    hash_zeros(hasher, n)


def _reraise_naming(exc: BaseException, path: Path) -> None:
    """Re-raise an OSError that does not say which file it is about as one
    that does, keeping its errno; other exceptions are left to the caller."""
    if isinstance(exc, OSError) and exc.errno is not None and not exc.filename:
        raise OSError(exc.errno, f"{exc.strerror} (writing blob)", str(path)) from exc


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


PENDING_MAX = 256  # deferred files at most (each holds a descriptor until synced)


class _PendingSyncs:
    """The fsyncs one thread's ``deferring_syncs`` block owes: duplicated
    descriptors of sealed files (their names change meanwhile) and the
    folders whose entries changed."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._folders: set[Path] = set()

    def file(self, fd: int) -> None:
        self._fds.append(os.dup(fd))
        if len(self._fds) >= PENDING_MAX:
            self.sync()

    def folder(self, path: Path) -> None:
        self._folders.add(Path(path))

    def sync(self) -> None:
        fds, self._fds = self._fds, []
        folders, self._folders = self._folders, set()
        try:
            for fd in fds:  # files first: a folder's sync makes their names durable
                os.fsync(fd)
            for path in sorted(folders):
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir(path)
        finally:
            for fd in fds:
                os.close(fd)
