"""Upgrading a store of an older format to the present one, once, at open.

Everything that knows an old on-disk format lives here; the main read and
write paths (``swfs.store.records``, ``swfs.store.blobs``) know only the
present one.

- LMDB records (``upgrade_records``): ``Store`` reads ``format_version`` when
  it opens and, when it is older than ``records.FORMAT_VERSION``, calls this
  inside one write transaction that also sets the new version.  A crash or an
  error part way aborts that transaction: the store stays as it was, in its
  old format, and the next open starts again.  Format changelog: see
  ``swfs.store.records``.

  1 -> 2  file records gain their stat signature (``size,mtime,ctime,ino``
          and a newline) in front of the JSON.
  2 -> 3  a parse record's units (``"units": [[name, locator, text], ...]``
          inline) move to keys of their own in ``units``.

- Whole-file blobs (``chunk_whole_file_blobs``): the blob store before chunks
  kept each blob whole at ``blobs/ab/cdef...``.  ``BlobStore`` calls this
  when it opens and finds such a fan-out folder: each blob is chunked (its
  manifest and chunks fsynced and linked), read back, and only then is the
  whole file unlinked.  A crash between the two leaves both: the next open
  finds the manifest and unlinks the whole file.  A blob whose bytes do not
  hash to its name stays where it is (``whole_file_blobs`` lists it;
  ``swfs check`` reports it); one that cannot be chunked for want of space
  stops the open with ``UpgradeError``, nothing changed.

This module imports no other part of ``swfs.store``: the records' encoders
and the blob store come in as parameters.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import lmdb

log = logging.getLogger(__name__)

# Called at each step of an upgrade with what it is about to do; a test
# raises from it to stand for a crash there.
Fault = Callable[[str], None]

UnitRow = tuple[str, str, str]


class UpgradeError(OSError):
    """An old store could not be brought to the present format; it is left
    as it was."""


class RecordCodec(Protocol):
    """What ``upgrade_records`` needs of ``swfs.store.records``."""

    def loads(self, data: bytes) -> Any: ...

    def signature(self, size: int, mtime_ns: int, ctime_ns: int, ino: int) -> bytes: ...

    def write_parse(
        self,
        txn: lmdb.Transaction,
        key: bytes,
        fields: Mapping[str, Any],
        units: Sequence[UnitRow],
    ) -> None:
        """Store parse record ``key`` in the present format: ``fields`` holds
        ``status``, ``error``, ``secs`` and ``at``."""


def upgrade_records(
    txn: lmdb.Transaction,
    dbs: Mapping[str, Any],
    version: int,
    codec: RecordCodec,
    *,
    where: object,
    fault: Fault | None = None,
) -> int:
    """Rewrite the records of a store of format ``version`` in ``txn`` to
    the newest format this module knows; that format.  The caller commits
    ``txn`` together with the new ``format_version``, or aborts it."""
    if version == 1:
        _one_to_two(txn, dbs["files"], codec, where, fault)
        version = 2
    if version == 2:
        _two_to_three(txn, dbs["parses"], codec, where, fault)
        version = 3
    return version


def _one_to_two(
    txn: lmdb.Transaction, db: Any, codec: RecordCodec, where: object, fault: Fault | None
) -> None:
    """Format 2 prefixes file records with their stat signature."""
    log.info("%s: upgrading the store from format 1 to 2", where)
    rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    for key, value in rows:
        if fault is not None:
            fault(f"files {key!r}")
        d = codec.loads(value)
        sig = codec.signature(d["s"], d["m"], d["c"], d["i"])
        txn.put(key, sig + b"\n" + value, db=db)


def _two_to_three(
    txn: lmdb.Transaction, db: Any, codec: RecordCodec, where: object, fault: Fault | None
) -> None:
    """Format 3 keeps each unit of a parse under its own key.  A record that
    does not decode is left as it is: ``swfs check`` reports it."""
    log.info("%s: upgrading the store from format 2 to 3", where)
    rows = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    for key, value in rows:
        if fault is not None:
            fault(f"parses {key!r}")
        try:
            d = codec.loads(value)
            units = [(str(n), str(loc), str(text)) for n, loc, text in d.get("units") or ()]
            fields = {
                "status": str(d["status"]),
                "error": d.get("error"),
                "secs": float(d.get("secs") or 0.0),
                "at": float(d.get("at") or 0.0),
            }
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s: parse record %r not upgraded: %s", where, key, exc)
            continue
        codec.write_parse(txn, key, fields, units)


# -- whole-file blobs

_FANOUT_RE = re.compile(r"[0-9a-f]{2}")
_REST_RE = re.compile(r"[0-9a-f]{62}")


class ChunkingStore(Protocol):
    """What ``chunk_whole_file_blobs`` needs of ``swfs.store.blobs.BlobStore``."""

    root: Path

    def manifest_path(self, h: str) -> Path: ...

    def put_fd(self, fd: int, *, expected: str | None = None) -> str: ...

    def verify(self, h: str, *, deep: bool = True) -> bool: ...


def whole_file_path(root: Path, h: str) -> Path:
    """Where the format before chunks kept blob ``h`` under blob root ``root``."""
    return root / h[:2] / h[2:]


def whole_file_blobs(root: Path) -> Generator[str, None, None]:
    """The hashes of the whole-file blobs under blob root ``root``."""
    try:
        with os.scandir(root) as it:
            fans = list(it)
    except FileNotFoundError:
        return
    for fan in fans:
        if not (fan.is_dir(follow_symlinks=False) and _FANOUT_RE.fullmatch(fan.name)):
            continue
        with contextlib.suppress(FileNotFoundError), os.scandir(fan.path) as entries:
            for entry in entries:
                if _REST_RE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    yield fan.name + entry.name


def has_whole_file_blobs(root: Path) -> bool:
    """Whether blob root ``root`` holds a whole-file blob (cheap when it
    does not: one listing of ``root``)."""
    found = whole_file_blobs(root)
    try:
        return next(found, None) is not None
    finally:
        found.close()


def chunk_whole_file_blobs(
    store: ChunkingStore,
    *,
    is_mismatch: Callable[[BaseException], bool],
    fault: Fault | None = None,
) -> int:
    """Chunk every whole-file blob under ``store.root``; the number converted.
    ``is_mismatch`` tells an error that says the bytes do not hash to their
    name (the blob is then left whole, a warning logged).  An OSError (a
    full disk) stops the upgrade as ``UpgradeError`` naming the blob; any
    error stops it where it is: what was converted
    stays converted, the rest stays whole, nothing is lost."""
    done = 0
    for h in list(whole_file_blobs(store.root)):
        whole = whole_file_path(store.root, h)
        try:
            fd = os.open(whole, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            if fault is not None:
                fault(f"blob {h}")
            if not store.manifest_path(h).is_file():
                store.put_fd(fd, expected=h)
        except Exception as exc:
            if is_mismatch(exc):
                log.warning("blob %s does not hold its bytes: left unconverted", h[:16])
                continue
            if not isinstance(exc, OSError):
                raise
            raise UpgradeError(
                exc.errno or 0,
                f"cannot chunk this whole-file blob of the old format ({exc.strerror or exc}); "
                "it is kept as it was: free space and open the store again",
                str(whole),
            ) from exc
        finally:
            os.close(fd)
        if not store.verify(h):
            log.warning("blob %s: its chunked copy does not read back: kept whole", h[:16])
            continue
        if fault is not None:
            fault(f"unlink {h}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(whole)
        done += 1
    if done:
        log.info("%s: chunked %d whole-file blob(s) of the old format", store.root, done)
    return done
