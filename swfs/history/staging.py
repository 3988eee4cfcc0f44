"""The staged layer of a ``--staged`` mount: writes held in the store over SRC.

Layout (under the store, so that a commit renames on SRC's file system)::

    staged/upper/<rel>     copied-up and new files, symlinks and directories
    staged/state.json      {"whiteouts": [rel...], "origins": {"<upper ino>": [dev, ino]}}
    staged/commit.json     the intent log of a commit under way (see ``commit``)

A path resolves upper first; else to SRC unless it or one of its parents is
whited out (a whiteout hides SRC's entry and everything below it, so a
directory removed and made again shows only what was made: overlayfs's opaque
directory).  ``origins`` maps a copied-up node to the identity its SRC
original had, so the mount keeps showing the same inode number after a
copy-up (pjdfstest-style stability).

A regular file with several names in SRC (hard links) is copied up once: its
other names become links to the copy, so a write through one name shows
through all of them, in the mount and after a commit, as overlayfs does with
``index=on``.  The other names are the ones the workspace's records know
(``other_names``); a name it never recorded (an ignored path) keeps SRC's
inode.

The staged layer exists while ``staged/`` does: from the first ``mount
--staged`` until a commit or discard leaves nothing staged and the workspace
is mounted without ``--staged``.  The engine resolves every path it reads
through ``Staging.resolve`` (``Workspace.abspath``), so hashes, parses and the
review see the staged bytes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swfs.api import ChangeStatus, Hash, RelPath, ReviewEntry
from swfs.review import changes as review
from swfs.review.changes import Reviewed
from swfs.store.beneath import (
    chmod_nofollow,
    dir_fd,
    fsync_beneath,
    lexists_beneath,
    listdir_beneath,
    lstat_beneath,
    open_beneath,
    proc_path,
    split,
    user_xattrs,
)
from swfs.store.fsutil import (
    copy_fd,
    fsync_dir,
    hash_bytes,
    hash_fd,
    reflink,
    save_file,
    without_atime,
)
from swfs.store.hashform import label

log = logging.getLogger(__name__)

STAGE_DIR = "staged"
STATE = "state.json"
INTENT = "commit.json"
# Temp names of a copy-up (in the layer) and a commit (beside the target in
# SRC): never shown in the staged tree.
TMP_SUFFIX = ".swfs-commit"
# Test hook: a commit stops (sleeps) after this many files, to be killed.
PAUSE_ENV = "SWFS_TEST_COMMIT_PAUSE_AFTER"
NAME_MAX = 255
# The two trees of the layer (``Staging.root_fd``, ``Staging.names``).
UPPER = "upper"
LOWER = "lower"


class StagingError(Exception):
    """A staging operation that cannot be done; the message names the cause."""


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def _under(rel: str, prefixes: list[str] | None) -> bool:
    if prefixes is None:
        return True
    return any(rel == p or rel.startswith(p + "/") or not p for p in prefixes)


@dataclass(frozen=True)
class Staged:
    """One staged change: ``status`` is added, modified, deleted or replaced."""

    path: str
    status: str
    kind: str  # file, dir, symlink, other

    def as_json(self) -> dict[str, str]:
        return {"path": self.path, "status": self.status, "kind": self.kind}


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _gone(exc: OSError) -> bool:
    """``exc`` says a path leads nowhere: absent, or through a non-directory
    or a symlink (never followed)."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


class Staging:
    """The layer; every system call on SRC or the upper tree goes through a
    descriptor of its root (``swfs.store.beneath``), never through a path string,
    so paths near PATH_MAX below SRC work and no symlink is followed out."""

    def __init__(self, src: Path, store_dir: Path) -> None:
        self.src = str(src)
        self.dir = store_dir / STAGE_DIR
        self.upper = str(self.dir / "upper")
        self.lock = threading.RLock()
        self.whiteouts: set[str] = set()
        self.origins: dict[int, tuple[int, int]] = {}
        # (rel, its lstat) -> the other names of that inode (the workspace's
        # ``other_names``); None: hard links are copied up one name at a time.
        self.other_names: Callable[[str, os.stat_result], list[str]] | None = None
        # UPPER / LOWER -> an O_PATH descriptor of that tree's root, opened
        # on first use (a Staging loaded only to ask whether one exists
        # holds none) and kept until ``close``.
        self._roots: dict[str, int] = {}
        self._load()

    # -- lifecycle

    @classmethod
    def load(cls, src: Path, store_dir: Path) -> Staging | None:
        """The workspace's staged layer, or None when it has none."""
        if (store_dir / STAGE_DIR / "upper").is_dir():
            return cls(src, store_dir)
        return None

    @classmethod
    def activate(cls, src: Path, store_dir: Path) -> Staging:
        """Create the staged layer (idempotent).  The store must sit on SRC's
        file system: a commit renames into SRC."""
        upper = store_dir / STAGE_DIR / "upper"
        upper.mkdir(parents=True, exist_ok=True)
        sst, ust = os.stat(src), os.stat(upper)
        if sst.st_dev != ust.st_dev:
            raise StagingError(
                f"{store_dir}: a staged mount needs its store on the file system of {src}"
            )
        os.chmod(upper, stat.S_IMODE(sst.st_mode))
        os.chown(upper, sst.st_uid, sst.st_gid)
        staging = cls(src, store_dir)
        with staging.lock:
            staging.origins[ust.st_ino] = (sst.st_dev, sst.st_ino)
            staging.save()
        return staging

    def close(self) -> None:
        with self.lock:
            for fd in self._roots.values():
                os.close(fd)
            self._roots.clear()

    def _load(self) -> None:
        try:
            raw = json.loads((self.dir / STATE).read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise StagingError(f"{self.dir / STATE}: unreadable staged state: {exc}") from exc
        self.whiteouts = set(raw.get("whiteouts", []))
        self.origins = {int(k): (int(v[0]), int(v[1])) for k, v in raw.get("origins", {}).items()}

    def save(self) -> None:
        with self.lock:
            data = {
                "whiteouts": sorted(self.whiteouts),
                "origins": {str(k): list(v) for k, v in sorted(self.origins.items())},
            }
            save_file(self.dir / STATE, json.dumps(data, indent=1).encode())

    # -- the two trees, through descriptors

    def root_fd(self, where: str) -> int:
        """An O_PATH descriptor of the upper tree's root (UPPER) or SRC (LOWER)."""
        fd = self._roots.get(where)
        if fd is None:
            with self.lock:
                fd = self._roots.get(where)
                if fd is None:
                    path = self.upper if where == UPPER else self.src
                    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    self._roots[where] = fd
        return fd

    @contextlib.contextmanager
    def _parent(self, where: str, rel: str) -> Iterator[tuple[int, str]]:
        """(an O_PATH descriptor of ``rel``'s directory, ``rel``'s name)."""
        parent, name = split(rel)
        with dir_fd(self.root_fd(where), parent) as pfd:
            yield pfd, name

    def lstat_in(self, where: str, rel: str) -> os.stat_result:
        """lstat of ``rel`` in one tree (UPPER or LOWER), whiteouts aside."""
        return lstat_beneath(self.root_fd(where), rel)

    def stat_or_none(self, where: str, rel: str) -> os.stat_result | None:
        try:
            return self.lstat_in(where, rel)
        except OSError as exc:
            if _gone(exc):
                return None
            raise

    def _is_dir(self, where: str, rel: str) -> bool:
        st = self.stat_or_none(where, rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def _listdir(self, where: str, rel: str) -> list[str]:
        """The names in directory ``rel`` of one tree; [] if it is none."""
        try:
            return listdir_beneath(self.root_fd(where), rel)
        except OSError as exc:
            if _gone(exc):
                return []
            raise

    def hash_in(self, where: str, rel: str) -> str:
        """blake3 of regular file ``rel`` in one tree, its access time left alone."""
        root = self.root_fd(where)
        fd = without_atime(
            lambda f: open_beneath(root, rel, f), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW
        )
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", rel)
            return hash_fd(fd)
        finally:
            os.close(fd)

    # -- resolution

    def upath(self, rel: str) -> str:
        """``rel``'s upper path, for the engine's readers (``resolve``) and
        messages; this module's own calls go through ``root_fd``."""
        return os.path.join(self.upper, rel) if rel else self.upper

    def lpath(self, rel: str) -> str:
        return os.path.join(self.src, rel) if rel else self.src

    def in_upper(self, rel: str) -> bool:
        return not rel or lexists_beneath(self.root_fd(UPPER), rel)

    def lower_hidden(self, rel: str) -> bool:
        """SRC's ``rel`` is not part of the staged tree (it or a parent is whited out)."""
        if not rel or not self.whiteouts:
            return False
        parts = rel.split("/")
        return any("/".join(parts[:i]) in self.whiteouts for i in range(1, len(parts) + 1))

    def in_lower(self, rel: str) -> bool:
        """SRC has ``rel`` and the staged tree does not hide it."""
        return not self.lower_hidden(rel) and lexists_beneath(self.root_fd(LOWER), rel)

    def resolve(self, rel: str) -> str | None:
        """Where the staged tree's ``rel`` is: the upper copy, SRC's, or None."""
        if self.in_upper(rel):
            return self.upath(rel)
        if self.lower_hidden(rel):
            return None
        return self.lpath(rel)

    def gone_path(self, rel: str) -> str:
        """A path that never exists, for a whited-out ``rel``."""
        return os.path.join(str(self.dir), "whiteout", rel)

    def names(self, rel: str) -> dict[str, str]:
        """The entries of directory ``rel`` in the staged tree: name -> UPPER|LOWER."""
        out: dict[str, str] = {}
        if not self.lower_hidden(rel):
            for name in self._listdir(LOWER, rel):
                if _join(rel, name) not in self.whiteouts and not name.endswith(TMP_SUFFIX):
                    out[name] = LOWER
        for name in self._listdir(UPPER, rel):
            if not name.endswith(TMP_SUFFIX):  # a copy-up under way
                out[name] = UPPER
        return out

    def identity(self, st: os.stat_result) -> tuple[int, int] | None:
        """The SRC identity a copied-up node keeps showing, if it has one."""
        return self.origins.get(st.st_ino)

    # -- copy-up

    def copy_up(self, rel: str) -> list[str]:
        """Make ``rel`` (and its parents) live in the upper layer, keeping
        their bytes, mode, owner, times and user xattrs.  ENOENT if the
        staged tree has no ``rel``.  Returns the other names of a hard-linked
        file that now share its copy (their bytes live in the layer too)."""
        with self.lock:
            if self.in_upper(rel):
                return []
            if not self.in_lower(rel):
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), rel)
            # ``rel`` and each parent the layer lacks, the topmost copied first
            # (a loop, not recursion: a path may be 2,000 levels deep).
            missing = [rel]
            parent = rel.rpartition("/")[0]
            while not self.in_upper(parent):
                missing.append(parent)
                parent = parent.rpartition("/")[0]
            for each in reversed(missing[1:]):
                self._copy_one(each)
            st = self._copy_one(rel)
            linked = self._link_others(rel, st)
            self.save()
            return linked

    def _link_others(self, rel: str, st: os.stat_result) -> list[str]:
        """Link SRC's other names of ``rel``'s inode (``st``, SRC's lstat) to
        its upper copy: one inode in the layer, as in SRC."""
        if self.other_names is None or not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
            return []
        out = []
        for other in self.other_names(rel, st):
            if self.in_upper(other) or not self.in_lower(other):
                continue
            ost = self.stat_or_none(LOWER, other)
            if ost is None or (ost.st_dev, ost.st_ino) != (st.st_dev, st.st_ino):
                continue
            self.copy_up(other.rpartition("/")[0])
            with (
                self._parent(UPPER, rel) as (rfd, rname),
                self._parent(UPPER, other) as (ofd, oname),
            ):
                os.link(rname, oname, src_dir_fd=rfd, dst_dir_fd=ofd, follow_symlinks=False)
            out.append(other)
        return out

    def _copy_one(self, rel: str) -> os.stat_result:
        """Copy ``rel`` up (its parent is up already); returns SRC's lstat of it."""
        with self._parent(LOWER, rel) as (lfd, name), self._parent(UPPER, rel) as (ufd, _):
            st = os.stat(name, dir_fd=lfd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(name, 0o700, dir_fd=ufd)
            elif stat.S_ISREG(st.st_mode):
                tmp = _temp_name(name)
                src_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=lfd)
                try:
                    dst_fd = os.open(
                        tmp,
                        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600,
                        dir_fd=ufd,
                    )
                    try:
                        if not reflink(src_fd, dst_fd):
                            copy_fd(src_fd, dst_fd)
                        os.fsync(dst_fd)
                    finally:
                        os.close(dst_fd)
                finally:
                    os.close(src_fd)
                os.rename(tmp, name, src_dir_fd=ufd, dst_dir_fd=ufd)
            elif stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=lfd), name, dir_fd=ufd)
            else:
                os.mknod(name, st.st_mode, st.st_rdev, dir_fd=ufd)
            os.chown(name, st.st_uid, st.st_gid, dir_fd=ufd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                chmod_nofollow(ufd, name, stat.S_IMODE(st.st_mode))
                _copy_xattrs(lfd, name, proc_path(ufd, name))
            os.utime(name, dir_fd=ufd, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
            self.origins[os.stat(name, dir_fd=ufd, follow_symlinks=False).st_ino] = (
                st.st_dev,
                st.st_ino,
            )
        return st

    # -- bookkeeping for the mount's name changes

    def whiteout(self, rel: str) -> None:
        """``rel`` was removed from the staged tree: hide SRC's, if SRC has one."""
        with self.lock:
            if lexists_beneath(self.root_fd(LOWER), rel) and not self.lower_hidden(rel):
                self.whiteouts.add(rel)
                self.save()

    def forget_upper(self, st: os.stat_result) -> None:
        if st.st_nlink <= 1:
            self.origins.pop(st.st_ino, None)

    # -- what is staged

    def _walk_upper(self) -> Iterator[tuple[str, os.stat_result]]:
        """Every node of the upper tree (no symlink followed), each directory's
        entries in name order, a directory before what it holds."""
        root = self.root_fd(UPPER)
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                fd = open_beneath(root, rel, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                if _gone(exc):
                    continue
                raise
            found: list[tuple[str, os.stat_result]] = []
            try:
                for name in sorted(os.listdir(fd)):
                    if name.endswith(TMP_SUFFIX):
                        continue
                    try:
                        found.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
                    except FileNotFoundError:
                        continue
            finally:
                os.close(fd)
            below = []
            for name, st in found:
                child = _join(rel, name)
                yield child, st
                if stat.S_ISDIR(st.st_mode):
                    below.append(child)
            stack.extend(reversed(below))

    def changes(self, paths: list[str] | None = None) -> list[Staged]:
        """Every staged change (at or below ``paths``, if given), sorted by path."""
        out: dict[str, Staged] = {}
        with self.lock:
            for rel, st in self._walk_upper():
                if not _under(rel, paths):
                    continue
                kind = _kind(st.st_mode)
                lower = self.in_lower(rel)
                if kind == "dir":
                    if lower and self._is_dir(LOWER, rel):
                        continue  # a parent of something staged
                    out[rel] = Staged(rel, "replaced" if rel in self.whiteouts else "added", kind)
                elif lower:
                    out[rel] = Staged(rel, "modified", kind)
                else:
                    status = "replaced" if rel in self.whiteouts else "added"
                    out[rel] = Staged(rel, status, kind)
            for rel in self.whiteouts:
                if rel in out or not _under(rel, paths) or self.in_upper(rel):
                    continue
                lst = self.stat_or_none(LOWER, rel)
                if lst is None:
                    continue  # gone from SRC too
                out[rel] = Staged(rel, "deleted", _kind(lst.st_mode))
        return [out[k] for k in sorted(out)]

    def empty(self) -> bool:
        return not self.changes()

    # -- commit and discard

    def intent(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.dir / INTENT).read_text()))
        except FileNotFoundError:
            return None

    def commit(
        self, paths: list[str] | None = None, *, changed: Callable[[str], None] = lambda _r: None
    ) -> dict[str, Any]:
        """Write the staged changes at or below ``paths`` (all if None) into SRC.

        Crash-safe: the selection goes to an intent log first; each file is
        written to a fixed temp name beside its target, fsynced and renamed
        over it, so every file is old or new whatever happens; the upper copy
        goes only after.  A commit interrupted by a crash is finished by the
        next one (``recover``), which redoes what the log names.
        ``changed(rel)`` is told of every path that changed in SRC."""
        with self.lock:
            pending = self.intent()
            if pending is not None:
                paths = (
                    None if pending.get("paths") is None else list(pending["paths"]) + (paths or [])
                )
            selected = self.changes(paths)
            if not selected and pending is None:
                return {"committed": [], "kept": []}
            todo = sorted(
                {c.path for c in selected} | set(pending.get("todo", []) if pending else [])
            )
            save_file(self.dir / INTENT, json.dumps({"paths": paths, "todo": todo}).encode())
            self._clean_temps(todo)
            pause = int(os.environ.get(PAUSE_ENV, "0") or 0)
            done: list[str] = []
            kept: list[str] = []
            by_path = {c.path: c for c in selected}
            # Deletions deepest first, then additions and rewrites parents first.
            deletes = [c for c in selected if c.status in ("deleted", "replaced")]
            for c in sorted(deletes, key=lambda c: c.path.count("/"), reverse=True):
                if not self._delete_lower(c.path):
                    kept.append(c.path)
                changed(c.path)
            writes = [by_path[p] for p in todo if p in by_path and by_path[p].status != "deleted"]
            linked: dict[int, str] = {}
            dirs: set[str] = set()
            for n, c in enumerate(writes):
                if pause and n == pause:
                    log.warning("commit paused after %d files (%s)", n, PAUSE_ENV)
                    time.sleep(3600)
                self._write_lower(c, linked, dirs)
                done.append(c.path)
                changed(c.path)
            for d in sorted(dirs):
                # each rename is durable before its upper copy goes
                fsync_beneath(self.root_fd(LOWER), d)
            for c in writes:
                self._drop_upper(c)
            for c in deletes:
                self.whiteouts.discard(c.path)
                for w in list(self.whiteouts):
                    if w.startswith(c.path + "/"):
                        self.whiteouts.discard(w)
            self.save()
            (self.dir / INTENT).unlink()
            fsync_dir(self.dir)
            return {
                "committed": sorted(done + [c.path for c in deletes if c.path not in kept]),
                "kept": kept,
            }

    def recover(self, changed: Callable[[str], None] = lambda _r: None) -> dict[str, Any] | None:
        """Finish a commit a crash interrupted (None if there was none)."""
        if self.intent() is None:
            return None
        return self.commit([], changed=changed)

    def _clean_temps(self, todo: list[str]) -> None:
        for rel in todo:
            try:
                with self._parent(LOWER, rel) as (pfd, name):
                    os.unlink(_temp_name(name), dir_fd=pfd)
            except OSError as exc:
                if not _gone(exc):
                    raise

    def _unlink(self, where: str, rel: str) -> None:
        with self._parent(where, rel) as (pfd, name):
            os.unlink(name, dir_fd=pfd)

    def _rmdir(self, where: str, rel: str) -> None:
        with self._parent(where, rel) as (pfd, name):
            os.rmdir(name, dir_fd=pfd)

    def _delete_lower(self, rel: str) -> bool:
        """Remove SRC's ``rel`` (what the staged tree deleted or replaced);
        False if a directory still holds something the staged tree never saw."""
        st = self.stat_or_none(LOWER, rel)
        if st is None:
            return True
        if not stat.S_ISDIR(st.st_mode):
            if lexists_beneath(self.root_fd(UPPER), rel):
                return True  # replaced by the rename of its new bytes over it
            self._unlink(LOWER, rel)
            fsync_beneath(self.root_fd(LOWER), rel.rpartition("/")[0])
            return True
        return self._rmtree_hidden(rel, keep_upper=self._is_dir(UPPER, rel))

    def _rmtree_hidden(self, rel: str, *, keep_upper: bool) -> bool:
        """Remove what SRC's directory ``rel`` holds that the staged tree
        does not show; with ``keep_upper`` False, the directory too.  False
        if a directory still held something (left in SRC, with a warning)."""
        ok = True
        # (directory, whether the staged tree shows it), each after its
        # parent: a loop, not recursion, whatever the depth.
        todo = [(rel, keep_upper)]
        for d, keep in todo:
            for name in self._listdir(LOWER, d):
                child = _join(d, name)
                lst = self.stat_or_none(LOWER, child)
                if lst is None:
                    continue
                if (
                    child in self.whiteouts
                    or not keep
                    or not lexists_beneath(self.root_fd(UPPER), child)
                ):
                    if stat.S_ISDIR(lst.st_mode):
                        todo.append((child, False))
                    else:
                        self._unlink(LOWER, child)
                elif stat.S_ISDIR(lst.st_mode) and self._is_dir(UPPER, child):
                    todo.append((child, True))
        for d, keep in reversed(todo):
            if keep:
                continue
            try:
                self._rmdir(LOWER, d)
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                log.warning("%s: not removed from SRC on commit: not empty", d)
                ok = False
        return ok

    def _make_lower_dirs(self, rel: str) -> None:
        """Make each parent of ``rel`` SRC lacks, as the layer has it."""
        missing = []
        parent = rel.rpartition("/")[0]
        while parent and not self._is_dir(LOWER, parent):
            missing.append(parent)
            parent = parent.rpartition("/")[0]
        for d in reversed(missing):
            ust = self.lstat_in(UPPER, d)
            mode = stat.S_IMODE(ust.st_mode)
            with self._parent(LOWER, d) as (pfd, name):
                os.mkdir(name, mode, dir_fd=pfd)
                os.chown(name, ust.st_uid, ust.st_gid, dir_fd=pfd, follow_symlinks=False)
                chmod_nofollow(pfd, name, mode)
            fsync_beneath(self.root_fd(LOWER), d.rpartition("/")[0])

    def _write_lower(self, c: Staged, linked: dict[int, str], dirs: set[str]) -> None:
        self._make_lower_dirs(c.path)
        parent = c.path.rpartition("/")[0]
        with self._parent(UPPER, c.path) as (ufd, name), self._parent(LOWER, c.path) as (lfd, _):
            ust = os.stat(name, dir_fd=ufd, follow_symlinks=False)
            mode = stat.S_IMODE(ust.st_mode)
            if stat.S_ISDIR(ust.st_mode):
                if not self._is_dir(LOWER, c.path):
                    os.mkdir(name, 0o700, dir_fd=lfd)
                os.chown(name, ust.st_uid, ust.st_gid, dir_fd=lfd, follow_symlinks=False)
                chmod_nofollow(lfd, name, mode)
                fsync_beneath(self.root_fd(LOWER), parent)
                return
            tmp = _temp_name(name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=lfd)
            first = linked.get(ust.st_ino)
            if first is not None and ust.st_nlink > 1:
                # hard links staged together stay one inode
                with self._parent(LOWER, first) as (ffd, fname):
                    os.link(fname, tmp, src_dir_fd=ffd, dst_dir_fd=lfd, follow_symlinks=False)
            elif stat.S_ISREG(ust.st_mode):
                src_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=ufd)
                try:
                    dst_fd = os.open(
                        tmp,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                        0o600,
                        dir_fd=lfd,
                    )
                    try:
                        if not reflink(src_fd, dst_fd):
                            copy_fd(src_fd, dst_fd)
                        os.fchown(dst_fd, ust.st_uid, ust.st_gid)
                        os.fchmod(dst_fd, mode)
                        _copy_xattrs(ufd, name, dst_fd)
                        os.utime(dst_fd, ns=(ust.st_atime_ns, ust.st_mtime_ns))
                        os.fsync(dst_fd)
                    finally:
                        os.close(dst_fd)
                finally:
                    os.close(src_fd)
            elif stat.S_ISLNK(ust.st_mode):
                os.symlink(os.readlink(name, dir_fd=ufd), tmp, dir_fd=lfd)
                os.chown(tmp, ust.st_uid, ust.st_gid, dir_fd=lfd, follow_symlinks=False)
            else:
                os.mknod(tmp, ust.st_mode, ust.st_rdev, dir_fd=lfd)
                os.chown(tmp, ust.st_uid, ust.st_gid, dir_fd=lfd, follow_symlinks=False)
                # the daemon's umask (077) must not matter
                chmod_nofollow(lfd, tmp, mode)
            if self._is_dir(LOWER, c.path):
                self._rmtree_hidden(
                    c.path, keep_upper=False
                )  # a directory the staged tree replaced
            os.rename(tmp, name, src_dir_fd=lfd, dst_dir_fd=lfd)
        dirs.add(parent)  # fsynced once, before the upper copy goes
        if ust.st_nlink > 1:
            linked.setdefault(ust.st_ino, c.path)

    def _drop_upper(self, c: Staged) -> None:
        st = self.stat_or_none(UPPER, c.path)
        if st is None:
            return
        if stat.S_ISDIR(st.st_mode):
            return  # emptied from below; pruned with its parents
        self._unlink(UPPER, c.path)
        self.forget_upper(st)
        self.whiteouts.discard(c.path)
        self._prune(c.path.rpartition("/")[0])

    def _prune(self, rel: str) -> None:
        """Drop upper directories that hold nothing staged any more."""
        while rel:
            try:
                st = self.lstat_in(UPPER, rel)
                if (
                    listdir_beneath(self.root_fd(UPPER), rel)
                    or not self.in_lower(rel)
                    or rel in self.whiteouts
                ):
                    return
                lst = self.lstat_in(LOWER, rel)
                if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) != (
                    stat.S_IMODE(lst.st_mode),
                    lst.st_uid,
                    lst.st_gid,
                ):
                    return  # its own metadata is staged
                self._rmdir(UPPER, rel)
                self.origins.pop(st.st_ino, None)
            except OSError:
                return
            rel = rel.rpartition("/")[0]

    def _rmtree_upper(self, rel: str) -> None:
        """Remove directory ``rel`` of the upper tree and all it holds."""
        dirs = [rel]  # each directory after its parent
        for d in dirs:
            fd = open_beneath(self.root_fd(UPPER), d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                for name in os.listdir(fd):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        dirs.append(_join(d, name))
                    else:
                        os.unlink(name, dir_fd=fd)
                        self.forget_upper(st)
            finally:
                os.close(fd)
        for d in reversed(dirs):
            st = self.lstat_in(UPPER, d)
            self._rmdir(UPPER, d)
            self.origins.pop(st.st_ino, None)

    def _lower_files(self, rel: str) -> Iterator[str]:
        """``rel`` and every path below it in SRC."""
        stack = [rel]
        while stack:
            each = stack.pop()
            yield each
            if self._is_dir(LOWER, each):
                stack.extend(_join(each, name) for name in self._listdir(LOWER, each))

    def discard(
        self, paths: list[str] | None = None, *, changed: Callable[[str], None] = lambda _r: None
    ) -> list[str]:
        """Drop the staged changes at or below ``paths`` (all if None); returns
        the paths whose staged state went.  ``changed(rel)`` is told of each
        path the staged tree shows differently now (SRC's files back under a
        dropped whiteout included)."""
        with self.lock:
            selected = self.changes(paths)
            dropped: list[str] = []
            for c in sorted(selected, key=lambda c: c.path.count("/"), reverse=True):
                ust = self.stat_or_none(UPPER, c.path)
                if ust is not None:
                    if stat.S_ISDIR(ust.st_mode):
                        self._rmtree_upper(c.path)
                    else:
                        self._unlink(UPPER, c.path)
                        self.forget_upper(ust)
                    changed(c.path)
                if c.path in self.whiteouts or any(
                    w.startswith(c.path + "/") for w in self.whiteouts
                ):
                    for w in [
                        w for w in self.whiteouts if w == c.path or w.startswith(c.path + "/")
                    ]:
                        self.whiteouts.discard(w)
                    for rel in self._lower_files(c.path):
                        changed(rel)
                dropped.append(c.path)
                self._prune(c.path.rpartition("/")[0])
            if paths is None:
                self.whiteouts.clear()
            self.save()
            return sorted(dropped)

    def same_bytes(self, rel: str) -> bool:
        """The upper copy of ``rel`` and SRC's hold the same (a symlink: the
        same target)."""
        try:
            ust, lst = self.lstat_in(UPPER, rel), self.lstat_in(LOWER, rel)
            if stat.S_ISLNK(ust.st_mode) or stat.S_ISLNK(lst.st_mode):
                if not (stat.S_ISLNK(ust.st_mode) and stat.S_ISLNK(lst.st_mode)):
                    return False
                with self._parent(UPPER, rel) as (ufd, name), self._parent(LOWER, rel) as (lfd, _):
                    return os.readlink(name, dir_fd=ufd) == os.readlink(name, dir_fd=lfd)
            if not (stat.S_ISREG(ust.st_mode) and stat.S_ISREG(lst.st_mode)):
                return stat.S_IFMT(ust.st_mode) == stat.S_IFMT(lst.st_mode) and (
                    ust.st_rdev == lst.st_rdev
                )
            return self.hash_in(UPPER, rel) == self.hash_in(LOWER, rel)
        except OSError:
            return False


def walk(staging: Staging, skip_top: frozenset[str]) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file of the staged tree, never following symlinks."""
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            names = staging.names(rel_dir)
        except OSError as exc:
            log.warning("%s: cannot list: %s", rel_dir or ".", exc.strerror)
            continue
        for name, where in names.items():
            if not rel_dir and name in skip_top:
                continue
            rel = _join(rel_dir, name)
            try:
                st = staging.lstat_in(where, rel)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                yield rel, st


def _temp_name(name: str) -> str:
    """The temp name beside entry ``name`` (a copy-up's in the layer, a
    commit's in SRC): fixed, so a re-run finds it, and within NAME_MAX
    whatever the length of ``name``."""
    tmp = f".{name}{TMP_SUFFIX}"
    if len(os.fsencode(tmp)) <= NAME_MAX:
        return tmp
    return f".{hash_bytes(os.fsencode(name))[:32]}{TMP_SUFFIX}"


def _copy_xattrs(pfd: int, name: str, dst: int | str) -> None:
    """Copy entry ``name`` of directory ``pfd``'s user xattrs onto ``dst``
    (a descriptor, or a path that is no symlink)."""
    src = proc_path(pfd, name)
    for attr in user_xattrs(pfd, name):
        with contextlib.suppress(OSError):
            os.setxattr(dst, attr, os.getxattr(src, attr, follow_symlinks=False))


def committed_report(staging: Staging) -> list[tuple[str, str]]:
    """After an interrupted commit: each path the intent log names, with
    'committed' or 'staged' (derived from the bytes, not the log)."""
    pending = staging.intent()
    if pending is None:
        return []
    out = []
    for rel in pending.get("todo", []):
        ust = staging.stat_or_none(UPPER, rel)
        if ust is None:
            state = "committed"
        elif stat.S_ISDIR(ust.st_mode):
            state = "committed" if staging._is_dir(LOWER, rel) else "staged"
        else:
            state = "committed" if staging.same_bytes(rel) else "staged"
        out.append((rel, state))
    return out


# -- the engine's operations (the CLI's, locally or through the daemon)


def require(ws: Any) -> Staging:
    st = getattr(ws, "staging", None)
    if not isinstance(st, Staging):
        raise StagingError(f"{ws.src}: not a staged workspace (`swfs mount --staged SRC MNT`)")
    return st


def _settle(ws: Any, rels: list[str]) -> None:
    """The engine (and, through its listeners, the kernel) learns what the
    staged tree shows for ``rels`` now."""
    for rel in dict.fromkeys(rels):
        ws.check_file(rel)
        ws.notify_changed(rel)


def list_staged(ws: Any, paths: list[str] | None = None) -> dict[str, Any]:
    st = require(ws)
    return {
        "staged": [c.as_json() for c in st.changes(paths)],
        "commit": committed_report(st),
    }


def commit_ws(ws: Any, paths: list[str] | None = None) -> dict[str, Any]:
    st = require(ws)
    # A descriptor open for writing writes to the upper copy, which a commit
    # replaces: the writer must close first, or its later writes would be lost.
    writing = sorted(ws.writes.open_paths() & {c.path for c in st.changes(paths)})
    if writing:
        raise StagingError(
            f"{', '.join(writing)}: open for writing; close it, then commit "
            "(or commit the other paths by name)"
        )
    touched: list[str] = []
    try:
        return st.commit(paths, changed=touched.append)
    finally:
        _settle(ws, touched)


def discard_ws(ws: Any, paths: list[str] | None = None) -> dict[str, Any]:
    st = require(ws)
    touched: list[str] = []
    try:
        return {"discarded": st.discard(paths, changed=touched.append)}
    finally:
        _settle(ws, touched)


def recover_ws(ws: Any) -> dict[str, Any] | None:
    """At daemon start: finish a commit a crash interrupted."""
    st = getattr(ws, "staging", None)
    if not isinstance(st, Staging) or st.intent() is None:
        return None
    log.warning("%s: finishing a commit that was interrupted", ws.src)
    return commit_ws(ws, [])


def _paths(request: dict[str, Any]) -> list[str] | None:
    paths = request.get("paths")
    return None if not paths else [str(p) for p in paths]


CONTROL_OPS: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "staged": lambda ws, r: list_staged(ws, _paths(r)),
    "commit": lambda ws, r: commit_ws(ws, _paths(r)),
    "discard": lambda ws, r: discard_ws(ws, _paths(r)),
}


# -- .review/STAGED.md and STAGED.diff: the staged tree against SRC


def _sides(ws: Any, st: Staging, c: Staged) -> tuple[list[Any] | None, list[Any] | None]:
    new = None
    if c.status != "deleted":
        rec = ws.get_record(c.path)
        new = rec.manifest_entry() if rec is not None else None
    old = None
    lst = None if c.status == "added" else st.stat_or_none(LOWER, c.path)
    if lst is not None and stat.S_ISREG(lst.st_mode):
        parser = new[5] if new is not None else None
        if parser is None:
            base = ws.baseline_manifest().get(c.path)
            parser = base[5] if base else None
        old = [
            st.hash_in(LOWER, c.path),
            lst.st_size,
            lst.st_mode,
            lst.st_uid,
            lst.st_gid,
            parser,
        ]
    return old, new


def _review_entries(ws: Reviewed) -> list[tuple[Any, list[Any] | None, list[Any] | None]]:
    st = require(ws)
    status = {
        "added": ChangeStatus.ADDED,
        "deleted": ChangeStatus.DELETED,
        "modified": ChangeStatus.MODIFIED,
        "replaced": ChangeStatus.MODIFIED,
    }
    out = []
    for c in st.changes():
        if c.kind != "file":
            continue
        old, new = _sides(ws, st, c)
        e = ReviewEntry(
            RelPath(c.path),
            status[c.status],
            Hash(old[0]) if old else None,
            Hash(new[0]) if new else None,
        )
        out.append((e, old, new))
    return out


def staged_summary(ws: Any) -> bytes:
    st = require(ws)
    changes = st.changes()
    lines = [
        "# swfs review: staged changes, not yet in SRC",
        "",
        f"{len(changes)} staged path(s). `swfs commit TARGET [PATH...]` writes them to SRC,",
        "`swfs discard TARGET [PATH...]` drops them. Diffs against SRC: `.review/STAGED.diff`.",
        "",
    ]
    hashes = {e.rel: (e.baseline_hash, e.current_hash) for e, _, _ in _review_entries(ws)}
    if changes:
        lines += [
            "| status | kind | path | SRC hash | staged hash |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in changes:
            old, new = hashes.get(c.path, (None, None))
            lines.append(f"| {c.status} | {c.kind} | {c.path} | {label(old)} | {label(new)} |")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def staged_diff(ws: Any) -> bytes:
    parts = []
    for e, old, new in _review_entries(ws):
        text, _final = review.render(ws, e, old, new)
        parts.append(text)
    return "".join(parts).encode("utf-8", "surrogateescape")
