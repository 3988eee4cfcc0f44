"""``swfs gc``: drop what no snapshot, submission, baseline or retention
window needs.

What is *pinned* (never dropped): the hashes of the present files, of the
baseline, and of every snapshot (submissions and former baselines are
snapshots).  A version older than the retention window whose hash is not
pinned is dropped from its path's history (numbers of the others stay); a
deleted path left with no version loses its history.  What is *live* is the
pinned hashes plus those of the versions kept.  Blobs, parse records and
cached diffs outside it are deleted.

The live set is whole-file hashes, computed here; blobs are deleted through
the blob store's own interface (``iter_hashes``, ``remove``), so this works
whatever the blob store's layout.  The blob listing is taken *before* the
live set, so a blob stored while gc runs is never a candidate.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from swfs.store.blobs import BlobStore
from swfs.store.records import Store
from swfs.store.reserve import RESERVE_NAME

if TYPE_CHECKING:
    import lmdb

log = logging.getLogger(__name__)

DAY = 86400.0
RECLAIM = b"reclaim:"  # meta key prefix: + hash of a blob a dropped temp history may leave

T = TypeVar("T")


class Collected(Protocol):
    """What gc reads and changes of a workspace (``swfs.workspace.Workspace``)."""

    @property
    def store(self) -> Store: ...
    @property
    def store_dir(self) -> Path: ...
    @property
    def blobs(self) -> BlobStore: ...
    def baseline_manifest(self) -> dict[str, list[Any]]: ...
    def spending_reserve(self, fn: Callable[[], T]) -> T: ...
    def bump_generation(self, txn: lmdb.Transaction) -> None: ...


@dataclass
class GCReport:
    keep_days: float
    blobs_removed: int = 0
    blob_bytes: int = 0
    blobs_kept: int = 0
    versions_dropped: int = 0
    histories_dropped: int = 0
    parses_dropped: int = 0
    parse_bytes: int = 0
    diffs_dropped: int = 0
    diff_bytes: int = 0
    chunks_removed: int = 0  # chunks no remaining blob names (swfs.blobs.collect)
    chunk_bytes: int = 0  # their bytes on disk, compressed
    dry_run: bool = False
    secs: float = 0.0

    def freed_bytes(self) -> int:
        return self.blob_bytes + self.parse_bytes + self.diff_bytes

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "freed_bytes": self.freed_bytes()}


def pinned_hashes(ws: Collected) -> set[str]:
    """Hashes nothing may drop: present files, the baseline, every snapshot."""
    pinned = {e[0] for e in ws.baseline_manifest().values()}
    for name in ws.store.snapshot_names():
        pinned.update(e[0] for e in (ws.store.get_snapshot(name) or {}).values())
    with ws.store.read() as txn:
        for _, rec in ws.store.iter_files(txn):
            pinned.add(rec.hash)
    return pinned


def collect(ws: Collected, *, keep_days: float = 7.0, dry_run: bool = False) -> GCReport:
    """*slow*: reclaim; returns what was (or, dry, would be) freed.

    On a full disk the store's reserve is spent for the two transactions
    (the drops before any blob goes, the state log's line after): gc must be
    able to free a disk that is full (swfs.reserve)."""
    if keep_days < 0:
        raise ValueError("--keep must be 0 or more days")
    t0 = time.monotonic()
    listed = list(ws.blobs.iter_hashes())  # before the live set: see the docstring
    cutoff = time.time() - keep_days * DAY
    pinned = pinned_hashes(ws)
    store = ws.store
    reclaim = reclaimable(ws)
    if dry_run:
        with store.read() as txn:
            report, live = _drop(ws, txn, keep_days, cutoff, pinned, reclaim, dry_run=True)
    else:
        store.ensure_room(1 << 20)

        def drop() -> tuple[GCReport, set[str]]:
            with store.write() as txn:
                return _drop(ws, txn, keep_days, cutoff, pinned, reclaim, dry_run=False)

        report, live = ws.spending_reserve(drop)
    for h in listed:
        if h in live:
            report.blobs_kept += 1
            continue
        size = 0
        with contextlib.suppress(OSError):
            size = ws.blobs.size(h)
        report.blobs_removed += 1
        report.blob_bytes += size
        if not dry_run:
            ws.blobs.remove(h)
    if not dry_run:
        # A removed blob only drops its manifest: the chunks no other blob
        # names go now.
        swept = ws.blobs.collect()
        report.chunks_removed, report.chunk_bytes = swept.chunks_removed, swept.bytes_removed
    report.secs = round(time.monotonic() - t0, 4)
    if not dry_run:

        def journal() -> None:
            with store.write() as txn:
                store.append_state_log(txn, "gc", **report.as_json())
                ws.bump_generation(txn)

        ws.spending_reserve(journal)
        store.flush()
    return report


def _drop(
    ws: Collected,
    txn: lmdb.Transaction,
    keep_days: float,
    cutoff: float,
    pinned: set[str],
    reclaim: set[str],
    *,
    dry_run: bool,
) -> tuple[GCReport, set[str]]:
    """Decide (and unless ``dry_run`` drop, in ``txn``) the versions, parses
    and diffs nothing needs; the report so far and the live hashes."""
    store = ws.store
    report = GCReport(keep_days=keep_days, dry_run=dry_run)
    live = set(pinned)
    view_hashes: set[str] = set()
    present = set()
    for rel, rec in store.iter_files(txn):
        present.add(rel)
        if rec.view_hash:
            view_hashes.add(rec.view_hash)
    changes: list[tuple[str, list[list[Any]]]] = []
    for rel, versions in store.iter_versions(txn):
        kept = [
            v
            for i, v in enumerate(versions)
            if v[2] >= cutoff or v[1] in pinned or (rel in present and i == len(versions) - 1)
        ]
        live.update(v[1] for v in kept)
        if len(kept) != len(versions):
            report.versions_dropped += len(versions) - len(kept)
            if not kept:
                report.histories_dropped += 1
            changes.append((rel, kept))
    # Parses and diffs: a parse of a hash nothing keeps cannot be shown.
    parse_live = live | view_hashes
    dead_parses: list[bytes] = []
    for key, raw in txn.cursor(db=store.dbs["parses"]):
        h = bytes(key).split(b"|", 1)[0].decode("ascii", "replace")
        if h not in parse_live:
            dead_parses.append(bytes(key))
            report.parse_bytes += len(raw)
    # Cached diffs are keyed by a digest that names no hash: all of them
    # go (the review renders again on demand).
    dead_diffs: list[bytes] = []
    for key, raw in txn.cursor(db=store.dbs["diffs"]):
        dead_diffs.append(bytes(key))
        report.diff_bytes += len(raw)
    report.parses_dropped = len(dead_parses)
    report.diffs_dropped = len(dead_diffs)
    if not dry_run:
        meta = store.dbs["meta"]
        for h in reclaim:  # decided on below like any other blob
            txn.delete(RECLAIM + h.encode(), db=meta)
        for rel, kept in changes:
            store.put_versions(txn, rel, kept)
        for key in dead_parses:
            store.delete_parse(txn, key)  # and its units
        for key in dead_diffs:
            txn.delete(key, db=store.dbs["diffs"])
    return report, live


def reclaimable(ws: Collected) -> set[str]:
    """Hashes of blobs a dropped temp history may have left (``RECLAIM``)."""
    out = set()
    with ws.store.read() as txn:
        cur = txn.cursor(db=ws.store.dbs["meta"])
        if cur.set_range(RECLAIM):
            for key in cur.iternext(values=False):
                k = bytes(key)
                if not k.startswith(RECLAIM):
                    break
                out.add(k[len(RECLAIM) :].decode("ascii", "replace"))
    return out


def reserve_bytes(ws: Collected) -> int:
    """Space the store holds back for a full disk (``swfs.store.reserve``)."""

    try:
        return os.stat(ws.store_dir / RESERVE_NAME).st_blocks * 512
    except OSError:
        return 0


def store_bytes(ws: Collected) -> int:
    """Space the store takes on disk (database and blobs), whatever its
    layout; not its reserve for a full disk (``reserve_bytes``)."""

    total = 0
    stack = [str(ws.store_dir)]
    reserve = str(ws.store_dir / RESERVE_NAME)
    seen: set[tuple[int, int]] = set()
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.path != reserve and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _op_gc(ws: Collected, req: dict[str, Any]) -> Any:
    return collect(
        ws, keep_days=float(req.get("keep_days", 7.0)), dry_run=bool(req.get("dry_run"))
    ).as_json()


CONTROL_OPS = {"gc": _op_gc}
