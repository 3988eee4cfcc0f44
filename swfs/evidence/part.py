"""The engine's evidence part (``engine.evidence``, ``swfs.api.EvidenceAPI``):
who may read what the mount shows of a path, now and as recorded in the
past, and the mount's access journal as the engine reports it.

It holds the workspace whose records it reads (``Recorded``, given to its
constructor) and calls only that workspace's public members.  The journal
itself is the mount's (``swfs.evidence.access.Journal``): the mount attaches
its health and acknowledgement here for the control socket to ask after.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from swfs import permissions
from swfs.api import Access, RelPath
from swfs.history import snapshots
from swfs.history.snapshots import Recorded


class Evidence:
    """Access of paths and of their past contents; the attached journal."""

    def __init__(self, ws: Recorded) -> None:
        self._ws = ws
        # How the mount's access journal is (``swfs.evidence.access.Journal.health``:
        # the mount sets it; the control socket and swfs check ask).
        self.journal_health: Callable[[], dict[str, Any]] | None = None
        self.journal_ack: Callable[[], None] | None = None

    def attach_journal(
        self, health: Callable[[], dict[str, Any]], acknowledge: Callable[[], None]
    ) -> None:
        self.journal_health, self.journal_ack = health, acknowledge

    def access(self, rel: RelPath) -> Access | None:
        ws = self._ws
        try:
            return permissions.of_stat(os.lstat(ws.abspath(rel)))
        except OSError:
            pass
        rec = ws.store.get_file(rel)
        if rec is not None:
            return Access(rec.uid, rec.gid, stat.S_IMODE(rec.mode))
        entry = ws.baseline_manifest().get(rel)
        if entry is not None:
            return Access(entry[3], entry[4], stat.S_IMODE(entry[2]))
        return None

    def content_access(self, rel: RelPath, h: str | None) -> Access:
        """Who may read content ``h`` of ``rel`` (a stale view's units): its
        present access if ``h`` is what the file holds now, else the one
        recorded with its last version of ``h`` narrowed by the present one
        (swfs.permissions); owner-only when none was recorded."""
        ws = self._ws
        now = self.access(rel)
        rec = ws.store.get_file(rel)
        if now is not None and rec is not None and rec.hash == h:
            return now
        then = None
        for _, vh, _, _, _, *kept in reversed(ws.store.get_versions(rel)):
            if vh == h:
                then = permissions.recorded(*kept[:3]) if len(kept) >= 3 else None
                break
        return permissions.then_and_now(then or permissions.owner_only(ws.store_dir), now)

    def snapshot_accesses(self, name: str) -> dict[RelPath, Access]:
        return {RelPath(r): a for r, a in snapshots.snapshot_accesses(self._ws, name).items()}
