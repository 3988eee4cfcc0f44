"""The shared parse cache in an S3-compatible object store, through obstore
(``pip install 'swfs[s3]'``): ``--cache s3://BUCKET/PREFIX``.

The same interface as the local directory (``swfs.store.sharedcache``), the
same keys under PREFIX (``v1/parses/...``, ``v1/files/...``) and the same
entries, checked the same way on every read: a damaged entry is logged,
deleted and a miss.  An object store writes an object whole or not at
all, so entries go straight to their key (no temp file, no rename).

Connection settings come from the environment, as obstore reads them
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``, ``AWS_ALLOW_HTTP`` ...).  Who may read the bucket is the
bucket's policy: give it to the harness's user alone, as a local cache
folder is 0700.  A store that cannot be reached is a miss (logged), never an
error of the parse.

Collection: ``swfs cache gc s3://BUCKET/PREFIX --older-than DAYS`` removes
entries written more than DAYS days ago (an object's time is its write;
a bucket lifecycle rule on PREFIX does the same without swfs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from swfs.store.sharedcache import (
    VERSION,
    CacheCounts,
    CachedParse,
    CacheError,
    UnitTuple,
    decode_entry,
    decode_file,
    encode_entry,
    encode_file,
    entry_key,
    file_key,
)

log = logging.getLogger(__name__)


class ObjectStoreCache:
    """A shared parse cache under ``s3://BUCKET/PREFIX``."""

    def __init__(self, url: str) -> None:
        try:
            import obstore
            from obstore.store import from_url
        except ImportError:
            raise CacheError(
                f"{url}: an object-store cache needs obstore: pip install 'swfs[s3]'"
            ) from None
        self.url = url
        self.counts = CacheCounts()
        self._obs = obstore
        try:
            self._store: Any = from_url(url)
        except Exception as exc:  # obstore's errors are its own types
            raise CacheError(f"{url}: {exc}") from None

    def describe(self) -> str:
        return self.url

    def _get(self, key: str) -> bytes | None:
        try:
            return bytes(self._obs.get(self._store, key).bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:  # unreachable, refused: a miss, never a failed parse
            log.warning("%s/%s: shared cache unreadable (%s): made here", self.url, key, exc)
            return None

    def _put(self, key: str, data: bytes) -> None:
        try:
            self._obs.put(self._store, key, data)
        except Exception as exc:
            raise OSError(f"{self.url}/{key}: {exc}") from None

    def _corrupt(self, key: str, exc: Exception) -> None:
        log.warning("%s/%s: corrupt shared cache entry (%s): removed", self.url, key, exc)
        try:
            self._obs.delete(self._store, key)
        except Exception as err:
            log.warning("%s/%s: cannot remove it: %s", self.url, key, err)
        self.counts.add("corrupt")

    def lookup(self, h: str, parser: str) -> CachedParse | None:
        key = entry_key(h, parser)
        data = None if key is None else self._get(key)
        if key is None or data is None:
            self.counts.add("misses")
            return None
        try:
            parse = decode_entry(data, h, parser)
        except ValueError as exc:
            self._corrupt(key, exc)
            self.counts.add("misses")
            return None
        self.counts.add("hits")
        return parse

    def publish(self, h: str, parser: str, units: Sequence[UnitTuple], *, secs: float) -> None:
        key = entry_key(h, parser)
        if key is None:
            raise ValueError(f"not a content hash: {h!r}")
        self._put(key, encode_entry(h, parser, units, secs=secs))
        self.counts.add("published")

    def get_file(self, h: str, name: str) -> bytes | None:
        key = file_key(h, name)
        data = None if key is None else self._get(key)
        if key is None or data is None:
            return None
        try:
            body = decode_file(data, h, name)
        except ValueError as exc:
            self._corrupt(key, exc)
            return None
        self.counts.add("hits")
        return body

    def put_file(self, h: str, name: str, data: bytes) -> None:
        key = file_key(h, name)
        if key is None:
            raise ValueError(f"not a content hash: {h!r}")
        self._put(key, encode_file(h, name, data))
        self.counts.add("published")

    def _objects(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for batch in self._obs.list(self._store, prefix=f"v{VERSION}/"):
            out.extend(dict(m) for m in batch)
        return out

    def gc(self, older_than: float, *, now: float | None = None) -> tuple[int, int]:
        """Remove entries written more than ``older_than`` seconds ago."""
        now = time.time() if now is None else now
        removed = freed = 0
        for meta in self._objects():
            if now - meta["last_modified"].timestamp() < older_than:
                continue
            self._obs.delete(self._store, meta["path"])
            removed += 1
            freed += int(meta["size"])
        return removed, freed

    def usage(self) -> tuple[int, int]:
        objects = self._objects()
        return len(objects), sum(int(m["size"]) for m in objects)
