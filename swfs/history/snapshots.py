"""Snapshots, submissions, former baselines and the one-step reset.

A *snapshot* is a named manifest (``snapshots``) plus what this module keeps
beside it (``snapinfo``: when, which kind, and the directories that held no
file then, which a manifest of files cannot name).  A *submission* is a
snapshot plus the list of deliverables (``submissions``).  Re-baselining
keeps the previous baseline as a snapshot of kind ``baseline``.

``reset`` brings the tree to a target state (the baseline or a snapshot) by
acting on the differences only: the target manifest is compared with the
file table in memory (no walk of SRC, no hashing of unchanged files), then
each difference is undone on disk and recorded.  Every byte the reset needs
is checked to be available before anything is touched, and every byte it
overwrites or removes is kept first, as a write through the mount would be.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import errno
import functools
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import lmdb

from swfs import api, permissions
from swfs.api import Access, Cause, ChangeStatus, FileState, RelPath, WorkspaceError, WriteProtocol
from swfs.history.versioning import VersionWindows
from swfs.store import seed
from swfs.store.blobs import BlobStore, HashMismatch
from swfs.store.fsutil import copy_fd, open_dir_noatime, open_to_read
from swfs.store.gc import RECLAIM
from swfs.store.records import Store, dumps, loads, pdecode

log = logging.getLogger(__name__)

BASELINE = api.BASELINE
KIND_SNAPSHOT = "snapshot"
KIND_SUBMISSION = "submission"
KIND_BASELINE = "baseline"
_STAGING = ".swfs-reset"  # temp name suffix of a file being written by a reset
_HASH_AT = len(b'{"h":"')
_BATCH_SYNC = 64  # files written back above which one syncfs replaces their fsyncs


def _error(message: str) -> Exception:
    return WorkspaceError(message)


class HistoryLimits(Protocol):
    @property
    def temp_lifetime(self) -> float: ...


class Recorded(Protocol):
    """What history reads and changes of a workspace
    (``swfs.workspace.Workspace``; a world reads through it too)."""

    @property
    def src(self) -> Path: ...
    @property
    def store(self) -> Store: ...
    @property
    def store_dir(self) -> Path: ...
    @property
    def blobs(self) -> BlobStore: ...
    @property
    def config(self) -> HistoryLimits: ...
    @property
    def staging(self) -> object | None: ...
    def abspath(self, rel: str) -> str: ...
    def is_hidden(self, rel: str) -> bool: ...
    @property
    def windows(self) -> VersionWindows: ...
    @property
    def writes(self) -> WriteProtocol: ...
    def baseline_manifest(self) -> dict[str, list[Any]]: ...
    def manifest(self) -> dict[str, list[Any]]: ...
    def open_blob(self, path: str) -> int: ...
    def scan(self) -> object: ...
    def check_file(
        self, rel: RelPath, *, cause: Cause = ..., force: bool = ...
    ) -> FileState | None: ...
    def preserve_inode(self, rel: RelPath, *, keep_temp: bool = ...) -> None: ...
    def record_rename(self, old: RelPath, new: RelPath) -> None: ...
    def bump_generation(self, txn: lmdb.Transaction) -> None: ...
    def notify_changed(self, rel: str) -> None: ...
    def add_sync_listener(self, fn: Callable[[RelPath], None]) -> None: ...


# ----------------------------------------------------------------- names
def check_name(ws: Recorded, name: str, what: str = "snapshot") -> None:
    """A new snapshot or submission name: usable as a directory name under
    ``.versions/@snapshots`` and not taken."""
    if not name or "/" in name or name.startswith(".") or "@" in name:
        raise _error(f"{name!r}: not a valid {what} name (no '/', '@' or leading '.')")
    if len(name.encode("utf-8", "surrogateescape")) > 200:
        raise _error(f"{name[:40]}...: {what} name longer than 200 bytes")
    if name == BASELINE:
        raise _error(f"{name!r}: reserved for the present baseline")
    if name.isdigit():
        raise _error(f"{name!r}: a number would read as a version number in PATH@N")
    if ws.store.get_snapshot(name) is not None:
        raise _error(f"{name!r}: a snapshot of that name exists already")


def _utc(t: float, *, seconds: bool = False) -> str:
    fmt = "%Y-%m-%dT%H:%M:%SZ" if seconds else "%Y-%m-%dT%H:%MZ"
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime(fmt)


# ------------------------------------------------------------ directories
def empty_dirs(ws: Recorded, manifest: dict[str, Any]) -> list[str]:
    """*slow*: directories under SRC that hold no file of ``manifest`` (at
    any depth): what a reset must re-create, since a manifest names files only."""
    return folders(ws, manifest)[0]


def folders(ws: Recorded, manifest: dict[str, Any]) -> tuple[list[str], dict[str, list[int]]]:
    """*slow*: ``empty_dirs``, and the ``[mode, uid, gid]`` of every folder
    under SRC ('' the root), which a world shows (swfs.permissions)."""
    modes: dict[str, list[int]] = {}
    implied: set[str] = set()
    for rel in manifest:
        head = rel.rpartition("/")[0]
        while head and head not in implied:
            implied.add(head)
            head = head.rpartition("/")[0]
    out: list[str] = []
    stack = [""]
    while stack:
        parent = stack.pop()
        try:
            dfd = open_dir_noatime(ws.abspath(parent))
        except OSError:
            continue
        try:
            modes[parent] = permissions.as_record(permissions.of_stat(os.fstat(dfd)))
            with os.scandir(dfd) as it:
                for entry in it:
                    rel = f"{parent}/{entry.name}" if parent else entry.name
                    if ws.is_hidden(rel):
                        continue
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    stack.append(rel)
                    if rel not in implied:
                        out.append(rel)
        finally:
            os.close(dfd)
    return sorted(out), modes


# -------------------------------------------------------------- snapshots
@dataclass(frozen=True)
class SnapshotInfo:
    name: str
    kind: str
    at: float | None
    files: int
    bytes: int
    submission: bool = False


def snapshot_info(ws: Recorded, name: str, txn: lmdb.Transaction | None = None) -> dict[str, Any]:
    db = ws.store.dbs["snapinfo"]
    if txn is None:
        with ws.store.read() as t:
            raw = t.get(name.encode("utf-8", "surrogateescape"), db=db)
    else:
        raw = txn.get(name.encode("utf-8", "surrogateescape"), db=db)
    return {"kind": KIND_SNAPSHOT, "at": None, "dirs": []} if raw is None else loads(raw)


def _put_info(txn: lmdb.Transaction, ws: Recorded, name: str, info: dict[str, Any]) -> None:
    txn.put(name.encode("utf-8", "surrogateescape"), dumps(info), db=ws.store.dbs["snapinfo"])


def snapshot_kind(ws: Recorded, name: str) -> str:
    return str(snapshot_info(ws, name).get("kind", KIND_SNAPSHOT))


def take_snapshot(ws: Recorded, name: str, *, kind: str = KIND_SNAPSHOT) -> int:
    """*slow*: ``record_snapshot`` plus the directories it cannot name."""
    check_name(ws, name, "submission" if kind == KIND_SUBMISSION else "snapshot")
    files = record_snapshot(ws, name)
    manifest = ws.store.get_snapshot(name) or {}
    dirs, modes = folders(ws, manifest)
    with ws.store.write() as txn:
        info = {"at": time.time(), "kind": kind, "dirs": dirs, "dir_modes": modes}
        _put_info(txn, ws, name, info)
    _index(ws).get()  # warm for a reset to come (a snapshot costs a pass anyway)
    return files


def list_snapshots(ws: Recorded) -> list[SnapshotInfo]:
    subs = set(submission_names(ws))
    out = []
    for name in ws.store.snapshot_names():
        manifest = ws.store.get_snapshot(name) or {}
        info = snapshot_info(ws, name)
        out.append(
            SnapshotInfo(
                name=name,
                kind=info.get("kind", KIND_SNAPSHOT),
                at=info.get("at"),
                files=len(manifest),
                bytes=sum(int(e[1] or 0) for e in manifest.values()),
                submission=name in subs,
            )
        )
    out.sort(key=lambda s: (s.at or 0.0, s.name))
    return out


def delete_snapshot(ws: Recorded, name: str) -> int:
    """Forget snapshot ``name`` (its bytes go at the next ``gc``); its file count."""
    manifest = ws.store.get_snapshot(name)
    if manifest is None:
        raise _error(f"{name!r}: no such snapshot (see `swfs snapshots`)")
    if get_submission(ws, name) is not None:
        raise _error(f"{name!r}: the snapshot of a submission; it is kept with the submission")
    key = name.encode("utf-8", "surrogateescape")
    _index(ws).manifests.pop(name, None)
    with ws.store.write() as txn:
        txn.delete(key, db=ws.store.dbs["snapshots"])
        txn.delete(key, db=ws.store.dbs["snapinfo"])
        ws.store.append_state_log(txn, "snapshot-delete", name=name, files=len(manifest))
        ws.bump_generation(txn)
    ws.store.flush()
    return len(manifest)


def record_snapshot(ws: Recorded, name: str) -> int:
    """*slow*: record the present state as ``name`` and keep every byte it names."""
    if not name or "/" in name or name.startswith(".") or len(name.encode()) > 200:
        raise WorkspaceError(f"{name!r}: not a valid snapshot name")
    if name in ws.store.snapshot_names():
        raise WorkspaceError(f"snapshot {name!r} exists already")
    ws.scan()
    manifest = ws.manifest()
    for rel, entry in manifest.items():
        if ws.blobs.has(entry[0]):
            continue
        try:
            fd = open_to_read(ws.abspath(rel), os.O_NOFOLLOW)
        except OSError as exc:
            raise WorkspaceError(f"{rel}: cannot read for the snapshot: {exc.strerror}") from exc
        try:
            ws.blobs.put_fd(fd, expected=entry[0])
        except HashMismatch as exc:
            raise WorkspaceError(f"{rel}: changed while the snapshot was taken") from exc
        finally:
            os.close(fd)
    ws.store.put_snapshot(name, manifest)
    ws.windows.close_all()  # the versions it names are never replaced
    with ws.store.write() as txn:
        ws.store.append_state_log(txn, "snapshot", name=name, files=len(manifest))
        ws.bump_generation(txn)
    ws.store.flush()
    return len(manifest)


def set_baseline(ws: Recorded) -> int:
    """*slow*: record the present file table as the baseline (the one it
    replaces is kept as a snapshot: ``keep_previous_baseline``)."""
    manifest = ws.manifest()
    # Deleted since the last baseline: what .review shows of them goes too.
    gone = [rel for rel in ws.baseline_manifest() if rel not in manifest]
    dirs, dir_modes = folders(ws, manifest)
    ws.store.ensure_room(400 * len(manifest))
    with ws.store.write() as txn:
        meta = ws.store.dbs["meta"]
        data = dumps(manifest)
        keep_previous_baseline(ws, txn, data)
        txn.put(b"baseline", data, db=meta)
        txn.put(b"baseline_dirs", dumps(dirs), db=meta)
        txn.put(b"baseline_dir_modes", dumps(dir_modes), db=meta)
        txn.put(b"baseline", dumps(manifest), db=meta)
        ws.windows.close_all()
        txn.put(b"baseline_at", dumps(time.time()), db=meta)
        gen = int(bytes(txn.get(b"baseline_gen", db=meta) or b"0"))
        txn.put(b"baseline_gen", str(gen + 1).encode(), db=meta)
        ws.store.append_state_log(txn, "baseline", files=len(manifest))
        ws.bump_generation(txn)
    ws.store.flush()
    for rel in [*manifest, *gone]:
        ws.notify_changed(rel)
    return len(manifest)


def keep_previous_baseline(ws: Recorded, txn: lmdb.Transaction, new: bytes) -> str | None:
    """Inside the transaction that replaces the baseline: keep the one it
    replaces as snapshot ``baseline-<when it was taken>``.  Its bytes are what
    the history kept (every byte written over through the mount), like the
    baseline's own, not a copy made now.  None when there was none to keep,
    or it is the same as the ``new`` one."""
    meta = ws.store.dbs["meta"]
    raw = txn.get(b"baseline", db=meta)
    if raw is None or bytes(raw) == new:
        return None
    manifest = bytes(raw)
    at_raw = txn.get(b"baseline_at", db=meta)
    at = float(loads(at_raw)) if at_raw is not None else time.time()
    snaps = ws.store.dbs["snapshots"]
    name = f"baseline-{_utc(at)}"
    if txn.get(name.encode(), db=snaps) is not None:
        name = f"baseline-{_utc(at, seconds=True)}"
        n = 2
        while txn.get(name.encode(), db=snaps) is not None:
            name = f"baseline-{_utc(at, seconds=True)}-{n}"
            n += 1
    dirs_raw = txn.get(b"baseline_dirs", db=meta)
    dirs = loads(dirs_raw) if dirs_raw is not None else []
    modes_raw = txn.get(b"baseline_dir_modes", db=meta)
    info = {"at": at, "kind": KIND_BASELINE, "dirs": dirs}
    if modes_raw is not None:
        info["dir_modes"] = loads(modes_raw)
    txn.put(name.encode(), manifest, db=snaps)
    _put_info(txn, ws, name, info)
    ws.store.append_state_log(txn, "baseline-kept", name=name)
    return name


def recorded_accesses(
    manifest: dict[str, list[Any]], dir_modes: dict[str, list[Any]] | None, owner_only: Any
) -> dict[str, Access]:
    """Owner, group and mode of every file of ``manifest`` and every folder
    above one ('' the root) as recorded (``dir_modes``: a snapshot's or
    baseline's folders); ``owner_only(directory=...)`` where none was."""
    out: dict[str, Access] = {}
    dir_modes = dir_modes or {}
    for rel, entry in manifest.items():
        out[rel] = permissions.from_entry(entry, 2) or owner_only(directory=False)
        head = rel.rpartition("/")[0]
        while head not in out:
            kept = dir_modes.get(head)
            acc = permissions.recorded(*kept[:3]) if kept and len(kept) >= 3 else None
            out[head] = acc or owner_only(directory=True)
            if not head:
                break
            head = head.rpartition("/")[0]
    for d, kept in dir_modes.items():
        if d not in out:
            acc = permissions.recorded(*kept[:3]) if len(kept) >= 3 else None
            out[d] = acc or owner_only(directory=True)
    if "" not in out:
        out[""] = owner_only(directory=True)
    return out


def snapshot_accesses(ws: Recorded, name: str) -> dict[str, Access]:
    """``recorded_accesses`` of snapshot ``name`` (``baseline``: the present one)."""
    if name == BASELINE:
        manifest = ws.baseline_manifest()
        modes = ws.store.get_meta("baseline_dir_modes")
    else:
        manifest = ws.store.get_snapshot(name) or {}
        modes = snapshot_info(ws, name).get("dir_modes")
    return recorded_accesses(
        manifest, modes, functools.partial(permissions.owner_only, ws.store_dir)
    )


def baseline_version(ws: Recorded, rel: str) -> int | None:
    """The number of the version of ``rel`` that the present baseline holds:
    the last one with the baseline's hash recorded before it was taken."""
    entry = ws.baseline_manifest().get(rel)
    if entry is None:
        return None
    at = ws.store.get_meta("baseline_at") or time.time()
    best = None
    for number, h, recorded_at, *_ in ws.store.get_versions(rel):
        if h == entry[0] and (best is None or recorded_at <= at + 1.0):
            best = number
    return best


# ------------------------------------------------------------ submissions
@dataclass(frozen=True)
class Deliverable:
    path: str
    hash: str
    size: int
    status: str


@dataclass(frozen=True)
class Submission:
    name: str
    at: float
    snapshot: str
    files: tuple[Deliverable, ...] = field(default=())

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "at": self.at,
            "snapshot": self.snapshot,
            "files": [asdict(f) for f in self.files],
        }


def _submission(name: str, value: dict[str, Any]) -> Submission:
    return Submission(
        name=name,
        at=float(value["at"]),
        snapshot=str(value["snapshot"]),
        files=tuple(Deliverable(**f) for f in value["files"]),
    )


def submission_names(ws: Recorded) -> list[str]:
    with ws.store.read() as txn:
        return [
            bytes(k).decode("utf-8", "surrogateescape")
            for k, _ in txn.cursor(db=ws.store.dbs["submissions"])
        ]


def get_submission(ws: Recorded, name: str) -> Submission | None:
    with ws.store.read() as txn:
        raw = txn.get(name.encode("utf-8", "surrogateescape"), db=ws.store.dbs["submissions"])
    return None if raw is None else _submission(name, loads(raw))


def list_submissions(ws: Recorded) -> list[Submission]:
    out = []
    with ws.store.read() as txn:
        for k, raw in txn.cursor(db=ws.store.dbs["submissions"]):
            out.append(_submission(bytes(k).decode("utf-8", "surrogateescape"), loads(raw)))
    out.sort(key=lambda s: (s.at, s.name))
    return out


def _changed_since_baseline(
    base: dict[str, list[Any]], manifest: dict[str, list[Any]]
) -> dict[str, str]:
    """path -> added / modified / renamed, for the paths of ``manifest``."""
    gone_hashes = {e[0] for rel, e in base.items() if rel not in manifest}
    out = {}
    for rel, entry in manifest.items():
        old = base.get(rel)
        if old is None:
            status = ChangeStatus.RENAMED if entry[0] in gone_hashes else ChangeStatus.ADDED
            out[rel] = status.value
        elif old[0] != entry[0]:
            out[rel] = ChangeStatus.MODIFIED.value
    return out


def submit(ws: Recorded, name: str, paths: list[str] | None = None) -> Submission:
    """*slow*: a snapshot named ``name`` plus its deliverables: ``paths``
    (files, or directories standing for the files below them), or every
    file added or modified since the baseline."""
    check_name(ws, name, "submission")
    if get_submission(ws, name) is not None:
        raise _error(f"{name!r}: a submission of that name exists already")
    ws.scan()
    current = ws.store.all_files()
    chosen: list[str] | None = None
    if paths:
        chosen = []
        for p in paths:
            p = p.strip("/")
            if p in current:
                chosen.append(p)
                continue
            below = sorted(r for r in current if not p or r.startswith(p + "/"))
            if not below:
                raise _error(f"{p or '.'}: no such file in the workspace")
            chosen += below
    take_snapshot(ws, name, kind=KIND_SUBMISSION)
    manifest = ws.store.get_snapshot(name) or {}
    changed = _changed_since_baseline(ws.baseline_manifest(), manifest)
    rels = sorted(set(chosen)) if chosen is not None else sorted(changed)
    files = [
        Deliverable(
            path=rel,
            hash=manifest[rel][0],
            size=int(manifest[rel][1] or 0),
            status=changed.get(rel, "unchanged"),
        )
        for rel in rels
        if rel in manifest
    ]
    sub = Submission(name=name, at=time.time(), snapshot=name, files=tuple(files))
    value = sub.as_json()
    del value["name"]
    with ws.store.write() as txn:
        key = name.encode("utf-8", "surrogateescape")
        txn.put(key, dumps(value), db=ws.store.dbs["submissions"])
        ws.store.append_state_log(
            txn, "submit", name=name, files=[[f.path, f.hash] for f in files], snapshot=name
        )
        ws.bump_generation(txn)
    ws.store.flush()
    return sub


# --------------------------------------------------------------- targets
@dataclass(frozen=True)
class TargetState:
    name: str
    manifest: dict[str, list[Any]]
    dirs: list[str]


def target_state(ws: Recorded, to: str) -> TargetState:
    """``baseline`` or a snapshot (a submission is one) by name."""
    if to == BASELINE:
        if ws.store.get_meta("baseline_at") is None:
            raise _error("no baseline yet: the workspace was never scanned")
        return TargetState(BASELINE, ws.baseline_manifest(), ws.store.get_meta("baseline_dirs", []))
    index = _index(ws)
    manifest = index.manifests.get(to)
    if manifest is None:
        manifest = ws.store.get_snapshot(to)
        if manifest is None:
            raise _error(f"{to!r}: no such snapshot or submission (see `swfs snapshots`)")
        index.manifests[to] = manifest  # snapshots never change; deleting drops it
    return TargetState(to, manifest, list(snapshot_info(ws, to).get("dirs", [])))


class _HashIndex:
    """path -> hash of every file record, kept in memory and brought up to
    date from the paths the engine reports as changed: after the first
    reset of a daemon's life, finding what differs costs a lookup per change,
    not a pass over the table."""

    def __init__(self, ws: Recorded) -> None:
        self.ws = ws
        self.lock = threading.Lock()
        self.hashes: dict[str, str] | None = None
        self.dirty: set[str] = set()
        self.manifests: dict[str, dict[str, list[Any]]] = {}  # snapshot name -> manifest
        # Called synchronously in the thread that recorded the change (the
        # engine's own listeners may be deferred to the event loop).
        ws.add_sync_listener(self._touch)

    def _touch(self, rel: str) -> None:
        with self.lock:
            self.dirty.add(str(rel))

    def get(self) -> dict[str, str]:
        with self.lock:
            dirty, self.dirty = self.dirty, set()
            hashes = self.hashes
        if hashes is None:
            hashes = _read_hashes(self.ws)
        else:
            with self.ws.store.read() as txn:
                for rel in dirty:
                    rec = self.ws.store.get_file(rel, txn)
                    if rec is None:
                        hashes.pop(rel, None)
                    else:
                        hashes[rel] = rec.hash
        with self.lock:
            self.hashes = hashes
        return dict(hashes)


_INDEX_LOCK = threading.Lock()


def _index(ws: Recorded) -> _HashIndex:
    # An attribute of the workspace (not a module-level map): it lives and
    # dies with it.
    with _INDEX_LOCK:
        index = vars(ws).get("_history_index")
        if index is None:
            index = vars(ws)["_history_index"] = _HashIndex(ws)
    return index


def current_hashes(ws: Recorded) -> dict[str, str]:
    """path -> hash of every file record now."""
    return _index(ws).get()


def _read_hashes(ws: Recorded) -> dict[str, str]:
    """path -> hash of every file record, reading the hash from the record's
    fixed prefix instead of decoding it: one cursor pass over the table."""
    out: dict[str, str] = {}
    with ws.store.env.begin(write=False, buffers=True) as txn:
        for key, raw in txn.cursor(db=ws.store.dbs["files"]):
            head = bytes(raw[:160])
            nl = head.find(b"\n")
            start = nl + 1 + _HASH_AT
            if nl >= 0 and head[nl + 1 : start] == b'{"h":"' and len(head) >= start + 64:
                k = bytes(key)
                if k[:1] != b"\0":
                    out[k.decode("utf-8", "surrogateescape")] = head[start : start + 64].decode()
                    continue
            d = loads(bytes(raw).partition(b"\n")[2])
            out[d.get("path") or pdecode(key)] = d["h"]
    return out


# ------------------------------------------------------------------ reset
@dataclass
class ResetPlan:
    target: str
    remove: list[str] = field(default_factory=list)  # added since: removed
    renames: list[tuple[str, str]] = field(default_factory=list)  # (now, target)
    write: list[str] = field(default_factory=list)  # modified or deleted: bytes written back
    mkdirs: list[str] = field(default_factory=list)  # empty directories of the target

    def changes(self) -> int:
        return len(self.remove) + len(self.renames) + len(self.write) + len(self.mkdirs)


@dataclass
class ResetResult:
    target: str
    removed: int = 0
    restored: int = 0
    renamed: int = 0
    dirs_removed: int = 0
    dirs_created: int = 0
    kept_dirs: list[str] = field(default_factory=list)  # not empty: untracked content
    secs: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def plan_reset(ws: Recorded, target: TargetState) -> ResetPlan:
    cur = current_hashes(ws)
    want = target.manifest
    plan = ResetPlan(target.name)
    missing = [rel for rel in want if rel not in cur]
    added = [rel for rel in cur if rel not in want]
    by_hash: dict[str, list[str]] = {}
    for rel in missing:
        by_hash.setdefault(want[rel][0], []).append(rel)
    renamed_to: set[str] = set()
    for rel in sorted(added):
        candidates = by_hash.get(cur[rel])
        if candidates:
            dst = candidates.pop(0)
            plan.renames.append((rel, dst))
            renamed_to.add(dst)
        else:
            plan.remove.append(rel)
    plan.write = sorted(
        [rel for rel in missing if rel not in renamed_to]
        + [rel for rel, h in cur.items() if rel in want and want[rel][0] != h]
    )
    plan.mkdirs = [d for d in target.dirs if not os.path.isdir(ws.abspath(d))]
    return plan


def _ensure_bytes(
    ws: Recorded, plan: ResetPlan, want: dict[str, list[Any]], *, doing: str = "reset to"
) -> None:
    """Every hash the plan writes is in the blob store afterwards, taken from
    a file that holds it now if need be; otherwise nothing has been touched
    and the error names the files whose bytes were not kept."""
    need = {want[rel][0]: rel for rel in plan.write}
    lacking = {h: rel for h, rel in need.items() if not ws.blobs.has(h)}
    if not lacking:
        return
    holders: dict[str, str] = {}
    for rel, h in current_hashes(ws).items():
        if h in lacking and h not in holders:
            holders[h] = rel
    lost = []
    for h, rel in lacking.items():
        holder = holders.get(h)
        if holder is None:
            lost.append(rel)
            continue
        try:
            fd = open_to_read(ws.abspath(holder), os.O_NOFOLLOW)
        except OSError:
            lost.append(rel)
            continue
        try:
            ws.blobs.put_fd(fd, expected=h)
        except HashMismatch:
            lost.append(rel)
        finally:
            os.close(fd)
    if lost:
        shown = ", ".join(sorted(lost)[:5])
        if len(lost) > 5:
            shown += f" and {len(lost) - 5} more"
        raise _error(
            f"cannot {doing} {plan.target}: the bytes of {len(lost)} file(s) were not kept "
            f"(changed behind the mount, too large, or in .swfsignore): {shown}; "
            "nothing was changed"
        )


def _write_back(ws: Recorded, rel: str, entry: list[Any], *, durable: bool = True) -> None:
    """Put the bytes of ``entry`` (from the blob store) at ``rel``: a temp file
    in the same directory, renamed over whatever is there.  Not ``durable``:
    the caller syncs the file system once for many files (``_syncfs``)."""
    dest = ws.abspath(rel)
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    if os.path.isdir(dest) and not os.path.islink(dest):
        raise OSError(errno.EISDIR, "a directory is in the way", dest)
    tmp = f"{dest}{_STAGING}.{os.getpid()}"
    src_fd = ws.blobs.open(entry[0])
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            copy_fd(src_fd, fd)
            mode = stat.S_IMODE(int(entry[2])) if entry[2] is not None else 0o644
            if os.geteuid() == 0:
                try:
                    os.fchown(fd, int(entry[3]), int(entry[4]))
                except OSError as exc:
                    log.debug("%s: cannot give back its owner: %s", rel, exc)
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    finally:
        os.close(src_fd)


def not_staged(ws: Recorded, what: str) -> None:
    """Writes into SRC's tree: not under a staged layer (swfs.staging)."""
    if ws.staging is not None:
        raise _error(
            f"{ws.src}: {what} would write into SRC under a staged layer: "
            "`swfs discard` drops staged changes; after `swfs commit` and a plain "
            f"mount, {what} works again"
        )


def _reset_staged(ws: Recorded) -> ResetResult:
    """A task sandbox (``mount --staged --from BASE``) back to BASE: every
    staged change dropped, in time proportional to them.  (A plain staged
    mount refuses a reset: its baseline need not be SRC.)"""
    from swfs.history import staging

    t0 = time.monotonic()
    held = staging.list_staged(ws)["staged"]
    staging.discard_ws(ws)
    result = ResetResult(BASELINE)
    for c in held:
        is_dir = c["kind"] == "dir"
        if c["status"] == "added":
            result.dirs_removed += is_dir
            result.removed += not is_dir
        elif c["status"] == "deleted" and is_dir:
            result.dirs_created += 1
        else:
            result.restored += not is_dir
    result.secs = round(time.monotonic() - t0, 4)
    with ws.store.write() as txn:
        ws.store.append_state_log(txn, "reset", staged=True, **result.as_json())
    return result


def reset(ws: Recorded, to: str = BASELINE) -> ResetResult:
    """*slow* (in the number of changes): bring the whole tree back to ``to``."""
    if ws.staging is not None and to == BASELINE and seed.seeded_from(ws.store_dir) is not None:
        return _reset_staged(ws)  # a task sandbox (swfs.store.seed): SRC is its baseline
    not_staged(ws, "reset")
    t0 = time.monotonic()
    target = target_state(ws, to)
    plan = plan_reset(ws, target)
    result = ResetResult(target.name)
    if plan.changes():
        _ensure_bytes(ws, plan, target.manifest)
    touched_dirs: set[str] = set()
    emptied: set[str] = set()

    def note_parent(rel: str, into: set[str]) -> None:
        head = rel.rpartition("/")[0]
        while head:
            into.add(head)
            head = head.rpartition("/")[0]

    try:
        for rel in plan.remove:
            # The agent's work, however young: kept, and its history too.
            ws.preserve_inode(RelPath(rel), keep_temp=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ws.abspath(rel))
            _record_removed(ws, rel)
            note_parent(rel, emptied)
            touched_dirs.add(rel.rpartition("/")[0])
            result.removed += 1
        # Directories the files still to come need are not removed on the way.
        needed: set[str] = set()
        for rel in [*plan.write, *(new for _, new in plan.renames)]:
            note_parent(rel, needed)
        wanted_dirs = set(target.dirs)

        def prune(final: bool) -> None:
            """Remove the candidate directories that are empty now, deepest
            first; in the ``final`` pass, name those that are not."""
            for d in sorted(emptied, key=lambda d: d.count("/"), reverse=True):
                if d in wanted_dirs or ws.is_hidden(d) or (not final and d in needed):
                    continue
                try:
                    os.rmdir(ws.abspath(d))
                except FileNotFoundError:
                    emptied.discard(d)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                        raise
                    if final and not _holds_target_file(d, target.manifest):
                        result.kept_dirs.append(d)
                    continue
                emptied.discard(d)
                result.dirs_removed += 1
                touched_dirs.update((d, d.rpartition("/")[0]))

        prune(final=False)  # a directory may stand where a file comes back
        for old, new in plan.renames:
            dest = ws.abspath(new)
            os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
            if os.path.lexists(dest) and not os.path.isdir(dest):
                os.unlink(dest)  # not a file swfs tracks (a symlink, a fifo)
            os.rename(ws.abspath(old), dest)
            ws.record_rename(RelPath(old), RelPath(new))
            note_parent(old, emptied)
            touched_dirs.update((old.rpartition("/")[0], new.rpartition("/")[0]))
            result.renamed += 1
        prune(final=False)
        # Many files: one flush of the file system at the end; a few: one
        # fsync each (a file system flush also waits for everyone else's data).
        batch = len(plan.write) > _BATCH_SYNC
        for rel in plan.write:
            if os.path.lexists(ws.abspath(rel)):
                ws.preserve_inode(RelPath(rel), keep_temp=True)
            _write_back(ws, rel, target.manifest[rel], durable=not batch)
            ws.check_file(RelPath(rel), cause=Cause.RESTORE, force=True)
            touched_dirs.add(rel.rpartition("/")[0])
            result.restored += 1
        # Empty directories are known where a state recorded them: those of
        # the baseline that the target lacks go too (if still empty).
        emptied.update(set(ws.store.get_meta("baseline_dirs", [])) - wanted_dirs)
        prune(final=True)
        for d in plan.mkdirs:
            os.makedirs(ws.abspath(d), exist_ok=True)
            touched_dirs.add(d.rpartition("/")[0])
            result.dirs_created += 1
    except OSError as exc:
        where = exc.filename or ""
        raise _error(
            f"reset to {target.name} stopped at {where}: {exc.strerror or exc}; "
            "what it had changed is recorded (run it again once the cause is fixed)"
        ) from exc
    finally:
        for d in touched_dirs:
            ws.notify_changed(d)  # listings of these directories changed
    if len(plan.write) > _BATCH_SYNC:
        # The bytes are safe in the blob store meanwhile, and a reset cut
        # short by a crash is simply run again.
        _syncfs(ws.abspath(""))
    result.kept_dirs.sort()
    result.secs = round(time.monotonic() - t0, 4)
    with ws.store.write() as txn:
        ws.store.append_state_log(txn, "reset", **result.as_json())
        ws.bump_generation(txn)
    ws.store.flush()
    return result


def _record_removed(ws: Recorded, rel: str) -> None:
    """``Workspace.record_unlink`` for a file the reset removed: its history
    stays whatever its age (it is no editor's temp file)."""
    with ws.store.write() as txn:
        if ws.store.get_file(rel, txn) is None:
            return
        ws.store.delete_file(txn, rel)
        ws.store.append_state_log(txn, "unlink", path=rel, cause="reset")
        ws.bump_generation(txn)
    ws.notify_changed(rel)


def _syncfs(path: str) -> None:
    """Flush the file system holding ``path`` (``syncfs(2)``; ``sync`` where
    the C library lacks it)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _holds_target_file(d: str, manifest: dict[str, list[Any]]) -> bool:
    prefix = d + "/"
    return any(rel.startswith(prefix) for rel in manifest)


def restore_from(ws: Recorded, rel: str, source: str) -> str:
    """*slow*: bring back ``rel`` as the baseline or snapshot ``source`` had it,
    recorded as a new version; the hash restored."""
    not_staged(ws, "restore")
    target = target_state(ws, source)
    entry = target.manifest.get(rel)
    if entry is None:
        raise _error(f"{rel}: not in {'the baseline' if source == BASELINE else source!r}")
    plan = ResetPlan(target.name, write=[rel])
    _ensure_bytes(ws, plan, target.manifest, doing="restore from")
    ws.check_file(RelPath(rel))
    try:
        if os.path.lexists(ws.abspath(rel)):
            ws.preserve_inode(RelPath(rel), keep_temp=True)
        _write_back(ws, rel, entry)
    except OSError as exc:
        raise _error(f"{rel}: cannot restore: {exc.strerror or exc}") from exc
    ws.check_file(RelPath(rel), cause=Cause.RESTORE, force=True)
    ws.notify_changed(rel.rpartition("/")[0])
    with ws.store.write() as txn:
        ws.store.append_state_log(txn, "restore", path=rel, source=target.name, hash=entry[0])
        ws.bump_generation(txn)
    ws.store.flush()
    return str(entry[0])


# ----------------------------------------------------------- temp files
_TEMP_NAME = re.compile(
    r"""(
        \..*\.sw[a-p] | .*~ | \.?~\$.* | \.~lock\..* | \.?\#.* | 4913
        | .*\.(tmp|temp|part|crdownload|bak) | \.goutputstream-.* | tmp[a-z0-9_]{6,}
    )""",
    re.VERBOSE | re.IGNORECASE,
)


def looks_temporary(rel: str) -> bool:
    """Named the way editors and libraries name their scratch files (vim's
    swap files and 4913 probe, `file~` backups, LibreOffice and Office lock
    files, `.tmp`/`.part` downloads, Python's mkstemp names)."""
    return _TEMP_NAME.fullmatch(rel.rpartition("/")[2]) is not None


def is_ephemeral(ws: Recorded, rel: str, versions: list[list[Any]]) -> bool:
    """A path whose whole recorded life is shorter than the configured
    temp-file lifetime, that the baseline does not hold and that is named like
    a scratch file: an editor's temp file, whose history is not worth keeping
    once it is renamed or deleted.  A short-lived file with an ordinary name
    (an agent's report deleted a minute after it was written) keeps its
    history: deleting it must not lose it."""
    if not versions or time.time() - float(versions[0][2]) >= ws.config.temp_lifetime:
        return False
    if not looks_temporary(rel):
        return False
    manifest = ws.baseline_manifest()
    if rel in manifest:
        return False
    # A baseline file renamed (its history moved along) is no temp file.
    hashes = _baseline_hashes(ws, manifest)
    return not any(v[1] in hashes for v in versions)


def _baseline_hashes(ws: Recorded, manifest: dict[str, list[Any]]) -> frozenset[str]:
    cached = vars(ws).get("_history_baseline_hashes")
    if cached is not None and cached[0] is manifest:
        return cached[1]
    hashes = frozenset(e[0] for e in manifest.values())
    vars(ws)["_history_baseline_hashes"] = (manifest, hashes)
    return hashes


def forget_ephemeral(ws: Recorded, txn: lmdb.Transaction, rel: str) -> None:
    """After ``rel`` was deleted: drop its history if it was a temp file."""
    versions = ws.store.get_versions(rel, txn)
    if is_ephemeral(ws, rel, versions):
        drop_history(ws, txn, rel, versions)


def drop_history(ws: Recorded, txn: lmdb.Transaction, rel: str, versions: list[list[Any]]) -> None:
    """Drop a temp file's history.  Bytes kept for its earlier versions (a
    second write preserves the first) may now be referenced by nothing: they
    are noted as reclaimable, so ``swfs check`` knows them from strays, and
    ``swfs gc`` deletes them if nothing else needs them."""
    meta = ws.store.dbs["meta"]
    for v in versions[:-1]:
        txn.put(RECLAIM + str(v[1]).encode(), b"", db=meta)
    ws.store.put_versions(txn, rel, [])


# -------------------------------------------------------- the daemon side
def _op_submit(ws: Recorded, req: dict[str, Any]) -> Any:
    return submit(ws, str(req["name"]), list(req.get("paths") or []) or None).as_json()


def _op_reset(ws: Recorded, req: dict[str, Any]) -> Any:
    return reset(ws, str(req.get("to") or BASELINE)).as_json()


def _op_restore_from(ws: Recorded, req: dict[str, Any]) -> Any:
    return {"hash": restore_from(ws, str(req["path"]), str(req["source"]))}


def _op_snapshot_delete(ws: Recorded, req: dict[str, Any]) -> Any:
    return {"files": delete_snapshot(ws, str(req["name"]))}


def _op_snapshot(ws: Recorded, req: dict[str, Any]) -> Any:
    return {"files": take_snapshot(ws, str(req["name"]))}


CONTROL_OPS = {
    "submit": _op_submit,
    "reset": _op_reset,
    "restore_from": _op_restore_from,
    "snapshot_delete": _op_snapshot_delete,
    "snapshot": _op_snapshot,
}
