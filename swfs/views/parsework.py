"""Parsing in worker processes, with a wall-clock timeout and a memory cap.

Parsers are handed hostile input (zip bombs, cyclic PDFs, files that make a
converter allocate gigabytes).  Each parse therefore runs in a separate
process (trio-parallel) that the caller can kill: a crash, a hang or a memory
blow-up fails that one file with a one-line reason and nothing else.

The worker opens the file itself with O_NOFOLLOW, hashes the bytes it parses
and reports that hash, so a parse is always stored under the content it was
really made from, even if the file changed after it was queued.

Parsers open the file themselves (MuPDF, openpyxl, LibreOffice), and a plain
open moves the file's access time: a parse that ran after a user's utimens
(queued by the write just before it) would undo it.  So a file up to
``SNAPSHOT_LIMIT`` is first copied into a private memory file through the
worker's O_NOATIME descriptor, and parsed from there: the user's file is
read once, its access time left alone, and the parser reads exactly the
bytes that were hashed.  Bigger files are parsed in place, and their access
time may move.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import resource
import signal
import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial

import trio
import trio_parallel

from parsers import registry
from parsers._base import FileInfo, ParseFailed, ParseOptions, Unit, UnitRange, UnsupportedFormat
from swfs.store.fsutil import hash_fd, open_to_read
from swfs.views import sandbox

log = logging.getLogger(__name__)

OK = "ok"
FAILED = "failed"
UNSUPPORTED = "unsupported"
GONE = "gone"  # not a regular file any more: nothing to store
CHANGED = "changed"  # modified while being parsed: the result is discarded
# The worker's own machinery failed (not the parser, not the file): the
# engine tries again a few times before it records a failure naming it.
INTERNAL = "internal"


# Seconds a worker may take to start (its imports: seconds on a loaded
# machine) and hand a result back, beyond the parse's own timeout, before
# the pool gives up on it.
STARTUP_GRACE = 300.0

# Files up to this size are parsed from a private copy (see above).
SNAPSHOT_LIMIT = 64 * 1024 * 1024
_COPY_BLOCK = 1024 * 1024


# PDFs of more pages than this are parsed range by range (swfs.ranged).
RANGE_PAGES = 100


@dataclass(frozen=True)
class WorkerLimits:
    timeout: float = 120.0  # seconds of wall-clock time per file
    memory_mb: int = 3072  # address-space cap per worker process
    workers: int = max(1, os.cpu_count() or 1)
    options: ParseOptions = field(default_factory=ParseOptions)
    # Documents of more units than this are parsed range by range where
    # their format allows (PDF, swfs.ranged); 0: always whole.
    range_threshold: int = RANGE_PAGES
    # Where parse jobs run: None here (ParsePool), or a Ray cluster
    # ("ray://HOST:PORT", or "ray" for the address in RAY_ADDRESS):
    # swfs.views.executor.
    parse_on: str | None = None


@dataclass(frozen=True)
class Pages:
    """A range of units to parse (``parse_job``): ``start`` to ``stop``
    (0-based, ``stop`` excluded), of a document of more than ``threshold``
    units; ``expect`` the hash the earlier ranges were parsed from."""

    start: int
    stop: int
    threshold: int
    expect: str | None = None


@dataclass(frozen=True)
class Part:
    """What a ranged parse adds to its units (``parsers._base.UnitRange``)."""

    names: tuple[tuple[str, str], ...]  # (name, locator) of every unit of the document
    start: int  # ordinal of the first unit of the outcome
    blank: tuple[bool, ...]
    chars: int


@dataclass(frozen=True)
class ParseOutcome:
    status: str
    hash: str | None = None
    parser: str | None = None
    units: tuple[tuple[str, str, str], ...] = ()  # (name, locator, text)
    error: str | None = None
    secs: float = 0.0
    # Set when ``units`` are a range of the document (``Pages``), not all of it.
    part: Part | None = None


def file_info_from_fd(fd: int, rel: str, size: int) -> FileInfo:
    head = os.pread(fd, 4096, 0)
    ext = os.path.splitext(rel)[1].lower()
    return FileInfo(name=rel, extension=ext, size=size, head=head)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _named(exc: BaseException) -> str:
    """``Type: message`` on one line, even for an exception whose message
    cannot be had (its ``__str__`` raises)."""
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    return _one_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


OUT_OF_MEMORY = "out of memory"
# Resident memory past which a worker or confined child retires between
# jobs (a fresh one takes its place): what a big file left on the heap is
# given back, and two workers with their children stay within the machine's
# budget for the whole tree.  SWFS_WORKER_RSS_MB changes it (read when a
# worker starts, ``rss_budget``); 0: no limit.
RSS_BUDGET_ENV = "SWFS_WORKER_RSS_MB"
RSS_BUDGET_MB = 512


@dataclass
class WorkerBudget:
    """What decides whether a worker retires after a job (``retire``).

    ``out_of_memory``: set in a worker whose parse ran out of memory: what
    the earlier files left on its heap may be what made the next one fail,
    so it retires (a fresh process takes its place) and the pool tries that
    file once more, in a process of its own.

    ``started_bytes``, ``cap_bytes``: a worker's address space right after
    start-up, and its cap (0: none known).  A parse that grew the heap for
    good leaves less room under the cap for the next file: past half of the
    room it had, the worker retires before a small file fails for a big
    one's leftovers.

    ``rss_bytes``: the resident-memory budget (``rss_budget``; 0: none)."""

    out_of_memory: bool = False
    started_bytes: int = 0
    cap_bytes: int = 0
    rss_bytes: int = 0

    def retire(self) -> bool:
        """Whether this process retires now, by its own resident memory and
        address space."""
        if self.rss_bytes and _resident() > self.rss_bytes:
            return True
        return should_retire(
            self.out_of_memory, self.cap_bytes, self.started_bytes, _address_space()
        )


# This process's: a worker's is set up by ``_init_worker``.
_budget = WorkerBudget()


def rss_budget() -> int:
    """The resident-memory budget of a worker or child, in bytes (0: none)."""
    raw = os.environ.get(RSS_BUDGET_ENV, "")
    try:
        mb = int(raw) if raw else RSS_BUDGET_MB
    except ValueError:
        mb = RSS_BUDGET_MB
    return max(mb, 0) * 1024 * 1024


def _statm_bytes(field: int) -> int:
    """Field ``field`` of /proc/self/statm (0: size, 1: resident) in bytes, or 0."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[field])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()


def _resident() -> int:
    """This process's resident memory, or 0."""
    return _statm_bytes(1)


def _address_space() -> int:
    """This process's mapped address space (what RLIMIT_AS counts), or 0."""
    return _statm_bytes(0)


def _retire_worker() -> bool:
    """Runs in a worker after each job (trio-parallel's ``retire``; it must
    not raise)."""
    return _budget.retire()


def should_retire(out_of_memory: bool, cap_bytes: int, started_bytes: int, now_bytes: int) -> bool:
    """Whether a worker retires: its parse ran out of memory, or its address
    space (``now_bytes``, ``started_bytes`` after start-up) grew past half
    the room under its cap (``cap_bytes``, 0 when none is known)."""
    if out_of_memory:
        return True
    if not cap_bytes:
        return False
    room = cap_bytes - started_bytes
    return now_bytes - started_bytes > room // 2


def _retire_always() -> bool:
    return True


def _ran_out_of_memory(outcome: ParseOutcome) -> bool:
    return outcome.status == FAILED and OUT_OF_MEMORY in (outcome.error or "")


def parse_job(
    abs_path: str,
    rel: str,
    options: ParseOptions,
    timeout: float | None = None,
    pages: Pages | None = None,
) -> ParseOutcome:
    """Runs in a worker process: open, hash, have a confined child parse,
    check nothing moved.

    ``timeout``: seconds the parse may take, counted from the job's start
    (a worker still starting up uses none of it).  Past it the child and
    everything it started are killed; the worker lives on.  A backstop
    alarm, later, ends the worker itself should it hang reading the file.

    ``pages``: parse that range only where the parser can (the outcome's
    ``part`` says so), else the whole file."""
    if timeout is not None:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, max(timeout, 0.001) + BACKSTOP)
    try:
        outcome = _parse_job(abs_path, rel, options, timeout, pages)
    except Exception as exc:
        # A fork refused under load, a descriptor limit, a bug of ours: the
        # file must not wait for a parse forever (its view said pending).
        log.exception("%s: parse job failed", rel)
        outcome = ParseOutcome(INTERNAL, error=_one_line(f"{type(exc).__name__}: {exc}"))
    finally:
        if timeout is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
    if _ran_out_of_memory(outcome):
        _budget.out_of_memory = True
    return outcome


# Seconds past the parse's own timeout before the worker's alarm ends it.
BACKSTOP = 30.0


def parse_bytes(
    data: bytes,
    rel: str,
    options: ParseOptions,
    timeout: float | None = None,
    pages: Pages | None = None,
    memory_bytes: int = 0,
    domain: object = None,
) -> ParseOutcome:
    """``parse_job`` of a file's bytes, for a worker that cannot see the
    file (a Ray worker on another machine, swfs.views.rayfarm): the bytes
    go to a private temporary file, parsed as ``parse_job`` parses a file,
    in the same confined child.  The outcome's hash is of ``data``, for
    the sender to check.

    ``memory_bytes``: the room the confined child may grow into.  The
    process calling this is not a worker of ours and keeps no cap of its
    own, and its address space may already be large (a Ray worker maps
    gigabytes): the child, its fork, is capped at that plus the room.

    ``domain``: which files may share the confined child
    (``sandbox.file_domain`` of the original file, made unique to the
    sender by the sender); None: a child of its own.  The temporary copy's
    owner says nothing of who could write the original."""
    import tempfile

    if memory_bytes and not _budget.cap_bytes:
        _budget.started_bytes = _address_space()
        _budget.cap_bytes = _budget.started_bytes + memory_bytes
    try:
        with tempfile.TemporaryDirectory(prefix="swfs-parse-") as tmp:
            # mkdtemp makes it 0700: no other user reads the copy.
            path = os.path.join(tmp, "file" + os.path.splitext(rel)[1][:16])
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view[:_COPY_BLOCK]) :]
            finally:
                os.close(fd)
            outcome = _parse_job(path, rel, options, timeout, pages, domain=(domain,))
    except Exception as exc:  # the temporary copy: a full or missing temp folder
        log.exception("%s: parse job failed", rel)
        outcome = ParseOutcome(INTERNAL, error=_named(exc))
    return outcome


def _parse_job(
    abs_path: str,
    rel: str,
    options: ParseOptions,
    timeout: float | None = None,
    pages: Pages | None = None,
    *,
    domain: tuple[object] | None = None,
) -> ParseOutcome:
    """``domain``: (the confined child's domain,) where the file's own
    (``sandbox.file_domain``) does not tell it."""
    t0 = time.monotonic()
    try:
        fd = open_to_read(abs_path, os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return ParseOutcome(GONE, error=_one_line(f"cannot open: {exc.strerror}"))
    copy: int | None = None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ParseOutcome(GONE, error="not a regular file")
        if st.st_size <= SNAPSHOT_LIMIT:
            copy = _snapshot(fd, st.st_size)
            if copy is not None and _moved(st, os.fstat(fd)):
                return ParseOutcome(CHANGED)
        elif os.geteuid() != 0 and sandbox.mode() != sandbox.OFF:
            # An ordinary user's child runs as that user: it must not get a
            # descriptor of the user's own file (fchmod works on any).
            copy = _private_copy(fd, st.st_size)
        read_fd = fd if copy is None else copy
        h = hash_fd(read_fd)
        if pages is not None and pages.expect is not None and h != pages.expect:
            return ParseOutcome(CHANGED, hash=h)
        info = file_info_from_fd(read_fd, rel, st.st_size)
        parser = registry.select(info)
        if parser is None:
            return ParseOutcome(UNSUPPORTED, hash=h)
        key = parser.cache_key(info)
        _preload(parser.id)
        status, units, error, part = _parse_confined(
            read_fd, st, info, options, timeout, t0, pages, domain
        )
        if status == UNSUPPORTED:
            return ParseOutcome(UNSUPPORTED, hash=h, error=error)
        if _moved(st, os.fstat(fd)):
            return ParseOutcome(CHANGED, hash=h, parser=key)
        return ParseOutcome(
            status,
            hash=h,
            parser=key,
            units=units,
            error=error,
            secs=time.monotonic() - t0,
            part=part,
        )
    finally:
        os.close(fd)
        if copy is not None:
            os.close(copy)


_children: sandbox.Children | None = None

Reply = tuple[str, tuple[tuple[str, str, str], ...], str | None, Part | None]


def _parse_confined(
    fd: int,
    st: os.stat_result,
    info: FileInfo,
    options: ParseOptions,
    timeout: float | None,
    t0: float,
    pages: Pages | None = None,
    domain: tuple[object] | None = None,
) -> Reply:
    """(status, units, error, part) of parsing ``fd`` in a confined child."""
    global _children
    if _children is None:
        _children = sandbox.Children({"parse": _child_parse}, _child_ready)
    try:
        child = _children.get(
            sandbox.file_domain(st) if domain is None else domain[0], _budget.cap_bytes
        )
    except sandbox.SandboxError as exc:
        return FAILED, (), _one_line(str(exc)), None
    request: dict[str, object] = {
        "op": "parse",
        "rel": info.name,
        "ext": info.extension,
        "size": info.size,
        "options": dataclasses.asdict(options),
    }
    if pages is not None:
        request["pages"] = [pages.start, pages.stop, pages.threshold]
    deadline = None if timeout is None else t0 + timeout
    # UTF-8, and names and locators (a range names every unit of the document)
    limit = options.max_text_bytes * 4 + (1 << 20) + 128 * options.max_pages
    try:
        reply, blobs = child.call(request, [fd], deadline, limit)
    except TimeoutError:
        _children.drop()
        log.warning("%s: parse timed out after %g s", info.name, timeout or 0)
        return FAILED, (), f"parse timed out after {timeout:g} s", None
    except EOFError:
        reason = child.exit_reason() or "ended without an answer"
        _children.drop()
        log.warning("%s: parser process died: %s", info.name, reason)
        return FAILED, (), f"parser process died ({reason})", None
    except (OSError, sandbox.SandboxError) as exc:
        _children.drop()
        log.warning("%s: parse sandbox: %s", info.name, exc)
        return FAILED, (), _one_line(f"parse sandbox: {exc}"), None
    outcome = _checked_reply(reply, blobs)
    _children.after(child, reply if outcome is not None else None)
    if outcome is None:
        log.warning("%s: the parser's answer was out of protocol; discarded", info.name)
        return FAILED, (), "the parser's answer was out of protocol", None
    return outcome


_STATUSES = frozenset({OK, FAILED, UNSUPPORTED})


def _checked_reply(reply: dict[str, object], blobs: list[bytes]) -> Reply | None:
    """The reply of a child, checked field by field; None if malformed."""
    status, error, names = reply.get("status"), reply.get("error"), reply.get("units", [])
    if status not in _STATUSES or not (error is None or isinstance(error, str)):
        return None
    if not isinstance(names, list) or len(names) != len(blobs):
        return None
    units: list[tuple[str, str, str]] = []
    for pair, blob in zip(names, blobs, strict=True):
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], str)
        ):
            return None
        try:
            text = blob.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return None
        units.append((pair[0], pair[1], text))
    part: Part | None = None
    if "part" in reply:
        part = _checked_part(reply["part"], units)
        if part is None or status != OK:
            return None
    return str(status), tuple(units), None if error is None else _one_line(error), part


def _checked_part(raw: object, units: list[tuple[str, str, str]]) -> Part | None:
    """The ``part`` of a ranged reply, checked: its units are where its
    names say; None if malformed."""
    if not isinstance(raw, dict):
        return None
    names, start, blank, chars = (
        raw.get("names"),
        raw.get("start"),
        raw.get("blank"),
        raw.get("chars"),
    )
    if not (
        isinstance(names, list)
        and isinstance(start, int)
        and isinstance(blank, list)
        and isinstance(chars, int)
        and chars >= 0
        and len(blank) == len(units)
        and all(isinstance(b, bool) for b in blank)
        and 0 <= start <= start + len(units) <= len(names)
    ):
        return None
    pairs: list[tuple[str, str]] = []
    for pair in names:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], str)
        ):
            return None
        pairs.append((pair[0], pair[1]))
    if len(set(n for n, _ in pairs)) != len(pairs):
        return None
    if any(pairs[start + i] != (u[0], u[1]) for i, u in enumerate(units)):
        return None
    return Part(names=tuple(pairs), start=start, blank=tuple(blank), chars=chars)


def _child_ready() -> None:
    """In a fresh child: its address space, for its retirement."""
    _budget.started_bytes = _address_space()


def _child_parse(req: dict[str, object], fds: list[int]) -> tuple[dict[str, object], list[bytes]]:
    """Runs in the confined child: parse one file (the descriptor sent)."""
    fd = fds[0]
    size = req.get("size")
    info = FileInfo(
        name=str(req.get("rel")),
        extension=str(req.get("ext")),
        size=size if isinstance(size, int) else os.fstat(fd).st_size,
        head=os.pread(fd, 4096, 0),
    )
    raw = req.get("options")
    options = ParseOptions(**raw) if isinstance(raw, dict) else ParseOptions()
    units: list[Unit] = []
    error: str | None = None
    retire = False
    pages = req.get("pages")
    try:
        if isinstance(pages, list) and len(pages) == 3 and all(isinstance(n, int) for n in pages):
            try:
                ranged = registry.parse_range(
                    f"/proc/self/fd/{fd}",
                    info,
                    options,
                    start=pages[0],
                    stop=pages[1],
                    threshold=pages[2],
                )
            except Exception as exc:  # the whole file's parse has the last word
                log.debug("%s: range %s: %s; parsing it whole", info.name, pages, exc)
                ranged = None
            if ranged is not None:
                return _range_reply(ranged)
        _, units = registry.parse(f"/proc/self/fd/{fd}", info, options)
    except UnsupportedFormat as exc:
        return {"status": UNSUPPORTED, "error": _one_line(str(exc))}, []
    except ParseFailed as exc:  # a parser's own verdict: the child is sound
        status, error = FAILED, _one_line(str(exc) or type(exc).__name__)
    except MemoryError:
        status, error, retire = FAILED, f"{OUT_OF_MEMORY} while parsing", True
    except RecursionError:
        status, error, retire = FAILED, "document structure nested too deeply", True
    except Exception as exc:  # a parser bug or a library's surprise: fail this file only
        status, error, retire = FAILED, _named(exc), True
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:
        # A native library's panic (pyo3's PanicException is no Exception):
        # this file fails, named, and the child is not trusted further.
        status, error, retire = FAILED, _named(exc), True
    else:
        status = OK
    retire = retire or _retire_worker()
    return (
        {
            "status": status,
            "error": error,
            "units": [[u.name, u.locator] for u in units],
            "retire": retire,
        },
        [u.text.encode("utf-8", "surrogatepass") for u in units],
    )


def _range_reply(ranged: UnitRange) -> tuple[dict[str, object], list[bytes]]:
    part = {
        "names": [list(pair) for pair in ranged.names],
        "start": ranged.start,
        "blank": list(ranged.blank),
        "chars": ranged.chars,
    }
    reply: dict[str, object] = {
        "status": OK,
        "error": None,
        "units": [[u.name, u.locator] for u in ranged.units],
        "part": part,
        "retire": _retire_worker(),
    }
    return reply, [u.text.encode("utf-8", "surrogatepass") for u in ranged.units]


def _private_copy(fd: int, size: int) -> int | None:
    """An unlinked copy of ``fd`` in the temporary folder (None: parse in place)."""
    import tempfile

    try:
        with tempfile.TemporaryFile() as f:
            copy = os.dup(f.fileno())
    except OSError:
        return None
    try:
        offset = 0
        while offset < size:
            block = os.pread(fd, min(_COPY_BLOCK, size - offset), offset)
            if not block:
                break
            offset += os.pwrite(copy, block, offset)
    except OSError as exc:
        log.debug("parsing in place: copying: %s", exc)
        os.close(copy)
        return None
    return copy


def _moved(before: os.stat_result, after: os.stat_result) -> bool:
    return (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != (
        before.st_size,
        before.st_mtime_ns,
        before.st_ctime_ns,
    )


def _snapshot(fd: int, size: int) -> int | None:
    """A memory file holding the bytes of ``fd`` (read without moving its
    access time, as ``fd`` was opened), for the parser to open by path;
    None where no memory file can be had (memfd refused, its memory short):
    the file is then parsed in place."""
    try:
        copy = os.memfd_create("swfs-parse", os.MFD_CLOEXEC)
    except OSError as exc:
        log.debug("parsing in place: memfd_create: %s", exc)
        return None
    try:
        offset = 0
        while offset < size:
            block = os.pread(fd, min(_COPY_BLOCK, size - offset), offset)
            if not block:
                break
            try:
                offset += os.pwrite(copy, block, offset)
            except OSError as exc:  # the copy's memory, not the file: parse in place
                log.debug("parsing in place: copying: %s", exc)
                os.close(copy)
                return None
    except BaseException:
        os.close(copy)
        raise
    return copy


def _init_worker(memory_bytes: int) -> None:
    """Worker process set-up: cap memory, no core dumps, yield CPU to the daemon."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with suppress(OSError):
        os.nice(5)
    # pymupdf and friends are imported once per worker, not per file.
    registry.all_parsers()
    _budget.started_bytes, _budget.cap_bytes = _address_space(), memory_bytes
    _budget.rss_bytes = rss_budget()


# What parsers import lazily that costs seconds (pymupdf: 1 to 5 s), by
# parser id.  The worker imports it itself before its first file of that
# parser goes to a confined child, so every child it forks later (a fresh
# one every MAX_JOBS files, and after any failure) has it already, shared
# copy-on-write, instead of paying for it again on its first such file.
# A worker that never meets such a file never imports it.
PRELOAD = {
    "pdf": "pymupdf",
    "html": "markitdown.converters",
    "epub": "markitdown.converters",
    "ipynb": "markitdown.converters",
    "msg": "markitdown.converters",
}
_preloaded: set[str] = set()


def _preload(parser_id: str) -> None:
    name = PRELOAD.get(parser_id)
    if name is None or name in _preloaded:
        return
    _preloaded.add(name)
    import importlib

    try:
        importlib.import_module(name)
    except Exception as exc:  # the parser fails on its own, in the child
        log.debug("preloading %s: %s", name, exc)


class ParsePool:
    """Killable parse workers.  Use ``async with ParsePool.open(limits) as pool``."""

    def __init__(
        self,
        ctx: trio_parallel.WorkerContext,
        limits: WorkerLimits,
        fresh: trio_parallel.WorkerContext | None = None,
    ) -> None:
        self._ctx = ctx
        # Workers that run one job each: a retry after running out of memory
        # must not land on another used worker whose heap is just as full.
        self._fresh = fresh if fresh is not None else ctx
        self.limits = limits
        self._limiter = trio.CapacityLimiter(limits.workers)
        self._unbounded = trio.CapacityLimiter(math.inf)

    @classmethod
    @asynccontextmanager
    async def open(cls, limits: WorkerLimits) -> AsyncIterator[ParsePool]:
        init = partial(_init_worker, limits.memory_mb * 1024 * 1024)
        async with (
            trio_parallel.open_worker_context(
                init=init, retire=_retire_worker, idle_timeout=300
            ) as ctx,
            trio_parallel.open_worker_context(
                init=init, retire=_retire_always, idle_timeout=10
            ) as fresh,
        ):
            yield cls(ctx, limits, fresh)

    async def parse(
        self,
        abs_path: str,
        rel: str,
        *,
        pages: Pages | None = None,
        budget: float | None = None,
    ) -> ParseOutcome:
        """Parse ``rel`` (``pages``: a range of it, ``parse_job``) within
        ``budget`` seconds (the limits' timeout by default)."""
        # The timeout counts the parse only, not the wait for a free worker.
        async with self._limiter:
            outcome = await self._parse_now(abs_path, rel, pages=pages, budget=budget)
            if _ran_out_of_memory(outcome):
                # The worker retired: the file gets one try in a fresh process,
                # so a heap grown by earlier files does not fail it.
                log.info("%s: out of memory in a used worker; trying a fresh one", rel)
                outcome = await self._parse_now(
                    abs_path, rel, self._fresh, pages=pages, budget=budget
                )
            return outcome

    async def _parse_now(
        self,
        abs_path: str,
        rel: str,
        ctx: trio_parallel.WorkerContext | None = None,
        *,
        pages: Pages | None = None,
        budget: float | None = None,
    ) -> ParseOutcome:
        t0 = time.monotonic()
        timeout = self.limits.timeout if budget is None else budget
        # The worker times the parse itself (``parse_job``); this bound only
        # catches a worker that never starts or never answers.
        with trio.move_on_after(timeout + STARTUP_GRACE) as scope:
            try:
                return await (ctx or self._ctx).run_sync(
                    parse_job,
                    abs_path,
                    rel,
                    self.limits.options,
                    timeout,
                    pages,
                    kill_on_cancel=True,
                    limiter=self._unbounded,
                )
            except trio_parallel.BrokenWorkerError as exc:
                if _exit_signal(exc) == signal.SIGALRM:
                    return self._timed_out(rel, t0)
                reason = describe_broken(exc)
                log.warning("%s: parser process died: %s", rel, reason)
                return ParseOutcome(
                    FAILED, error=f"parser process died ({reason})", secs=time.monotonic() - t0
                )
        assert scope.cancelled_caught
        return self._timed_out(rel, t0)

    def _timed_out(self, rel: str, t0: float) -> ParseOutcome:
        log.warning("%s: parse timed out after %.0f s", rel, self.limits.timeout)
        return ParseOutcome(
            FAILED,
            error=f"parse timed out after {self.limits.timeout:g} s",
            secs=time.monotonic() - t0,
        )


def _exit_signal(exc: trio_parallel.BrokenWorkerError) -> int | None:
    """The signal that ended the worker, if one did."""
    for arg in exc.args:
        code = getattr(arg, "exitcode", None)
        if isinstance(code, int) and code < 0:
            return -code
    return None


def describe_broken(
    exc: trio_parallel.BrokenWorkerError,
    unknown: str = "worker crashed; likely out of memory or a crash in a native library",
) -> str:
    """Why a worker process died, in a few words (its signal or exit status)."""
    for arg in exc.args:
        code = getattr(arg, "exitcode", None)
        if isinstance(code, int) and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        if isinstance(code, int):
            return f"exit status {code}"
    return unknown
