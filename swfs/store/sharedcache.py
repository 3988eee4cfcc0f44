"""The shared parse cache: parses by (content hash, parser key), shared by
every workspace mounted or indexed with ``--cache DIR``.

A workspace looks a parse up here before it parses: a hit is imported into
its own store (records, history, logs and permissions stay per
workspace) and no parse job runs; after a parse of its own it publishes the
outcome here.  Entries hold parsed text only, the same text the workspace's
own store holds; who may read it is decided by the workspace that shows it
(``swfs.permissions``), from its own file record.

Layout of a local cache directory (mode 0700, owned by the user who runs
the daemons)::

    v1/parses/<h[:2]>/<h>.<p>     one entry: h the content's blake3 hash, p the
                                  first 32 hex digits of the parser key's blake3
    v1/files/<h[:2]>/<h>.<n>      a file made from content h (a render's layout,
                                  page image or office-to-PDF conversion), n the
                                  first 32 hex digits of its name's blake3
                                  (``layout.json``, ``source.pdf``, ``110/page-0001.png``)
    v1/tmp/                       entries being written

An entry is one header line of JSON, ``{"v": 1, "hash", "parser", "status",
"secs", "n", "len", "b3"}``, then ``len`` bytes: the units as a JSON list of
``[name, locator, text]``, whose blake3 is ``b3``.  It is written to a temp
file in ``v1/tmp/`` and renamed into place, so a reader sees a whole entry or
none, whatever number of daemons write at once (two that publish one parse
write the same bytes).  Each read checks the header, the length and the
digest (a file entry's header is ``{"v", "hash", "name", "len", "b3"}``, then
its bytes): an entry that fails any check (a torn write after a crash, a bad
disk, a hand edit) is a miss; it is logged and removed.  Nothing in an entry
is ever executed: it is JSON text, checked for its types.

Only successful parses are shared: a failure may be this machine's (a
timeout under load, a worker's memory cap), and is the workspace's own.

Collection: ``swfs cache gc DIR --older-than DAYS`` removes entries not used
(read or written) for that long; each hit touches its entry's mtime.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import blake3

log = logging.getLogger(__name__)

VERSION = 1
_HEADER_MAX = 4096
OK = "ok"

UnitTuple = tuple[str, str, str]  # (name, locator, text)


class CacheError(Exception):
    """The cache directory cannot be used; the message names it and why."""


@dataclass(frozen=True)
class CachedParse:
    """A parse found in the cache."""

    hash: str
    parser: str
    units: tuple[UnitTuple, ...]
    secs: float


@dataclass
class CacheCounts:
    """What one process did with its cache (``swfs status`` shows them)."""

    hits: int = 0
    misses: int = 0
    published: int = 0
    corrupt: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def as_json(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "published": self.published,
            "corrupt": self.corrupt,
        }


class ParseCache(Protocol):
    """A shared parse cache, whatever holds it: a local folder (``LocalCache``)
    or an S3-compatible object store (``swfs.store.objcache``)."""

    counts: CacheCounts

    def lookup(self, h: str, parser: str) -> CachedParse | None: ...
    def publish(self, h: str, parser: str, units: Sequence[UnitTuple], *, secs: float) -> None: ...
    def get_file(self, h: str, name: str) -> bytes | None: ...
    def put_file(self, h: str, name: str, data: bytes) -> None: ...
    def describe(self) -> str: ...
    def gc(self, older_than: float, *, now: float | None = None) -> tuple[int, int]: ...
    def usage(self) -> tuple[int, int]: ...


def _parser_id(parser: str) -> str:
    return blake3.blake3(parser.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def _valid_hash(h: str) -> bool:
    return len(h) >= 16 and all(c in "0123456789abcdef:" for c in h)


def entry_key(h: str, parser: str) -> str | None:
    """Where a parse lives below the cache's root ('/'-separated), or None
    for a hash that is not one."""
    if not _valid_hash(h):
        return None
    return f"v{VERSION}/parses/{h[:2]}/{h}.{_parser_id(parser)}"


def file_key(h: str, name: str) -> str | None:
    """Where a file made from content ``h`` lives below the cache's root."""
    if not _valid_hash(h):
        return None
    return f"v{VERSION}/files/{h[:2]}/{h}.{_parser_id(name)}"


def encode_entry(h: str, parser: str, units: Sequence[UnitTuple], *, secs: float) -> bytes:
    body = json.dumps(
        [[str(n), str(loc), str(text)] for n, loc, text in units],
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8", "surrogateescape")
    header = {
        "v": VERSION,
        "hash": h,
        "parser": parser,
        "status": OK,
        "secs": round(float(secs), 4),
        "n": len(units),
        "len": len(body),
        "b3": blake3.blake3(body).hexdigest(),
    }
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


def decode_entry(data: bytes, h: str, parser: str) -> CachedParse:
    """The parse an entry holds; ValueError naming what is wrong with it."""
    head, body = _checked(data, h, "parser", parser, "parser")
    if head.get("status") != OK:
        raise ValueError("not a successful parse")
    raw = json.loads(body.decode("utf-8", "surrogateescape"))
    if not isinstance(raw, list) or len(raw) != head.get("n"):
        raise ValueError("its units are not the list its header counts")
    units: list[UnitTuple] = []
    for u in raw:
        if not (isinstance(u, list) and len(u) == 3 and all(isinstance(x, str) for x in u)):
            raise ValueError("a unit is not [name, locator, text]")
        units.append((u[0], u[1], u[2]))
    secs = head.get("secs")
    took = float(secs) if isinstance(secs, int | float) else 0.0
    return CachedParse(h, parser, tuple(units), took)


def encode_file(h: str, name: str, data: bytes) -> bytes:
    header = {"v": VERSION, "hash": h, "name": name, "len": len(data)}
    header["b3"] = blake3.blake3(data).hexdigest()
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + data


def decode_file(data: bytes, h: str, name: str) -> bytes:
    """The bytes a file entry holds; ValueError naming what is wrong."""
    return _checked(data, h, "name", name, "file")[1]


def _checked(data: bytes, h: str, key: str, value: str, what: str) -> tuple[dict[str, Any], bytes]:
    """An entry's header and body, once its header names content ``h`` and
    ``key`` ``value``, and its body has the length and digest the header
    gives; ValueError naming what is wrong."""
    cut = data.find(b"\n", 0, _HEADER_MAX)
    if cut < 0:
        raise ValueError("no header line")
    head = json.loads(data[:cut])
    if not isinstance(head, dict) or head.get("v") != VERSION:
        raise ValueError("not a version 1 entry")
    if head.get("hash") != h or head.get(key) != value:
        raise ValueError(f"it is the entry of another content or {what}")
    body = data[cut + 1 :]
    if head.get("len") != len(body):
        raise ValueError(f"{len(body)} bytes where its header says {head.get('len')}")
    if head.get("b3") != blake3.blake3(body).hexdigest():
        raise ValueError("its digest does not match its bytes")
    return head, body


class LocalCache:
    """A shared parse cache in a local directory (see the module's text)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()
        self.counts = CacheCounts()
        self._parses = self.root / f"v{VERSION}" / "parses"
        self._files = self.root / f"v{VERSION}" / "files"
        self._tmp = self.root / f"v{VERSION}" / "tmp"
        _private_dir(self.root)
        for d in (self.root / f"v{VERSION}", self._parses, self._files, self._tmp):
            with contextlib.suppress(FileExistsError):
                d.mkdir(mode=0o700)

    def describe(self) -> str:
        return str(self.root)

    def path(self, h: str, parser: str) -> Path:
        key = entry_key(h, parser)
        if key is None:
            raise ValueError(f"not a content hash: {h!r}")
        return self.root / key

    def lookup(self, h: str, parser: str) -> CachedParse | None:
        """*slow* (reads and checks an entry): the cached parse, or None."""
        try:
            path = self.path(h, parser)
        except ValueError:
            return None
        data = self._read(path)
        if data is None:
            self.counts.add("misses")
            return None
        try:
            parse = decode_entry(data, h, parser)
        except (ValueError, UnicodeDecodeError) as exc:
            self._corrupt(path, exc)
            self.counts.add("misses")
            return None
        self.counts.add("hits")
        return parse

    def publish(self, h: str, parser: str, units: Sequence[UnitTuple], *, secs: float) -> None:
        """*slow*: store a successful parse; readers see all of it or nothing."""
        self._write(self.path(h, parser), encode_entry(h, parser, units, secs=secs))
        self.counts.add("published")

    # -- files made from a content (renders, office-to-PDF conversions)
    def file_path(self, h: str, name: str) -> Path:
        key = file_key(h, name)
        if key is None:
            raise ValueError(f"not a content hash: {h!r}")
        return self.root / key

    def get_file(self, h: str, name: str) -> bytes | None:
        """*slow*: the file ``name`` made from content ``h`` (its bytes,
        checked), or None."""
        try:
            path = self.file_path(h, name)
        except ValueError:
            return None
        data = self._read(path)
        if data is None:
            return None
        try:
            body = decode_file(data, h, name)
        except ValueError as exc:
            self._corrupt(path, exc)
            return None
        self.counts.add("hits")
        return body

    def put_file(self, h: str, name: str, data: bytes) -> None:
        """*slow*: store the file ``name`` made from content ``h``."""
        self._write(self.file_path(h, name), encode_file(h, name, data))
        self.counts.add("published")

    # -- entries
    def _read(self, path: Path) -> bytes | None:
        """An entry's bytes (its mtime touched: in use), or None."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("%s: shared cache entry unreadable (%s): made here", path, exc)
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise ValueError("not a regular file of this user")
                data = f.read()
        except (OSError, ValueError) as exc:
            self._corrupt(path, exc)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # in use: gc --older-than keeps it
        return data

    def _corrupt(self, path: Path, exc: Exception) -> None:
        log.warning("%s: corrupt shared cache entry (%s): removed, made afresh", path, exc)
        with contextlib.suppress(OSError):
            path.unlink()
        self.counts.add("corrupt")

    def _write(self, path: Path, data: bytes) -> None:
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(mode=0o700)
        fd = -1
        tmp = self._tmp / f"{os.getpid()}.{threading.get_ident()}.{time.monotonic_ns()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.close(fd)
            fd = -1
            os.replace(tmp, path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def gc(self, older_than: float, *, now: float | None = None) -> tuple[int, int]:
        """Remove entries unused for ``older_than`` seconds, and temp files
        of writers that died; (entries removed, bytes freed)."""
        now = time.time() if now is None else now
        removed = freed = 0
        trees = (
            (self._parses, older_than),
            (self._files, older_than),
            (self._tmp, max(older_than, 3600.0)),
        )
        for tree, limit in trees:
            for dirpath, _dirs, files in os.walk(tree):
                for name in files:
                    p = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(p)
                        if now - st.st_mtime < limit:
                            continue
                        os.unlink(p)
                    except OSError:
                        continue
                    removed += tree is not self._tmp
                    freed += st.st_size
        return removed, freed

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) in the cache."""
        entries = size = 0
        for tree in (self._parses, self._files):
            for dirpath, _dirs, files in os.walk(tree):
                for name in files:
                    with contextlib.suppress(OSError):
                        size += os.lstat(os.path.join(dirpath, name)).st_size
                        entries += 1
        return entries, size


def _private_dir(root: Path) -> None:
    """Make ``root`` (mode 0700), or check that it is this user's and
    nobody else's to write: entries are trusted as parses of their hash."""
    try:
        root.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise CacheError(f"{root}: cannot make the shared cache: {exc.strerror}") from None
    try:
        st = os.stat(root)
    except OSError as exc:
        raise CacheError(f"{root}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"{root}: the shared cache is not a directory")
    if st.st_uid != os.geteuid():
        raise CacheError(
            f"{root}: the shared cache belongs to uid {st.st_uid}, not to this user "
            f"(uid {os.geteuid()}): each user keeps a cache of their own"
        )
    if st.st_mode & 0o077:
        try:
            os.chmod(root, 0o700)
        except OSError as exc:
            raise CacheError(f"{root}: cannot make the shared cache private: {exc}") from None


def describe_counts(cache: ParseCache | None, runs: int) -> dict[str, Any]:
    """``swfs status``'s ``parses``: parse jobs run by this process, and its
    cache's hits and misses."""
    info: dict[str, Any] = {"runs": runs, "cache": None}
    if cache is not None:
        info["cache"] = {"dir": cache.describe(), **cache.counts.as_json()}
    return info
