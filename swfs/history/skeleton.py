"""The skeleton of a world: which paths and folders a world
(``swfs.history.world``) shows, with which sizes, modes, owners and times,
laid out once at mount as a private directory tree of empty sparse files.

The daemon's native tree of a world (``mountd.worldnative``) answers lookups,
listings and stats from it, so that the directory descriptors, ``*at`` stats
and inode numbers it relies on are real and stable.  The bytes never go
there: opening a file opens its blob (``World.open_file``).  The skeleton
costs one small metadata write per file (no data), and is removed at close;
those of daemons that died without closing are swept at the next.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from swfs import permissions
from swfs.api import Access, RelPath

if TYPE_CHECKING:
    from swfs.history.world import World

log = logging.getLogger(__name__)

SKELETON_PREFIX = "swfs-world-"


class Skeleton:
    """The laid-out tree of ``world`` in a fresh private directory
    (``root``), with an open descriptor of it (``root_fd``)."""

    def __init__(self, world: World) -> None:
        sweep_stale()
        self.root = Path(
            tempfile.mkdtemp(prefix=f"{SKELETON_PREFIX}{os.getpid()}-", dir=skeleton_parent())
        )
        try:
            lay_out(world, self.root)
            self.root_fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def close(self) -> None:
        os.close(self.root_fd)
        shutil.rmtree(self.root, ignore_errors=True)


def skeleton_parent() -> str:
    """Where skeletons go: a tmpfs if there is one (no disk writes, and its
    sparse files take no memory), else the temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _split(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return parent, name


def shown_dirs(world: World) -> set[str]:
    """Every folder ``world`` shows: those of its files, and the (empty)
    ones its snapshot kept."""
    dirs: set[str] = set()
    for rel in [*world.records, *(f"{d}/." for d in world.dirs if d)]:
        head = rel.rpartition("/")[0]
        while head and head not in dirs:
            dirs.add(head)
            head = head.rpartition("/")[0]
    return dirs


def lay_out(world: World, root: Path) -> None:
    """The skeleton of ``world`` under ``root``: directories, then one empty
    file per manifest entry with its size (a hole), mode, owner and time.
    Modes and owners are the snapshot's (``World.access``): a folder it kept
    no mode for is owner-only, never the workspace root's.
    About five system calls a file, each directory opened once."""
    as_root = os.geteuid() == 0
    dirs = shown_dirs(world)
    at_ns = int(world.dir_times() * 1e9)
    old_umask = os.umask(0)  # modes are the manifest's, exactly
    fds: dict[str, int] = {"": os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)}
    try:
        for d in sorted(dirs, key=lambda r: r.count("/")):
            parent, name = _split(d)
            os.mkdir(name, 0o700, dir_fd=fds[parent])
            fds[d] = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fds[parent])
        create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for rel, rec in world.records.items():
            parent, name = _split(rel)
            acc = _access(world, rel, directory=False)
            fd = os.open(name, create, acc.mode & 0o777, dir_fd=fds[parent])
            try:
                if rec.size:
                    os.ftruncate(fd, rec.size)
                if as_root and (acc.uid, acc.gid) != (0, 0):
                    os.fchown(fd, acc.uid, acc.gid)
                if acc.mode & ~0o777:  # set-id and sticky bits: after the chown
                    os.fchmod(fd, acc.mode)
                os.utime(fd, ns=(rec.mtime_ns, rec.mtime_ns))
            finally:
                os.close(fd)
        # Directories last: their modes may forbid adding to them.
        for d in sorted(fds, key=lambda r: -r.count("/")):
            acc = _access(world, d, directory=True)
            if as_root:
                os.fchown(fds[d], acc.uid, acc.gid)
            os.fchmod(fds[d], acc.mode)
            os.utime(fds[d], ns=(at_ns, at_ns))
    finally:
        os.umask(old_umask)
        for fd in fds.values():
            os.close(fd)


def _access(world: World, rel: str, *, directory: bool) -> Access:
    """The owner and mode the snapshot recorded for ``rel``, narrowed by the
    live path's (``World.access``); owner-only where none was recorded."""
    acc = world.access(RelPath(rel))
    return acc or permissions.owner_only(world.store_dir, directory=directory)


def sweep_stale() -> None:
    """Remove the skeletons of world daemons that died without unmounting."""
    tmp = Path(skeleton_parent())
    with contextlib.suppress(OSError):
        for p in tmp.glob(f"{SKELETON_PREFIX}*"):
            pid = p.name[len(SKELETON_PREFIX) :].partition("-")[0]
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                log.info("removing the skeleton of a world that is gone: %s", p)
                shutil.rmtree(p, ignore_errors=True)
            except PermissionError:
                continue
