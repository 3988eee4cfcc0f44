"""Reading the store's blobs by hash: the part of ``swfs.api.EngineAPI`` that
a live workspace and a read-only world answer the same way."""

from __future__ import annotations

from pathlib import Path

from swfs.api import Hash
from swfs.store.blobs import BlobReader, BlobStore
from swfs.store.reserve import is_no_space


class BlobReads:
    """Mixed into an engine that has ``blobs``."""

    blobs: BlobStore

    def blob_path(self, h: Hash) -> str | None:
        """*slow*: a readable path holding blob ``h``, or None if not kept."""
        return str(self.blobs.readable_path(h)) if self.blobs.has(h) else None

    def blob_ref(self, h: Hash) -> str | None:
        """Like ``blob_path`` but cheap: the path may not exist until
        ``open_blob`` opens it."""
        return str(self.blobs.lazy_path(h)) if self.blobs.has(h) else None

    def blob_size(self, h: Hash) -> int | None:
        try:
            return self.blobs.size(h)
        except FileNotFoundError:
            return None

    def open_blob(self, path: str) -> int:
        """*slow*: open a path from ``version_ref`` or ``blob_ref`` read-only
        (a chunked blob is reassembled on first use)."""
        return self.blobs.open_path(path)

    def open_blob_reading(self, path: str) -> int | BlobReader:
        """*slow*: ``open_blob``, or where reassembling a chunked blob would
        need space the disk lacks, a reader straight from its chunks:
        reading history never needs free space."""
        try:
            return self.open_blob(path)
        except OSError as exc:
            if not is_no_space(exc):
                raise
            return self.blobs.reader(Path(path).name)
