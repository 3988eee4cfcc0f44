"""The blob store's cache of reassembled blobs (``cache/``, what
``.versions`` reads): trimmed to ``CACHE_BYTES``, without scanning the
whole directory on every blob reassembled into it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from swfs.store import blobs as blobs_mod
from swfs.store.blobs import BlobStore


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def cache_bytes(store: BlobStore) -> int:
    return sum(os.stat(store.cache / n).st_blocks * 512 for n in os.listdir(store.cache))


@pytest.fixture
def cache_scans(monkeypatch: pytest.MonkeyPatch, store: BlobStore) -> list[str]:
    """The scans of ``cache/`` made from here on (by any path of the store)."""
    seen: list[str] = []
    real = os.scandir

    def counting(path: object = ".") -> object:
        if str(path) == str(store.cache):
            seen.append(str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(blobs_mod.os, "scandir", counting)
    return seen


def test_reassembling_many_blobs_scans_the_cache_once(
    store: BlobStore, cache_scans: list[str]
) -> None:
    blobs = {store.put_bytes(f"blob number {i}\n".encode() * 50): i for i in range(200)}
    for h, i in blobs.items():
        assert store.readable_path(h).read_bytes() == f"blob number {i}\n".encode() * 50
    assert sorted(os.listdir(store.cache)) == sorted(blobs)
    # The first reassembly learns the cache's size; the rest only add to it.
    assert len(cache_scans) == 1, len(cache_scans)
    # A blob already there costs neither a reassembly nor a scan.
    for h in list(blobs)[:20]:
        store.readable_path(h)
    assert len(cache_scans) == 1


def test_the_cache_is_still_trimmed_to_its_limit(
    store: BlobStore, cache_scans: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blobs_mod, "CACHE_KEEP_SECS", 0.0)
    blob = 64 * 1024
    monkeypatch.setattr(blobs_mod, "CACHE_BYTES", 5 * blob)
    hashes = [store.put_bytes(os.urandom(blob)) for _ in range(12)]
    past = time.time() - 3600
    for h in hashes:
        p = store.readable_path(h)
        os.utime(p, (past, past))  # as if used long ago: evictable
        past += 1
        assert cache_bytes(store) <= 5 * blob + blob  # never more than one blob over
    left = set(os.listdir(store.cache))
    assert hashes[-1] in left  # the newest stays; the oldest went first
    assert hashes[0] not in left
    assert len(left) <= 6
    # Scans only once the known size passed the limit, not per blob.
    assert len(cache_scans) < len(hashes), len(cache_scans)


def test_blobs_added_by_another_store_are_counted_at_the_next_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blobs_mod, "CACHE_KEEP_SECS", 0.0)
    blob = 64 * 1024
    monkeypatch.setattr(blobs_mod, "CACHE_BYTES", 4 * blob)
    monkeypatch.setattr(blobs_mod, "CACHE_RESCAN", 3)
    ours, theirs = BlobStore(tmp_path / "blobs"), BlobStore(tmp_path / "blobs")
    past = time.time() - 3600
    for s in (theirs, theirs, theirs, ours, theirs, theirs, ours, ours, ours, ours):
        p = s.readable_path(s.put_bytes(os.urandom(blob)))
        os.utime(p, (past, past))
        past += 1
    # The other store's additions are seen by our periodic rescan.
    assert cache_bytes(ours) <= 4 * blob + 3 * blob
