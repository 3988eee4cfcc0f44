"""A workspace's settings (``swfs.workspace.Workspace``, a world, the engine):
here in ``swfs.history`` so a world and the live workspace take the same
``Config`` without history importing the workspace."""

from __future__ import annotations

from dataclasses import dataclass

from swfs.history import versioning
from swfs.views.parsework import WorkerLimits


@dataclass(frozen=True)
class Config:
    limits: WorkerLimits = WorkerLimits()
    max_preserve_bytes: int = 1 << 30  # larger files keep hashes but no preserved bytes
    rescan_interval: float = 30.0
    # Writes within this many seconds of a burst's first version replace its
    # last version (swfs.versioning); 0 keeps one version per close.
    version_interval: float = versioning.DEFAULT_INTERVAL
    diff_max_lines: int = 4000
    embed_model: str | None = None  # a local static-embedding model: hybrid search
    # A path that lived less than this (seconds) and is then deleted or
    # renamed over another keeps no history of its own: an editor's temp file.
    temp_lifetime: float = 60.0
    # Bytes the store holds back for deletes, truncates and gc on a full
    # disk (swfs.reserve); None: 1/32 of the file system, 1 to 64 MiB.
    reserve_bytes: int | None = None
    # A shared parse cache (``--cache DIR``, swfs.store.sharedcache); None:
    # the one the store remembers, if any.
    cache_dir: str | None = None
