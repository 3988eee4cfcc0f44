"""What each change through a ``--staged`` mount does to the staged layer.

``swfs.history.staging`` keeps the layer (the upper tree, whiteouts,
origins) and copies a node up.  This module states the rules a change of
the staged tree follows, so that the daemon's staged tree
(``mountd.staged``) only runs them against its descriptors:

* a node the layer holds is shown with the identity its SRC original had
  (``shown``); one made in the layer has no original (``made``);
* a removal unlinks the layer's copy, if any, and whites SRC's name out
  (``unlink``, ``rmdir``);
* a rename runs in the layer, after what it needs there (``rename_steps``):
  the old name and the new folder copied up, a replaced SRC file copied up
  (the engine keeps its bytes as a version), a replaced empty SRC folder
  whited out.  A folder SRC has is never renamed: EXDEV, as overlayfs
  answers without ``redirect_dir`` (``mv`` then copies);
  ``RENAME_EXCHANGE`` copies both names up.

Imports: ``swfs.history.staging`` and ``swfs.store``.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Literal

from swfs.history.staging import LOWER, UPPER, Staging
from swfs.store.beneath import dir_fd, split

RENAME_NOREPLACE = 1  # renameat2(2)
RENAME_EXCHANGE = 2

# A step a rename needs first: copy this name up, or white it out.
Step = tuple[Literal["copy_up", "whiteout"], str]


def _err(code: int, rel: str | None = None) -> OSError:
    return (
        OSError(code, os.strerror(code)) if rel is None else OSError(code, os.strerror(code), rel)
    )


def exists(staging: Staging, rel: str) -> bool:
    """The staged tree has ``rel`` (the layer's, or SRC's not whited out)."""
    return staging.in_upper(rel) or staging.in_lower(rel)


def shown(staging: Staging, st: os.stat_result) -> os.stat_result:
    """``st`` of a node in the layer, with the identity its SRC original
    had (the mount keeps showing the same inode number after a copy-up)."""
    ident = staging.identity(st)
    if ident is None:
        return st
    seq = list(st)
    seq[1], seq[2] = ident[1], ident[0]  # st_ino, st_dev
    extra = {
        k: getattr(st, k)
        for k in (
            "st_atime",
            "st_mtime",
            "st_ctime",
            "st_atime_ns",
            "st_mtime_ns",
            "st_ctime_ns",
            "st_blksize",
            "st_blocks",
            "st_rdev",
        )
    }
    return os.stat_result(seq, extra)


def made(staging: Staging, st: os.stat_result) -> os.stat_result:
    """``st`` of a node just made in the layer: it has no SRC original, so
    what an earlier node with its (reused) inode number had is forgotten."""
    with staging.lock:
        if staging.origins.pop(st.st_ino, None) is not None:
            staging.save()
    return st


def lstat(staging: Staging, rel: str) -> os.stat_result:
    """lstat of the staged tree's ``rel`` (identity as shown); ENOENT."""
    if staging.in_upper(rel):
        return shown(staging, staging.lstat_in(UPPER, rel))
    if staging.lower_hidden(rel):
        raise _err(errno.ENOENT)
    return staging.lstat_in(LOWER, rel)


def unlink(staging: Staging, rel: str) -> bool:
    """*slow*: remove the non-directory ``rel`` from the staged tree: the
    layer's copy is unlinked, SRC's name whited out.  Whether that was its
    last name."""
    parent, name = split(rel)
    with staging.lock:
        if staging.in_upper(rel):
            with dir_fd(staging.root_fd(UPPER), parent) as pfd:
                st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    raise _err(errno.EISDIR)
                os.unlink(name, dir_fd=pfd)
            staging.forget_upper(st)
        else:
            st = staging.lstat_in(LOWER, rel)
            if stat.S_ISDIR(st.st_mode):
                raise _err(errno.EISDIR)
        staging.whiteout(rel)
        return st.st_nlink <= 1


def rmdir(staging: Staging, rel: str) -> None:
    """Remove the empty directory ``rel`` from the staged tree."""
    if not stat.S_ISDIR(lstat(staging, rel).st_mode):
        raise _err(errno.ENOTDIR)
    if staging.names(rel):
        raise _err(errno.ENOTEMPTY)
    parent, name = split(rel)
    with staging.lock:
        if staging.in_upper(rel):
            with dir_fd(staging.root_fd(UPPER), parent) as pfd:
                st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
                os.rmdir(name, dir_fd=pfd)
            staging.origins.pop(st.st_ino, None)
        staging.whiteout(rel)
        staging.save()


def rename_steps(staging: Staging, old: str, new: str, flags: int) -> list[Step]:
    """What the layer needs, in order, before the rename of ``old`` (which
    the staged tree has) to ``new`` runs in it; OSError where the staged
    tree refuses it (ENOENT, EEXIST, EXDEV, ENOTDIR, ENOTEMPTY, EISDIR).
    After it, ``old`` is whited out unless ``flags`` exchange the two."""
    new_parent = split(new)[0]
    if flags & RENAME_EXCHANGE:
        # Both names stay, so no whiteout: both are copied up and swapped.
        if not exists(staging, new):
            raise _err(errno.ENOENT)
        for rel in (old, new):
            if stat.S_ISDIR(lstat(staging, rel).st_mode) and staging.in_lower(rel):
                raise _err(errno.EXDEV)
        return [("copy_up", old), ("copy_up", new)]
    ost = lstat(staging, old)
    target = exists(staging, new)
    if target and flags & RENAME_NOREPLACE:
        raise _err(errno.EEXIST)
    if stat.S_ISDIR(ost.st_mode):
        if staging.in_lower(old):
            raise _err(errno.EXDEV)
        if target:
            if not stat.S_ISDIR(lstat(staging, new).st_mode):
                raise _err(errno.ENOTDIR)
            if staging.names(new):
                raise _err(errno.ENOTEMPTY)
    elif target and stat.S_ISDIR(lstat(staging, new).st_mode):
        raise _err(errno.EISDIR)
    steps: list[Step] = [("copy_up", old), ("copy_up", new_parent)]
    if target and not staging.in_upper(new):
        if stat.S_ISDIR(lstat(staging, new).st_mode):
            steps.append(("whiteout", new))  # an empty SRC directory replaced
        else:
            # The engine keeps the replaced bytes as a version: they must be
            # where it looks (and SRC's inode is no blob's to take).
            steps.append(("copy_up", new))
    return steps
