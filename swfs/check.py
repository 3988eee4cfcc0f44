"""``swfs check``: one function per store invariant.

Each ``check_<invariant>(ws, repair)`` returns the problems it found; with
``repair`` it fixes what can be fixed without losing information (a corrupt
blob is only moved aside, never deleted, because its bytes may still matter
to whoever investigates).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swfs import control
from swfs.api import RelPath
from swfs.evidence.access import DB_NAME as JOURNAL_DB
from swfs.find.search import DB_NAME as SEARCH_DB
from swfs.find.textindex import DIR_NAME as TEXT_DIR
from swfs.history import snapshots as history
from swfs.history import staging
from swfs.store import gc
from swfs.store.fsutil import hash_file
from swfs.store.hashform import label as short_hash
from swfs.store.records import (
    UNIT_PREFIX_LEN,
    FileRecord,
    ParseRecord,
    Store,
    pdecode,
    pkey,
    stat_signature,
    unit_prefix,
)
from swfs.store.upgrade import whole_file_blobs, whole_file_path
from swfs.workspace import Workspace

log = logging.getLogger(__name__)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_STATUSES = {"ok", "failed", "unsupported"}


@dataclass(frozen=True)
class Problem:
    check: str
    message: str
    repaired: bool = False


def check_files(ws: Workspace, repair: bool) -> list[Problem]:
    """Every file record decodes and names a well-formed hash."""
    problems = []
    bad: list[bytes] = []
    with ws.store.read() as txn:
        for key, raw in txn.cursor(db=ws.store.dbs["files"]):
            try:
                rec = FileRecord.decode(raw)
                if not _HEX64.match(rec.hash):
                    raise ValueError(f"bad hash {rec.hash!r}")
            except (ValueError, KeyError, TypeError) as exc:
                bad.append(bytes(key))
                problems.append(
                    Problem("files", f"{pdecode(key)}: malformed record ({exc})", repair)
                )
    if repair and bad:
        # The next scan re-creates the records from the files themselves.
        with ws.store.write() as txn:
            for key in bad:
                txn.delete(key, db=ws.store.dbs["files"])
    return problems


def check_parses(ws: Workspace, repair: bool) -> list[Problem]:
    """Every parse record is well-formed and has all its units, each readable;
    no unit belongs to no record.  Malformed records are dropped with their
    units (the files are re-parsed later), stray units are dropped."""
    problems = []
    bad: list[bytes] = []
    prefixes: set[bytes] = set()
    store = ws.store
    with store.read() as txn:
        for key, raw in txn.cursor(db=store.dbs["parses"]):
            k = bytes(key).decode("utf-8", "replace")
            prefixes.add(unit_prefix(bytes(key)))
            try:
                h, _, parser = k.partition("|")
                if not _HEX64.match(h) or not parser:
                    raise ValueError("bad key")
                rec = ParseRecord.decode(raw)
                if rec.status not in _STATUSES:
                    raise ValueError(f"bad status {rec.status!r}")
                units = store.unit_names(h, parser, txn)
                if len(units) != rec.units:
                    raise ValueError(f"{len(units)} of its {rec.units} units")
                for unit in units:
                    if "/" in unit.name or not unit.name:
                        raise ValueError(f"bad unit name {unit.name!r}")
                    if store.get_unit(h, parser, unit.name, txn) is None:
                        raise ValueError(f"unit {unit.name!r} not found by its name")
            except (ValueError, KeyError, TypeError) as exc:
                bad.append(bytes(key))
                problems.append(Problem("parses", f"{k}: malformed parse record ({exc})", repair))
        stray: list[bytes] = []
        for key, _ in txn.cursor(db=store.dbs["units"]):
            if bytes(key[:UNIT_PREFIX_LEN]) not in prefixes:
                stray.append(bytes(key))
    if stray:
        problems.append(
            Problem("parses", f"{len(stray)} unit records belong to no parse record", repair)
        )
    if repair and (bad or stray):
        with store.write() as txn:
            for key in bad:
                store.delete_parse(txn, key)
            for key in stray:
                txn.delete(key, db=store.dbs["units"])
    return problems


def _readable_files(ws: Workspace) -> dict[str, FileRecord]:
    """The file records that decode (check_files reports the others)."""
    out = {}
    with ws.store.read() as txn:
        for key, raw in txn.cursor(db=ws.store.dbs["files"]):
            try:
                # A long path's key is its digest: the record carries the path.
                out[Store.file_path_of(key, raw)] = FileRecord.decode(raw)
            except (ValueError, KeyError, TypeError):
                continue
    return out


def _kept(rec: FileRecord) -> list[int]:
    """A repaired version's size, mode, uid and gid: the record's."""
    return [rec.size, rec.mode, rec.uid, rec.gid]


def check_versions(ws: Workspace, repair: bool) -> list[Problem]:
    """Version numbers strictly increase; a present file's last version is its hash."""
    problems = []
    fixes: dict[str, list[list[Any]]] = {}
    files = _readable_files(ws)
    with ws.store.read() as txn:
        for rel, versions in ws.store.iter_versions(txn):
            numbers = [v[0] for v in versions]
            fixed = versions
            if numbers != sorted(set(numbers)) or any(not _HEX64.match(v[1]) for v in versions):
                problems.append(Problem("versions", f"{rel}: version list out of order", repair))
                fixed = sorted(
                    {v[0]: v for v in versions if _HEX64.match(v[1])}.values(), key=lambda v: v[0]
                )
            rec = files.get(rel)
            if rec is not None and (not fixed or fixed[-1][1] != rec.hash):
                problems.append(
                    Problem(
                        "versions",
                        f"{rel}: current content {short_hash(rec.hash)} is not its "
                        "last recorded version",
                        repair,
                    )
                )
                number = fixed[-1][0] + 1 if fixed else 1
                fixed = [*fixed, [number, rec.hash, rec.mtime_ns / 1e9, "external", *_kept(rec)]]
            if fixed is not versions:
                fixes[rel] = fixed
        for rel, rec in files.items():
            if txn.get(pkey(rel), db=ws.store.dbs["versions"]) is None:
                problems.append(
                    Problem("versions", f"{rel}: tracked file without versions", repair)
                )
                fixes[rel] = [[1, rec.hash, rec.mtime_ns / 1e9, "external", *_kept(rec)]]
    if repair and fixes:
        with ws.store.write() as txn:
            for rel, versions in fixes.items():
                ws.store.put_versions(txn, rel, versions)
    return problems


def check_views(ws: Workspace, repair: bool) -> list[Problem]:
    """No view claims to describe its file's present content (freshness
    current, or failed) when the file holds other bytes: the file is stat'ed,
    and rehashed when its stat signature differs from its record's.  Repair
    records the file as it is, which makes its view stale (re-parsed later)."""
    problems = []
    wrong: list[str] = []
    files = _readable_files(ws)
    for rel, rec in sorted(files.items()):
        if not rec.parser or ws.store.parse_status(rec.hash, rec.parser) not in ("ok", "failed"):
            continue  # pending, stale or unsupported: claims no present content
        claim = "current" if ws.store.parse_status(rec.hash, rec.parser) == "ok" else "failed"
        try:
            st = os.lstat(ws.abspath(rel))
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            problems.append(
                Problem("views", f"{rel}: its view claims {claim} but the file is gone", repair)
            )
            wrong.append(rel)
            continue
        if stat_signature(st) == rec.signature():
            continue
        try:
            actual = hash_file(ws.abspath(rel), mmap=False)
        except OSError as exc:
            log.warning("%s: cannot read to check its view: %s", rel, exc.strerror)
            continue
        if actual != rec.hash:
            problems.append(
                Problem(
                    "views",
                    f"{rel}: its view claims {claim} for {short_hash(rec.hash)} "
                    f"but the file holds {short_hash(actual)}",
                    repair,
                )
            )
            wrong.append(rel)
    if repair:
        for rel in wrong:
            ws.check_file(RelPath(rel), force=True)
    return problems


def _referenced(ws: Workspace) -> set[str]:
    refs: set[str] = set()
    with ws.store.read() as txn:
        for _, versions in ws.store.iter_versions(txn):
            refs.update(v[1] for v in versions)
    for name in ws.store.snapshot_names():
        refs.update(e[0] for e in (ws.store.get_snapshot(name) or {}).values())
    refs.update(e[0] for e in ws.baseline_manifest().values())
    return refs


def check_blobs(ws: Workspace, repair: bool) -> list[Problem]:
    """Every blob is readable and names only chunks that exist; no
    whole-file blob of the format before chunks is left (opening the store
    chunks the sound ones); no temp litter; snapshots' bytes exist."""
    problems = []
    litter = ws.blobs.cleanup_temp() if repair else 0
    if litter:
        problems.append(Problem("blobs", f"{litter} leftover temporary file(s)", True))
    for h in list(ws.blobs.iter_hashes()):
        if ws.blobs.verify(h, deep=False):
            continue
        missing = ws.blobs.missing_chunks(h)
        if missing:
            # The manifest is sound: nothing to move aside.  The chunks
            # check says what became of the chunks.
            problems.append(
                Problem(
                    "blobs",
                    f"blob b3:{h[:16]} names {len(missing)} missing chunk(s) "
                    f"(first b3:{missing[0][:16]}): its version cannot be read",
                )
            )
            continue
        path = ws.blobs.path(h)
        problems.append(Problem("blobs", f"{path}: content does not match its hash", repair))
        if repair:
            os.replace(path, ws.store_dir / f"corrupt-blob-{h}")
    # Whole-file blobs of the format before chunks that opening the store
    # left whole (swfs.store.upgrade): rotten, or chunked wrong.
    for whole in list(whole_file_blobs(ws.blobs.root)):
        path = whole_file_path(ws.blobs.root, whole)
        if hash_file(path) == whole:
            problems.append(
                Problem("blobs", f"{path}: a whole-file blob of the old format left unchunked")
            )
            continue
        problems.append(
            Problem("blobs", f"{path}: content does not match its hash (old format)", repair)
        )
        if repair:
            os.replace(path, ws.store_dir / f"corrupt-blob-{whole}")
    for name in ws.store.snapshot_names():
        if history.snapshot_kind(ws, name) == history.KIND_BASELINE:
            continue  # a former baseline holds what the history kept, not a copy
        for rel, entry in (ws.store.get_snapshot(name) or {}).items():
            if not ws.blobs.has(entry[0]):
                problems.append(
                    Problem(
                        "blobs", f"snapshot {name}: bytes of {rel} ({short_hash(entry[0])}) missing"
                    )
                )
    return problems


def check_chunks(ws: Workspace, repair: bool) -> list[Problem]:
    """Every chunk's bytes hash to its name.  A corrupt chunk is moved aside
    with repair (the versions naming it then read as damaged, which
    check_blobs reports), never deleted."""
    bad = list(ws.blobs.bad_chunks())
    if not bad:
        return []
    naming: dict[str, int] = {c: 0 for c, _ in bad}
    for h in ws.blobs.iter_hashes():
        try:
            m = ws.blobs.manifest(h)
        except (OSError, ValueError):
            continue
        for c in set(m.chunks()) & naming.keys():
            naming[c] += 1
    problems = []
    for c, why in bad:
        problems.append(
            Problem(
                "chunks",
                f"chunk b3:{c[:16]} ({why}), named by {naming[c]} blob(s)",
                repair,
            )
        )
        if repair:
            os.replace(ws.blobs.chunk_path(c), ws.store_dir / f"corrupt-chunk-{c}")
    return problems


def check_orphans(ws: Workspace, repair: bool) -> list[Problem]:
    """Blobs that no version, snapshot or baseline refers to."""
    refs = _referenced(ws) | gc.reclaimable(ws)  # a temp file's drafts: gc's to drop
    orphans = [h for h in ws.blobs.iter_hashes() if h not in refs]
    problems = [
        Problem("orphans", f"blob {short_hash(h)} is referenced by nothing", repair)
        for h in orphans
    ]
    if repair:
        for h in orphans:
            ws.blobs.remove(h)
        ws.blobs.collect()  # the chunks only those blobs named
    return problems


def check_staged_commit(ws: Workspace, repair: bool) -> list[Problem]:
    """A commit of a staged mount that a crash interrupted: which of its
    paths are in SRC already and which are still staged (from the bytes).
    ``repair`` finishes it."""
    if ws.staging is None or ws.staging.intent() is None:
        return []
    report = staging.committed_report(ws.staging)
    if repair:
        staging.commit_ws(ws, [])
    done = sum(1 for _, state in report if state == "committed")
    out = [
        Problem(
            "staged",
            f"a commit was interrupted: {done} of {len(report)} path(s) committed; "
            "`swfs commit TARGET` finishes it",
            repaired=repair,
        )
    ]
    out += [Problem("staged", f"{rel}: {state}", repaired=repair) for rel, state in report]
    return out


def _quick_check(db: Path) -> list[str]:
    """SQLite's quick_check of ``db``, opened read-only (nothing of a live
    daemon's WAL is touched): ``["ok"]``, or what is wrong."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            return [str(r[0]) for r in con.execute("PRAGMA quick_check")]
        finally:
            con.close()
    except sqlite3.Error as exc:
        return [str(exc)]


def check_search(ws: Workspace, repair: bool) -> list[Problem]:
    """The search index answers.  A running daemon says how its index is
    (it rebuilds a broken one itself); without one, the index is checked
    read-only, and repair removes a broken one (the next ``swfs index``,
    ``swfs search`` or mount builds it again from the parse cache)."""
    try:
        health = control.request(ws.store_dir, "search_state", io_timeout=10)
    except control.ControlUnavailable:
        health = None
    except (control.ControlError, OSError) as exc:
        return [Problem("search", f"the daemon did not say how its search index is: {exc}")]
    if health is not None:
        if health.get("state") == "ok":
            return []
        why = health.get("reason") or "unknown"
        return [
            Problem("search", f"the search index is unavailable ({why}); the daemon rebuilds it")
        ]
    db = ws.store_dir / SEARCH_DB
    if not db.exists():
        return []
    rows = _quick_check(db)
    if rows == ["ok"]:
        return []
    if repair:  # the full-text half names units of this database: it goes too
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(db) + suffix)
        shutil.rmtree(ws.store_dir / TEXT_DIR, ignore_errors=True)
    return [Problem("search", f"the search index is damaged: {'; '.join(rows[:3])}", repair)]


def check_journal(ws: Workspace, repair: bool) -> list[Problem]:
    """The access journal stores what it records.  A running daemon says how
    its journal is (it starts a failed one afresh and keeps the old file);
    without one, the file is checked read-only, and repair renames a damaged
    one aside (never deletes it: it is the only record of those accesses)."""
    try:
        health = control.request(ws.store_dir, "journal_state", io_timeout=10)
    except control.ControlUnavailable:
        health = None
    except (control.ControlError, OSError) as exc:
        return [Problem("journal", f"the daemon did not say how its access journal is: {exc}")]
    if health is not None:
        state = health.get("state")
        if state == "failing":
            why = health.get("reason") or "unknown"
            return [
                Problem(
                    "journal",
                    f"the access journal cannot store what it records ({why}); "
                    "the daemon keeps it in memory and tries again",
                )
            ]
        if state == "reopened":
            kept = f"; the failed file is kept as {health['kept']}" if health.get("kept") else ""
            if repair:
                control.request(ws.store_dir, "journal_ack", io_timeout=10)
            return [
                Problem(
                    "journal",
                    f"the access journal failed ({health.get('reason')}) and was started "
                    f"afresh at {health.get('at')}{kept}",
                    repair,
                )
            ]
        return []
    db = ws.store_dir / JOURNAL_DB
    if not db.exists():
        return []
    rows = _quick_check(db)
    if rows == ["ok"]:
        return []
    if repair:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        os.replace(db, db.with_name(f"{JOURNAL_DB}.failed-{stamp}"))
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(db) + suffix)
    return [Problem("journal", f"the access journal is damaged: {'; '.join(rows[:3])}", repair)]


CHECKS: list[Callable[[Workspace, bool], list[Problem]]] = [
    check_files,
    check_parses,
    check_versions,
    check_views,
    check_chunks,
    check_blobs,
    check_orphans,
    check_staged_commit,
    check_search,
    check_journal,
]


def run_checks(ws: Workspace, *, repair: bool = False) -> list[Problem]:
    problems: list[Problem] = []
    for check in CHECKS:
        problems.extend(check(ws, repair))
    return problems
