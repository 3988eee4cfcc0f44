"""A task sandbox's store, seeded from a baseline's (``swfs mount --staged
--from BASE TASKDIR MNT``).

The task's store starts as a copy of BASE's state: its records (the file
table, parses and units, history, baseline), its search index and the
content-addressed files (blobs, renders), so that BASE's parsed views and
search index are ready at once: the daemon's first scan finds every file
as recorded (the task's SRC is BASE itself, under a staged layer) and
nothing to parse or index.  What is the task's own starts empty: the staged
layer, the access journal, the tab, the daemon's lock, log and socket.

How each part is copied:

- ``db/`` by LMDB's own consistent copy (``mdb_env_copy``), safe while
  BASE's daemon runs;
- ``search.sqlite`` by SQLite's online backup; ``search.tantivy/`` by
  reflink or copy (both are derived: a torn copy costs a re-index);
- ``blobs/`` and ``render/`` by hard link (their files are named by content
  and never rewritten), or reflink or copy across file systems.

``db/`` is renamed into place last: a seed cut short leaves no ``db/`` and
is made afresh by the next mount.  ``seeded-from`` names BASE, so that a
task store is never mounted over another baseline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
from pathlib import Path

import lmdb

from swfs.store.fsutil import reflink

SEEDED = "seeded-from"
_LINKED = ("blobs", "render")
_SEARCH_DB = "search.sqlite"
_SEARCH_TEXT = "search.tantivy"
_MAX_DBS = 32


class SeedError(Exception):
    """The task store cannot be seeded; the message names the path and why."""


def seeded_from(task_store: Path) -> Path | None:
    try:
        text = (task_store / SEEDED).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return Path(text) if text else None


def seed(base: Path, base_store: Path, task_store: Path) -> bool:
    """*slow* (in the size of BASE's store): make ``task_store`` BASE's
    state unless it is seeded already.  Whether it was seeded now."""
    if (task_store / "db" / "data.mdb").exists():
        was = seeded_from(task_store)
        if was is not None and was != base:
            raise SeedError(f"{task_store}: a sandbox of {was}, not of {base}: use another TASKDIR")
        return False
    if not (base_store / "db" / "data.mdb").exists():
        raise SeedError(
            f"{base}: not indexed (no store at {base_store}): `swfs index {base}` first"
        )
    if (base_store / "staged").exists():
        raise SeedError(
            f"{base}: holds staged changes of its own: `swfs commit` or `swfs discard` them first"
        )
    task_store.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = task_store / "db.seeding"
    shutil.rmtree(tmp, ignore_errors=True)
    for name in (_SEARCH_DB, _SEARCH_DB + "-wal", _SEARCH_DB + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (task_store / name).unlink()
    shutil.rmtree(task_store / _SEARCH_TEXT, ignore_errors=True)
    try:
        tmp.mkdir(mode=0o700)
        _copy_lmdb(base_store / "db", tmp)
        _copy_search(base_store, task_store)
        for name in _LINKED:
            if (base_store / name).is_dir():
                link_tree(base_store / name, task_store / name)
        (task_store / SEEDED).write_text(f"{base}\n", encoding="utf-8")
        os.chmod(task_store / SEEDED, 0o600)
        os.replace(tmp, task_store / "db")
    except OSError as exc:
        raise SeedError(
            f"{task_store}: cannot seed it from {base_store}: "
            f"{exc.filename or ''} {exc.strerror or exc}".replace("  ", " ")
        ) from None
    except lmdb.Error as exc:
        raise SeedError(f"{base_store}: cannot copy its records: {exc}") from None
    return True


def _copy_lmdb(src: Path, dst: Path) -> None:
    env = lmdb.open(str(src), readonly=True, max_dbs=_MAX_DBS, subdir=True, lock=True)
    try:
        env.copy(str(dst), compact=True)
    finally:
        env.close()
    for name in os.listdir(dst):
        os.chmod(dst / name, 0o600)


def _copy_search(base_store: Path, task_store: Path) -> None:
    db = base_store / _SEARCH_DB
    if db.exists():
        source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            fd = os.open(task_store / _SEARCH_DB, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(fd)
            target = sqlite3.connect(task_store / _SEARCH_DB)
            try:
                source.backup(target)
            finally:
                target.close()
        except sqlite3.Error as exc:
            raise OSError(errno.EIO, f"search index: {exc}", str(db)) from None
        finally:
            source.close()
    text = base_store / _SEARCH_TEXT
    if text.is_dir():
        shutil.copytree(text, task_store / _SEARCH_TEXT, copy_function=_clone, ignore=_locks)
        os.chmod(task_store / _SEARCH_TEXT, 0o700)


def _locks(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n.endswith(".lock")]


def _clone(src: str, dst: str) -> str:
    """Copy ``src`` to ``dst`` sharing its extents where the file system can."""
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fout:
            if not reflink(fin.fileno(), fout.fileno()):
                shutil.copyfileobj(fin, fout, 1 << 20)
    return dst


def link_tree(src: Path, dst: Path) -> int:
    """Hard-link every file of ``src`` into ``dst`` (made 0700), or clone it
    across file systems; files already there are kept.  Files linked."""
    count = 0
    for dirpath, _dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        out = dst if rel == "." else dst / rel
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in files:
            a, b = os.path.join(dirpath, name), out / name
            try:
                os.link(a, b)
            except FileExistsError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                    raise
                _clone(a, str(b))
            count += 1
    return count
