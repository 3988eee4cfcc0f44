"""BLAKE3 by subtrees: a file's hash from the chaining values of its 1 MiB
leaves, so that a change costs the leaves it touched.

BLAKE3 is a tree hash.  The input is cut into 1 KiB chunks; a chunk's
chaining value (CV) depends on its bytes and its index; CVs are joined
pairwise up to a root, whose compression alone carries the ROOT flag.  The
tree's shape depends on the length only: the left subtree of n chunks holds
the largest power of two of chunks below n.  Cut a file into aligned leaves
of 1 MiB (1,024 chunks, a power of two) and the tree above the leaves is
the same rule over leaves, the last one possibly short.  Keep each leaf's CV
and a one-byte edit rehashes one leaf, then joins about as many CVs as there
are leaves (2,047 compressions for 2 GiB: well under a millisecond).

A leaf inside a hole needs no reading: its chunks are hashed from one zero
chunk.  Its CV still depends on where it is, so the CVs of zero leaves are
kept by index (``_ZeroLeaves``): a pure function of the index, bounded.

blake3-py (the binding swfs hashes with) exposes no subtree.  The
compressions come from the reference C implementation the system ships
(Debian: ``librust-blake3-dev``), built with ``swfs/store/b3tree.c`` into a small
library by ``python -m swfs.store.b3tree build`` (``make install`` runs it); its
dispatcher picks the CPU's best SIMD code at run time.  The library's name
carries a digest of ``b3tree.c``, so a stale build is never loaded.  When it
is absent or fails its self-test against blake3-py, ``library()`` is None,
the reason is logged once, and callers hash whole files as before.
``SWFS_B3TREE=off`` disables it; ``SWFS_B3TREE=/path/lib.so`` names another
build (tests build their own); ``SWFS_B3TREE=verify`` checks every hash by
leaves against a whole hash (``swfs.store.treecache``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import glob
import logging
import mmap
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import blake3

log = logging.getLogger(__name__)

CHUNK = 1024
LEAF = 1024 * 1024  # bytes per leaf: a power-of-two number of chunks
CV = 32
ENV = "SWFS_B3TREE"
GLUE = Path(__file__).with_name("b3tree.c")
# Where Debian's librust-blake3-dev puts the reference C sources.
SOURCES_GLOB = "/usr/share/cargo/registry/blake3-*/c"
# Leaves read and hashed per task: big enough that a call spreads over the
# SIMD lanes and the thread overhead vanishes, small enough to bound memory
# (one buffer per worker).
BATCH_LEAVES = 8
ZERO_BATCH = 64
WORKERS = max(1, min(4, os.cpu_count() or 1))


class BuildError(Exception):
    """The library could not be built (the message says why)."""


def glue_digest() -> str:
    return blake3.blake3(GLUE.read_bytes()).hexdigest()[:12]


def default_path() -> Path:
    """Where ``build`` puts the library and ``library`` looks for it: inside
    the environment swfs runs in."""
    return Path(sys.prefix) / "lib" / "swfs" / f"libswfsb3-{glue_digest()}.so"


class Library:
    """The built library's entry points (ctypes releases the GIL for each
    call, so worker threads hash in parallel)."""

    def __init__(self, path: str) -> None:
        self.path = path
        cdll = ctypes.CDLL(path)
        u64, ptr = ctypes.c_uint64, ctypes.c_void_p
        self._subtree = cdll.swfs_b3_subtree
        self._subtree.argtypes = [ptr, u64, u64, ptr]
        self._subtree.restype = ctypes.c_int
        self._leaves = cdll.swfs_b3_leaves
        self._leaves.argtypes = [ptr, u64, u64, u64, ptr]
        self._leaves.restype = ctypes.c_int
        self._root = cdll.swfs_b3_root
        self._root.argtypes = [ptr, u64, ptr]
        self._root.restype = ctypes.c_int
        degree = cdll.swfs_b3_simd_degree
        degree.restype = ctypes.c_size_t
        self.simd_degree = int(degree())

    def leaves(self, addr: int | None, nbytes: int, first_leaf: int) -> bytes:
        """CVs of the leaves in ``nbytes`` at ``addr`` (None: zeros), the first
        numbered ``first_leaf``: whole leaves, or one leaf of any length."""
        n = max(1, -(-nbytes // LEAF))
        out = ctypes.create_string_buffer(CV * n)
        counter = first_leaf * (LEAF // CHUNK)
        if nbytes == n * LEAF:
            rc = self._leaves(addr, LEAF, n, counter, out)
        elif n == 1:
            rc = self._subtree(addr, nbytes, counter, out)
        else:
            raise ValueError("only the last leaf may be short")
        if rc != 0:
            raise ValueError(f"blake3 subtree of {nbytes} bytes refused")
        return out.raw

    def leaves_of(self, data: bytes, first_leaf: int) -> bytes:
        """``leaves`` of bytes in memory."""
        buf = ctypes.create_string_buffer(data, len(data))
        return self.leaves(ctypes.addressof(buf), len(data), first_leaf)

    def root(self, cvs: bytes | bytearray) -> str:
        """The hash of input whose leaves have ``cvs`` (two leaves or more)."""
        n = len(cvs) // CV
        if n < 2 or len(cvs) != n * CV:
            raise ValueError("a root needs two leaves or more")
        src = (ctypes.c_char * len(cvs)).from_buffer_copy(cvs)
        out = ctypes.create_string_buffer(CV)
        self._root(src, n, out)
        return out.raw.hex()

    def hash_bytes(self, data: bytes) -> str:
        """``data``'s hash by leaves (for the self-test and tests; more than
        one leaf)."""
        buf = ctypes.create_string_buffer(data, len(data))
        base = ctypes.addressof(buf)
        cvs = b"".join(
            self.leaves(base + i, min(LEAF, len(data) - i), i // LEAF)
            for i in range(0, len(data), LEAF)
        )
        return self.root(cvs)


_lib: Library | None = None
_why_not: str | None = None
_lib_lock = threading.Lock()


def _self_test(lib: Library) -> str | None:
    """Why ``lib`` cannot be trusted, or None: a few lengths that cross
    every shape (odd tails, a power of two of leaves, a short last leaf),
    zeros included, against blake3-py."""
    seed = blake3.blake3(b"swfs b3tree self-test").digest(length=3 * LEAF + 4099)
    for n in (LEAF + 1, 2 * LEAF, 3 * LEAF + 4099):
        data = seed[:n]
        if lib.hash_bytes(data) != blake3.blake3(data).hexdigest():
            return f"its hash of {n} bytes differs from blake3-py's"
    zeros = lib.leaves(None, LEAF, 5) + lib.leaves(None, 1000, 6)
    with_data = lib.leaves_of(bytes(LEAF), 5) + lib.leaves_of(bytes(1000), 6)
    if zeros != with_data:
        return "its zero leaves differ from hashed zeros"
    return None


def _load(setting: str) -> tuple[Library | None, str | None]:
    """The library ``SWFS_B3TREE=setting`` names, or why there is none."""
    if setting == "off":
        return None, f"{ENV}=off"
    try:
        path = Path(setting) if setting not in ("", "on", "verify") else default_path()
    except OSError as exc:  # an install without b3tree.c
        return None, f"{GLUE}: {exc.strerror}"
    if not path.is_file():
        return None, f"{path} is not built (make install builds it)"
    try:
        lib = Library(str(path))
        why = _self_test(lib)
    except (OSError, AttributeError, ValueError) as exc:
        return None, f"{path}: {exc}"
    return (None, f"{path}: {why}") if why is not None else (lib, None)


def library() -> Library | None:
    """The subtree library, loaded and checked once; None when absent or
    unusable (``why_not()`` says why, logged once)."""
    global _lib, _why_not
    if _lib is not None or _why_not is not None:
        return _lib
    with _lib_lock:
        if _lib is not None or _why_not is not None:
            return _lib
        lib, why = _load(os.environ.get(ENV, ""))
        if why is not None:
            log.info("blake3 subtrees unavailable (%s): written files are hashed whole", why)
            _why_not = why
            return None
        _lib = lib
        if lib is not None:
            table = zero_table_path(Path(lib.path))
            if table.is_file():
                why_table = _load_zero_table(lib, table)
                if why_table is not None:
                    log.warning(
                        "blake3 zero leaves not loaded (%s): computed when needed", why_table
                    )
        return _lib


def why_not() -> str | None:
    library()
    return _why_not


def reset() -> None:
    """Forget the loaded library (tests switch ``SWFS_B3TREE``)."""
    global _lib, _why_not
    with _lib_lock:
        _lib, _why_not = None, None


# -- hashing a file by leaves


def leaf_count(size: int) -> int:
    return -(-size // LEAF)


def leaf_len(size: int, i: int) -> int:
    """Length of leaf ``i`` of a file of ``size`` bytes."""
    return min(LEAF, size - i * LEAF)


class _ZeroLeaves:
    """CVs of whole zero leaves by index: a pure function of the index, kept
    for the first ``limit`` leaves (32 bytes each: 1 MiB of CVs covers holes
    anywhere in the first 32 GiB of a file)."""

    def __init__(self, limit: int = 32 * 1024) -> None:
        self._limit = limit
        self._cvs = bytearray()
        self._known = bytearray()
        self._lock = threading.Lock()

    def get(self, i: int) -> bytes | None:
        with self._lock:
            if i < len(self._known) and self._known[i]:
                return bytes(self._cvs[i * CV : (i + 1) * CV])
        return None

    def put(self, first: int, cvs: bytes) -> None:
        with self._lock:
            for k in range(len(cvs) // CV):
                i = first + k
                if i >= self._limit:
                    return
                if i >= len(self._known):
                    grow = min(self._limit, max(i + 1, 2 * len(self._known), 1024))
                    self._known.extend(bytes(grow - len(self._known)))
                    self._cvs.extend(bytes(grow * CV - len(self._cvs)))
                self._cvs[i * CV : (i + 1) * CV] = cvs[k * CV : (k + 1) * CV]
                self._known[i] = 1


_ZERO = _ZeroLeaves()

# The zero leaves of the first 8 GiB, computed once when the library is
# built (seconds) and kept beside it: a sparse file's first close costs what
# it holds, not its apparent size.  File: magic, u64 count, count CVs, then
# the blake3 of all that; checked, and spot-checked against the library, at
# load.
ZERO_TABLE_LEAVES = 8 * 1024
_ZERO_MAGIC = b"SWFSB3Z1"


def zero_table_path(lib_path: Path) -> Path:
    return lib_path.with_suffix(".zeros")


def write_zero_table(lib: Library, out: Path, leaves: int = ZERO_TABLE_LEAVES) -> None:
    step = 256
    parts = _executor().map(
        lambda first: lib.leaves(None, min(step, leaves - first) * LEAF, first),
        range(0, leaves, step),
    )
    body = _ZERO_MAGIC + leaves.to_bytes(8, "little") + b"".join(parts)
    staged = out.with_name(f".{out.name}.{os.getpid()}")
    staged.write_bytes(body + blake3.blake3(body).digest())
    os.replace(staged, out)


def _load_zero_table(lib: Library, path: Path) -> str | None:
    """Fill the zero leaves from ``path``; why not, or None."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    body, digest = raw[:-CV], raw[-CV:]
    if not body.startswith(_ZERO_MAGIC) or blake3.blake3(body).digest() != digest:
        return f"{path}: damaged"
    n = int.from_bytes(body[8:16], "little")
    cvs = body[16:]
    if len(cvs) != n * CV or n == 0:
        return f"{path}: damaged"
    for i in {0, n // 3, n - 1}:  # made by this library, not another's
        if lib.leaves(None, LEAF, i) != cvs[i * CV : (i + 1) * CV]:
            return f"{path}: not this library's"
    _ZERO.put(0, cvs)
    return None


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="b3tree")
        return _pool


class _Holes:
    """Whether a byte range of a file holds data (SEEK_DATA; the rest
    reads as zeros).  One lseek per question: an edit asks about its few
    leaves only."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._blind = False  # the filesystem cannot tell: everything is data
        self._seen = (0, -1)  # no data in [asked, answer): the last answer

    def has_data(self, a: int, b: int) -> bool:
        if self._blind:
            return True
        asked, answer = self._seen
        if not asked <= a <= answer:
            try:
                answer = os.lseek(self._fd, a, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                    self._blind = True
                    return True
                if exc.errno != errno.ENXIO:
                    raise
                answer = 1 << 63  # nothing but a hole from ``a`` to the end
            self._seen = (a, answer)
        return answer < b


def _runs(todo: Sequence[int], size: int, holes: _Holes) -> Iterator[tuple[int, int, bool]]:
    """``todo`` (sorted leaf indices) as tasks ``(first, count, zero)``:
    consecutive leaves of one kind, whole ones only (a short last leaf is a
    task of its own)."""
    short = leaf_count(size) - 1 if size % LEAF else -1
    run: list[int] = []
    zero_run = False
    for i in todo:
        zero = not holes.has_data(i * LEAF, i * LEAF + leaf_len(size, i))
        limit = ZERO_BATCH if zero else BATCH_LEAVES
        if run and (zero != zero_run or i != run[-1] + 1 or len(run) >= limit or i == short):
            yield run[0], len(run), zero_run
            run = []
        if not run:
            zero_run = zero
        run.append(i)
    if run:
        yield run[0], len(run), zero_run


def fill_leaves(lib: Library, fd: int, size: int, cvs: bytearray, todo: Sequence[int]) -> None:
    """Hash leaves ``todo`` (sorted indices) of the file behind ``fd``, taken
    as ``size`` bytes long, into ``cvs`` (32 bytes per leaf).  Holes are not
    read.  Bytes past a file that shrank meanwhile count as zeros: the
    caller compares the file's stat before and after, and a file that
    changed while hashed never gets its result recorded."""
    holes = _Holes(fd)
    tasks: list[tuple[int, int, bool]] = []
    for first, count, zero in _runs(todo, size, holes):
        if zero and leaf_len(size, first + count - 1) == LEAF:
            known = [_ZERO.get(i) for i in range(first, first + count)]
            if all(k is not None for k in known):
                cvs[first * CV : (first + count) * CV] = b"".join(k for k in known if k)
                continue
        tasks.append((first, count, zero))
    if not tasks:
        return
    buffers: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
    made: list[mmap.mmap] = []

    def run(task: tuple[int, int, bool]) -> tuple[int, bytes]:
        first, count, zero = task
        nbytes = sum(leaf_len(size, i) for i in range(first, first + count))
        if zero:
            out = lib.leaves(None, nbytes, first)
            if nbytes == count * LEAF:
                _ZERO.put(first, out)
            return first, out
        try:
            buf = buffers.get_nowait()
        except queue.Empty:
            buf = mmap.mmap(-1, BATCH_LEAVES * LEAF)
            made.append(buf)
        try:
            _read_exactly(fd, buf, nbytes, first * LEAF)
            cbuf = (ctypes.c_char * nbytes).from_buffer(buf)
            try:
                return first, lib.leaves(ctypes.addressof(cbuf), nbytes, first)
            finally:
                del cbuf
        finally:
            buffers.put(buf)

    try:
        # One task (an edit's leaf) runs here: a thread hop costs more.
        results = [run(tasks[0])] if len(tasks) == 1 else list(_executor().map(run, tasks))
    finally:
        for buf in made:
            with contextlib.suppress(BufferError):  # still exported by a failed task: GC frees it
                buf.close()
    for first, out in results:
        cvs[first * CV : first * CV + len(out)] = out


def _read_exactly(fd: int, buf: mmap.mmap, n: int, offset: int) -> None:
    view = memoryview(buf)
    try:
        got = 0
        while got < n:
            k = os.preadv(fd, [view[got:n]], offset + got)
            if k == 0:
                view[got:n] = bytes(n - got)  # shrank while read: see fill_leaves
                break
            got += k
    finally:
        view.release()


def hash_fd(lib: Library, fd: int, size: int) -> tuple[str, bytearray]:
    """The hash of the first ``size`` (> one leaf) bytes of ``fd`` and its
    leaf CVs, all hashed."""
    n = leaf_count(size)
    cvs = bytearray(n * CV)
    fill_leaves(lib, fd, size, cvs, range(n))
    return lib.root(cvs), cvs


# -- building the library


def sources() -> Path | None:
    """The reference C sources the system ships (the newest), or None."""
    found = [Path(p) for p in glob.glob(SOURCES_GLOB) if (Path(p) / "blake3_impl.h").is_file()]

    def version(p: Path) -> tuple[int, ...]:
        tail = p.parent.name.removeprefix("blake3-")
        return tuple(int(x) if x.isdigit() else 0 for x in tail.split("."))

    return max(found, key=version) if found else None


def _variants(src: Path) -> Iterator[tuple[str, list[str]]]:
    """Ways to compile, best first: the assembly SIMD code (x86-64), the
    intrinsics (NEON on arm64), then portable C alone."""
    base = [str(src / f) for f in ("blake3.c", "blake3_dispatch.c", "blake3_portable.c")]
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        asm = [str(src / f"blake3_{s}_x86-64_unix.S") for s in ("sse2", "sse41", "avx2", "avx512")]
        yield "sse2/sse4.1/avx2/avx512 (assembly)", base + asm
    if machine in ("aarch64", "arm64"):
        yield "neon", [*base, str(src / "blake3_neon.c"), "-DBLAKE3_USE_NEON=1"]
    no_simd = ["-DBLAKE3_NO_SSE2", "-DBLAKE3_NO_SSE41", "-DBLAKE3_NO_AVX2", "-DBLAKE3_NO_AVX512"]
    yield "portable", base + no_simd + ["-DBLAKE3_USE_NEON=0"]


def build(out: Path | None = None, *, cc: str | None = None) -> Path:
    """Compile ``b3tree.c`` with the system's BLAKE3 C sources into ``out``
    (default: ``default_path()``), check it against blake3-py, and return
    its path.  BuildError says why not."""
    out = out or default_path()
    src = sources()
    if src is None:
        raise BuildError(
            f"no BLAKE3 C sources at {SOURCES_GLOB} (apt-get install librust-blake3-dev)"
        )
    compiler = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise BuildError("no C compiler (cc)")
    out.parent.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="swfs-b3tree-") as tmp:
        for name, files in _variants(src):
            lib_tmp = Path(tmp) / f"lib-{len(errors)}.so"
            cmd = [
                compiler, "-O3", "-shared", "-fPIC", "-fvisibility=hidden", "-std=gnu11",
                "-Wa,--noexecstack", "-I", str(src), "-o", str(lib_tmp), str(GLUE), *files,
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0:
                errors.append(f"{name}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
                continue
            try:
                why = _self_test(Library(str(lib_tmp)))
            except (OSError, AttributeError, ValueError) as exc:
                why = str(exc)
            if why is not None:
                errors.append(f"{name}: {why}")
                continue
            staged = out.with_name(f".{out.name}.{os.getpid()}")
            shutil.copyfile(lib_tmp, staged)
            os.replace(staged, out)  # a running process keeps the inode it loaded
            write_zero_table(Library(str(out)), zero_table_path(out))
            log.info("built %s (%s) from %s", out, name, src)
            return out
    raise BuildError("; ".join(errors))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swfs.store.b3tree")
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("--out", type=Path, help="the library's path (default: in this venv)")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            path = build(args.out)
        except (BuildError, OSError, subprocess.SubprocessError) as exc:
            print(f"b3tree: not built: {exc}", file=sys.stderr)
            return 1
        print(f"b3tree: built {path}")
        return 0
    lib = library()
    if lib is None:
        print(f"b3tree: unavailable: {why_not()}", file=sys.stderr)
        return 1
    table = zero_table_path(Path(lib.path))
    if not table.is_file():
        print(
            f"swfs.store.b3tree: {lib.path} has no zero table ({table}): rebuild", file=sys.stderr
        )
        return 1
    print(
        f"swfs.store.b3tree: {lib.path} (SIMD degree {lib.simd_degree}; zero leaves: {table.name})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
