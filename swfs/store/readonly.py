"""The store's LMDB environment opened read-only (``MDB_RDONLY``), as a
world (``swfs.history.world``) reads it beside the live daemon: readers take
a slot in the lock file and nothing else, so a world neither blocks nor
delays the live daemon's writes.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import lmdb

from swfs.store.records import DATABASES, FORMAT_VERSION, Store, StoreError


class ReadOnlyStore(Store):
    """The store's LMDB environment opened with ``MDB_RDONLY``: any write is
    an error, and a map the live daemon has grown is adopted on the next read."""

    def __init__(self, root: Path) -> None:  # no super().__init__: it would write
        self.root = root
        self.readonly = True
        dbdir = root / "db"
        if not dbdir.is_dir():
            raise StoreError(f"{root}: no swfs store here")
        try:
            self.env = lmdb.open(
                str(dbdir), readonly=True, lock=True, subdir=True, max_dbs=len(DATABASES) + 1,
                max_readers=256,
            )  # fmt: skip
            # Without a transaction of ours: py-lmdb ends a read transaction
            # by resetting it, which would drop handles opened in it.
            self.dbs = {n: self.env.open_db(n.encode(), create=False) for n in DATABASES}
        except lmdb.Error as exc:
            raise StoreError(f"{dbdir}: cannot open the store read-only: {exc}") from exc
        self._resize_lock = threading.Lock()
        version = self.get_meta("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(
                f"{root}: store format {version}, a world reads format {FORMAT_VERSION} "
                "(mount the workspace once to upgrade it)"
            )

    def close(self) -> None:
        self.env.close()

    def flush(self) -> None:
        pass

    @contextmanager
    def write(self) -> Iterator[lmdb.Transaction]:
        raise OSError(errno.EROFS, "a world is read-only")
        yield  # pragma: no cover

    def ensure_room(self, nbytes: int) -> None:
        pass

    def read(self) -> lmdb.Transaction:
        for _ in range(100):
            try:
                return self.env.begin(write=False)
            except lmdb.MapResizedError:
                # The live daemon grew the map: adopt its size (possible only
                # while no transaction of ours is open: retry until then).
                with self._resize_lock, contextlib.suppress(lmdb.Error):
                    self.env.set_mapsize(0)
                time.sleep(0.01)
        return self.env.begin(write=False)

    def put_diff(self, key: str, text: str) -> None:
        pass  # a rendered diff is cached by the live daemon only
