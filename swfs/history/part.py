"""The engine's history part (``engine.history``, ``swfs.api.HistoryAPI``):
the versions of each file, snapshots, the baseline and restore.

It holds the workspace whose records it reads and writes (``Recorded``,
given to its constructor) and calls only that workspace's public members.
When a write becomes a version is the write protocol's
(``swfs.history.writesession``, ``swfs.history.versioning``); this part reads
what it recorded and makes the versions a user asks for.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence

from swfs import permissions
from swfs.api import Cause, Hash, RelPath, Version, WorkspaceError
from swfs.history import snapshots
from swfs.history.snapshots import Recorded
from swfs.store.fsutil import copy_fd, fsync_dir
from swfs.store.records import version_not_kept


class History:
    """Versions, snapshots, the baseline and restore of one workspace."""

    def __init__(self, ws: Recorded) -> None:
        self._ws = ws

    # ------------------------------------------------------------- versions
    def versioned_paths(self) -> Iterable[RelPath]:
        ws = self._ws
        ws.writes.drain()  # the queued records of changes of names first
        with ws.store.read() as txn:
            return [RelPath(rel) for rel, _ in ws.store.iter_versions(txn)]

    def has_versions(self, rel: RelPath) -> bool:
        self._ws.writes.drain()  # the queued records of changes of names first
        return bool(self._ws.store.get_versions(rel))

    def versions(self, rel: RelPath) -> Sequence[Version]:
        ws = self._ws
        ws.writes.drain()  # the queued records of changes of names first
        rec = ws.store.get_file(rel)
        out = []
        for v in ws.store.get_versions(rel):
            number, h, at, cause, size, *kept = v
            available = ws.blobs.has(h) or (rec is not None and rec.hash == h)
            then = permissions.recorded(*kept[:3]) if len(kept) >= 3 else None
            then = then or permissions.owner_only(ws.store_dir)
            not_kept = None if available else version_not_kept(v)
            out.append(Version(number, Hash(h), at, Cause(cause), available, size, then, not_kept))
        return out

    def version_file(self, rel: RelPath, number: int) -> str | None:
        """*slow*: a readable path holding version ``number``'s bytes (a
        chunked blob is reassembled), or None when they were not kept."""
        ref = self.version_ref(rel, number)
        return None if ref is None else str(self._ws.blobs.readable_path_of(ref))

    def version_ref(self, rel: RelPath, number: int) -> str | None:
        """Like ``version_file`` but cheap: the path may not exist until
        ``open_blob`` opens it."""
        ws = self._ws
        ws.writes.drain()  # the queued records of changes of names first
        for v in self.versions(rel):
            if v.number == number:
                if ws.blobs.has(v.hash):
                    return str(ws.blobs.lazy_path(v.hash))
                rec = ws.store.get_file(rel)
                if rec is not None and rec.hash == v.hash:
                    return ws.abspath(rel)
                return None
        return None

    def pin_version(self, rel: RelPath) -> None:
        """``rel``'s present version is never replaced by a rewrite in the
        same burst.  An fsync no longer pins (swfs.history.versioning): a
        database's commits are a burst like any other rewrites."""
        rec = self._ws.store.get_file(rel)
        if rec is not None:
            self._ws.windows.pin(rel, rec.hash)

    # ------------------------------------------------------------ snapshots
    def snapshots(self) -> Sequence[str]:
        return self._ws.store.snapshot_names()

    def snapshot_manifest(self, name: str) -> dict[RelPath, Hash]:
        m = self._ws.store.get_snapshot(name) or {}
        return {RelPath(rel): Hash(entry[0]) for rel, entry in m.items()}

    def snapshot(self, name: str) -> int:
        """*slow*: record the present state as ``name`` and keep every byte it
        names (``swfs.history.snapshots.record_snapshot``)."""
        return snapshots.record_snapshot(self._ws, name)

    # ------------------------------------------------------------- baseline
    def set_baseline(self) -> int:
        """*slow*: the present file table becomes the baseline (read back
        through the workspace's record of it, ``baseline_manifest``)."""
        return snapshots.set_baseline(self._ws)

    # --------------------------------------------------------------- restore
    def restore(self, rel: RelPath, number: int) -> Version:
        """*slow*: bring back version ``number`` of ``rel`` as a new version."""
        ws = self._ws
        snapshots.not_staged(ws, "restore")
        versions = {v.number: v for v in self.versions(rel)}
        if number not in versions:
            raise WorkspaceError(f"{rel}: no version {number}")
        source = self.version_ref(rel, number)
        if source is None:
            why = versions[number].not_kept
            raise WorkspaceError(
                f"{rel}@{number}: its bytes were not kept" + (f": {why}" if why else "")
            )
        dest = ws.abspath(rel)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        if os.path.lexists(dest):
            ws.preserve_inode(rel)
        tmp = f"{dest}.swfs-restore.{os.getpid()}"
        try:
            src_fd = ws.open_blob(source)
        except OSError as exc:
            raise WorkspaceError(f"{rel}@{number}: cannot read its bytes: {exc.strerror}") from exc
        try:
            mode = 0o644
            old = ws.store.get_file(rel)
            if old is not None:
                mode = stat.S_IMODE(old.mode)
            dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            try:
                copy_fd(src_fd, dst_fd)
                os.fsync(dst_fd)
            finally:
                os.close(dst_fd)
            os.replace(tmp, dest)
            fsync_dir(os.path.dirname(dest))
        except OSError as exc:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            raise WorkspaceError(f"{rel}: cannot restore: {exc.strerror}") from exc
        finally:
            os.close(src_fd)
        ws.check_file(rel, cause=Cause.RESTORE, force=True)
        with ws.store.write() as txn:
            ws.store.append_state_log(
                txn, "restore", path=rel, version=number, hash=versions[number].hash
            )
        ws.store.flush()
        return self.versions(rel)[-1]
