"""The state log (``Store.append_state_log``) keeps the on-disk name its
LMDB sub-database had before it was called so, ``journal``: a store an
older swfs wrote opens with its log, and new events land beside the old."""

from __future__ import annotations

import struct
from pathlib import Path

import lmdb

from swfs.store.records import FORMAT_VERSION, Store, dumps, loads


def _old_store(root: Path) -> None:
    """A store as swfs wrote it before the rename: one event in ``journal``."""
    (root / "db").mkdir(parents=True)
    env = lmdb.open(str(root / "db"), max_dbs=16, map_size=1 << 26)
    meta, log = env.open_db(b"meta"), env.open_db(b"journal")
    with env.begin(write=True) as txn:
        txn.put(b"format_version", dumps(FORMAT_VERSION), db=meta)
        txn.put(struct.pack(">Q", 1), dumps({"t": 1.0, "ev": "baseline", "files": 3}), db=log)
    env.close()


def test_an_older_stores_state_log_is_read_and_extended(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _old_store(root)
    store = Store(root)
    try:
        assert list(store.iter_state_log()) == [(1, {"t": 1.0, "ev": "baseline", "files": 3})]
        with store.write() as txn:
            store.append_state_log(txn, "snapshot", name="s1", files=3)
        assert [(seq, ev["ev"]) for seq, ev in store.iter_state_log()] == [
            (1, "baseline"),
            (2, "snapshot"),
        ]
    finally:
        store.close()
    # On disk the events are in the sub-database named "journal", no other.
    env = lmdb.open(str(root / "db"), max_dbs=16, readonly=True)
    try:
        with env.begin() as txn:
            names = {bytes(k) for k, _ in txn.cursor()}
        assert b"state_log" not in names
        assert b"journal" in names
        log = env.open_db(b"journal", create=False)
        with env.begin() as txn:
            events = [loads(v)["ev"] for _, v in txn.cursor(db=log)]
        assert events == ["baseline", "snapshot"]
    finally:
        env.close()
