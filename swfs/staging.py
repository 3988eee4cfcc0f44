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

from swfs.fsutil import copy_fd, fsync_dir, reflink, save_file

log = logging.getLogger(__name__)

STAGE_DIR = "staged"
STATE = "state.json"
INTENT = "commit.json"
# Temp names of a copy-up (in the layer) and a commit (beside the target in
# SRC): never shown in the staged tree.
TMP_SUFFIX = ".swfs-commit"
# Test hook: a commit stops (sleeps) after this many files, to be killed.
PAUSE_ENV = "SWFS_TEST_COMMIT_PAUSE_AFTER"


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


class Staging:
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

    # -- resolution

    def upath(self, rel: str) -> str:
        return os.path.join(self.upper, rel) if rel else self.upper

    def lpath(self, rel: str) -> str:
        return os.path.join(self.src, rel) if rel else self.src

    def in_upper(self, rel: str) -> bool:
        return not rel or os.path.lexists(self.upath(rel))

    def lower_hidden(self, rel: str) -> bool:
        """SRC's ``rel`` is not part of the staged tree (it or a parent is whited out)."""
        if not rel or not self.whiteouts:
            return False
        parts = rel.split("/")
        return any("/".join(parts[:i]) in self.whiteouts for i in range(1, len(parts) + 1))

    def in_lower(self, rel: str) -> bool:
        """SRC has ``rel`` and the staged tree does not hide it."""
        return not self.lower_hidden(rel) and os.path.lexists(self.lpath(rel))

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
        """The entries of directory ``rel`` in the staged tree: name -> 'upper'|'lower'."""
        out: dict[str, str] = {}
        if not self.lower_hidden(rel):
            with contextlib.suppress(NotADirectoryError, FileNotFoundError):
                for name in os.listdir(self.lpath(rel)):
                    if _join(rel, name) not in self.whiteouts and not name.endswith(TMP_SUFFIX):
                        out[name] = "lower"
        with contextlib.suppress(NotADirectoryError, FileNotFoundError):
            for name in os.listdir(self.upath(rel)):
                if not name.endswith(TMP_SUFFIX):  # a copy-up under way
                    out[name] = "upper"
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
            parent = rel.rpartition("/")[0]
            self.copy_up(parent)
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
            try:
                ost = os.lstat(self.lpath(other))
            except FileNotFoundError:
                continue
            if (ost.st_dev, ost.st_ino) != (st.st_dev, st.st_ino):
                continue
            self.copy_up(other.rpartition("/")[0])
            os.link(self.upath(rel), self.upath(other))
            out.append(other)
        return out

    def _copy_one(self, rel: str) -> os.stat_result:
        """Copy ``rel`` up; returns SRC's lstat of it."""
        lower, upper = self.lpath(rel), self.upath(rel)
        st = os.lstat(lower)
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(upper, 0o700)
        elif stat.S_ISREG(st.st_mode):
            tmp = upper + TMP_SUFFIX
            src_fd = os.open(lower, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                try:
                    if not reflink(src_fd, dst_fd):
                        copy_fd(src_fd, dst_fd)
                    os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
            os.rename(tmp, upper)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(lower), upper)
        else:
            os.mknod(upper, st.st_mode, st.st_rdev)
        os.chown(upper, st.st_uid, st.st_gid, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(upper, stat.S_IMODE(st.st_mode))
            for name in _xattrs(lower):
                with contextlib.suppress(OSError):
                    os.setxattr(upper, name, os.getxattr(lower, name))
        os.utime(upper, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        self.origins[os.lstat(upper).st_ino] = (st.st_dev, st.st_ino)
        return st

    # -- bookkeeping for the mount's name changes

    def whiteout(self, rel: str) -> None:
        """``rel`` was removed from the staged tree: hide SRC's, if SRC has one."""
        with self.lock:
            if os.path.lexists(self.lpath(rel)) and not self.lower_hidden(rel):
                self.whiteouts.add(rel)
                self.save()

    def forget_upper(self, st: os.stat_result) -> None:
        if st.st_nlink <= 1:
            self.origins.pop(st.st_ino, None)

    # -- what is staged

    def _walk_upper(self, rel: str = "") -> Iterator[tuple[str, os.stat_result]]:
        try:
            names = sorted(os.listdir(self.upath(rel)))
        except (NotADirectoryError, FileNotFoundError):
            return
        for name in names:
            child = _join(rel, name)
            if name.endswith(TMP_SUFFIX):
                continue
            try:
                st = os.lstat(self.upath(child))
            except FileNotFoundError:
                continue
            yield child, st
            if stat.S_ISDIR(st.st_mode):
                yield from self._walk_upper(child)

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
                    if lower and stat.S_ISDIR(os.lstat(self.lpath(rel)).st_mode):
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
                try:
                    kind = _kind(os.lstat(self.lpath(rel)).st_mode)
                except FileNotFoundError:
                    continue  # gone from SRC too
                out[rel] = Staged(rel, "deleted", kind)
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
                fsync_dir(d)  # each rename is durable before its upper copy goes
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
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(_temp_name(self.lpath(rel)))

    def _delete_lower(self, rel: str) -> bool:
        """Remove SRC's ``rel`` (what the staged tree deleted or replaced);
        False if a directory still holds something the staged tree never saw."""
        lower = self.lpath(rel)
        try:
            st = os.lstat(lower)
        except FileNotFoundError:
            return True
        if not stat.S_ISDIR(st.st_mode):
            if os.path.lexists(self.upath(rel)):
                return True  # replaced by the rename of its new bytes over it
            os.unlink(lower)
            fsync_dir(os.path.dirname(lower))
            return True
        keep = self.upath(rel) if os.path.isdir(self.upath(rel)) else None
        return self._rmtree_hidden(rel, keep)

    def _rmtree_hidden(self, rel: str, upper_dir: str | None) -> bool:
        ok = True
        for name in os.listdir(self.lpath(rel)):
            child = _join(rel, name)
            if (
                child in self.whiteouts
                or upper_dir is None
                or not os.path.lexists(os.path.join(upper_dir, name))
            ):
                path = self.lpath(child)
                if os.path.isdir(path) and not os.path.islink(path):
                    ok = self._rmtree_hidden(child, None) and ok
                else:
                    os.unlink(path)
            elif os.path.isdir(self.lpath(child)) and os.path.isdir(self.upath(child)):
                ok = self._rmtree_hidden(child, self.upath(child)) and ok
        if upper_dir is None:
            try:
                os.rmdir(self.lpath(rel))
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                log.warning("%s: not removed from SRC on commit: not empty", rel)
                return False
        return ok

    def _make_lower_dirs(self, rel: str) -> None:
        parent = rel.rpartition("/")[0]
        if not parent or os.path.isdir(self.lpath(parent)):
            return
        self._make_lower_dirs(parent)
        ust = os.lstat(self.upath(parent))
        os.mkdir(self.lpath(parent), stat.S_IMODE(ust.st_mode))
        os.chown(self.lpath(parent), ust.st_uid, ust.st_gid)
        os.chmod(self.lpath(parent), stat.S_IMODE(ust.st_mode))
        fsync_dir(os.path.dirname(self.lpath(parent)))

    def _write_lower(self, c: Staged, linked: dict[int, str], dirs: set[str]) -> None:
        upper, lower = self.upath(c.path), self.lpath(c.path)
        self._make_lower_dirs(c.path)
        ust = os.lstat(upper)
        if stat.S_ISDIR(ust.st_mode):
            if not os.path.isdir(lower):
                os.mkdir(lower, 0o700)
            os.chown(lower, ust.st_uid, ust.st_gid)
            os.chmod(lower, stat.S_IMODE(ust.st_mode))
            fsync_dir(os.path.dirname(lower))
            return
        tmp = _temp_name(lower)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        first = linked.get(ust.st_ino)
        if first is not None and ust.st_nlink > 1:
            os.link(self.lpath(first), tmp)  # hard links staged together stay one inode
        elif stat.S_ISREG(ust.st_mode):
            src_fd = os.open(upper, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                dst_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                try:
                    if not reflink(src_fd, dst_fd):
                        copy_fd(src_fd, dst_fd)
                    os.fchown(dst_fd, ust.st_uid, ust.st_gid)
                    os.fchmod(dst_fd, stat.S_IMODE(ust.st_mode))
                    for name in _xattrs(upper):
                        with contextlib.suppress(OSError):
                            os.setxattr(dst_fd, name, os.getxattr(upper, name))
                    os.utime(dst_fd, ns=(ust.st_atime_ns, ust.st_mtime_ns))
                    os.fsync(dst_fd)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
        elif stat.S_ISLNK(ust.st_mode):
            os.symlink(os.readlink(upper), tmp)
            os.chown(tmp, ust.st_uid, ust.st_gid, follow_symlinks=False)
        else:
            os.mknod(tmp, ust.st_mode, ust.st_rdev)
            os.chown(tmp, ust.st_uid, ust.st_gid)
            os.chmod(tmp, stat.S_IMODE(ust.st_mode))  # the daemon's umask (077) must not matter
        if os.path.isdir(lower) and not os.path.islink(lower):
            self._rmtree_hidden(c.path, None)  # a directory the staged tree replaced
        os.rename(tmp, lower)
        dirs.add(os.path.dirname(lower))  # fsynced once, before the upper copy goes
        if ust.st_nlink > 1:
            linked.setdefault(ust.st_ino, c.path)

    def _drop_upper(self, c: Staged) -> None:
        upper = self.upath(c.path)
        try:
            st = os.lstat(upper)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            return  # emptied from below; pruned with its parents
        os.unlink(upper)
        self.forget_upper(st)
        self.whiteouts.discard(c.path)
        self._prune(c.path.rpartition("/")[0])

    def _prune(self, rel: str) -> None:
        """Drop upper directories that hold nothing staged any more."""
        while rel:
            upper = self.upath(rel)
            try:
                st = os.lstat(upper)
                if os.listdir(upper) or not self.in_lower(rel) or rel in self.whiteouts:
                    return
                lst = os.lstat(self.lpath(rel))
                if (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) != (
                    stat.S_IMODE(lst.st_mode),
                    lst.st_uid,
                    lst.st_gid,
                ):
                    return  # its own metadata is staged
                os.rmdir(upper)
                self.origins.pop(st.st_ino, None)
            except OSError:
                return
            rel = rel.rpartition("/")[0]

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
                upper = self.upath(c.path)
                if os.path.lexists(upper):
                    if os.path.isdir(upper) and not os.path.islink(upper):
                        _rmtree(upper, self)
                    else:
                        st = os.lstat(upper)
                        os.unlink(upper)
                        self.forget_upper(st)
                    changed(c.path)
                if c.path in self.whiteouts or any(
                    w.startswith(c.path + "/") for w in self.whiteouts
                ):
                    for w in [
                        w for w in self.whiteouts if w == c.path or w.startswith(c.path + "/")
                    ]:
                        self.whiteouts.discard(w)
                    for rel in _lower_files(self.lpath(c.path), c.path):
                        changed(rel)
                dropped.append(c.path)
                self._prune(c.path.rpartition("/")[0])
            if paths is None:
                self.whiteouts.clear()
            self.save()
            return sorted(dropped)


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
            path = staging.upath(rel) if where == "upper" else staging.lpath(rel)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                yield rel, st


def _temp_name(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}{TMP_SUFFIX}")


def _xattrs(path: str) -> list[str]:
    try:
        return [n for n in os.listxattr(path, follow_symlinks=False) if n.startswith("user.")]
    except OSError:
        return []


def _rmtree(path: str, staging: Staging) -> None:
    for name in os.listdir(path):
        child = os.path.join(path, name)
        if os.path.isdir(child) and not os.path.islink(child):
            _rmtree(child, staging)
        else:
            st = os.lstat(child)
            os.unlink(child)
            staging.forget_upper(st)
    st = os.lstat(path)
    os.rmdir(path)
    staging.origins.pop(st.st_ino, None)


def _lower_files(path: str, rel: str) -> Iterator[str]:
    """``rel`` and every path below it in SRC."""
    yield rel
    if os.path.isdir(path) and not os.path.islink(path):
        for name in os.listdir(path):
            yield from _lower_files(os.path.join(path, name), _join(rel, name))


def committed_report(staging: Staging) -> list[tuple[str, str]]:
    """After an interrupted commit: each path the intent log names, with
    'committed' or 'staged' (derived from the bytes, not the log)."""
    pending = staging.intent()
    if pending is None:
        return []
    out = []
    for rel in pending.get("todo", []):
        upper, lower = staging.upath(rel), staging.lpath(rel)
        if not os.path.lexists(upper):
            state = "committed"
        elif os.path.isdir(upper):
            state = "committed" if os.path.isdir(lower) else "staged"
        else:
            state = "committed" if _same_bytes(upper, lower) else "staged"
        out.append((rel, state))
    return out


def _same_bytes(a: str, b: str) -> bool:
    from swfs.fsutil import hash_file

    try:
        if os.path.islink(a) or os.path.islink(b):
            return os.path.islink(a) and os.path.islink(b) and os.readlink(a) == os.readlink(b)
        return hash_file(a, mmap=False) == hash_file(b, mmap=False)
    except OSError:
        return False


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
        ws._changed(rel)


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
    from swfs.fsutil import hash_file

    new = None
    if c.status != "deleted":
        rec = ws.get_record(c.path)
        new = rec.manifest_entry() if rec is not None else None
    old = None
    lower = st.lpath(c.path)
    if c.status != "added" and os.path.isfile(lower) and not os.path.islink(lower):
        lst = os.lstat(lower)
        parser = new[5] if new is not None else None
        if parser is None:
            base = ws.baseline_manifest().get(c.path)
            parser = base[5] if base else None
        old = [
            hash_file(lower, mmap=False),
            lst.st_size,
            lst.st_mode,
            lst.st_uid,
            lst.st_gid,
            parser,
        ]
    return old, new


def _review_entries(ws: Any) -> list[tuple[Any, list[Any] | None, list[Any] | None]]:
    from swfs.api import ChangeStatus, Hash, RelPath, ReviewEntry

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
    from swfs.hashform import label

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
    from swfs import review

    parts = []
    for e, old, new in _review_entries(ws):
        text, _final = review._render(ws, e, old, new)
        parts.append(text)
    return "".join(parts).encode("utf-8", "surrogateescape")
