"""Paths below a root directory descriptor: every call goes through ``*at``
system calls relative to a descriptor, never through an absolute path string
(SRC's own path plus a path near PATH_MAX below it would be too long), and
never follows a symlink on the way (nothing escapes the root).

``open_beneath`` resolves a whole relative path in one openat2 call
(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or component by component with
O_NOFOLLOW where openat2 is missing or the path is longer than one system
call takes.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_libc = ctypes.CDLL(None, use_errno=True)

SYS_openat2 = 437  # the same number on every architecture (added in Linux 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

# A path argument of a system call holds at most PATH_MAX bytes with its NUL.
PATH_MAX = 4096


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


# The flags open(2) means for a caller.  The kernel's FUSE OPEN carries
# f_flags as the VFS keeps them, with its own bits among them (an execve's
# __FMODE_EXEC, 0x20); open(2) ignores bits it does not know, openat2(2)
# refuses them with EINVAL, so they go before either sees them.
OPEN_FLAGS = (
    os.O_ACCMODE
    | os.O_CREAT
    | os.O_EXCL
    | os.O_NOCTTY
    | os.O_TRUNC
    | os.O_APPEND
    | os.O_NONBLOCK
    | os.O_DSYNC
    | os.O_ASYNC
    | os.O_DIRECT
    | os.O_LARGEFILE
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
    | os.O_NOATIME
    | os.O_CLOEXEC
    | os.O_PATH
    | os.O_TMPFILE
    | os.O_SYNC
)

_have_openat2 = True
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2's ``how`` argument by open flags, made once: every open of a native
# file passes one (a ctypes structure costs more to build than the call).
_HOWS: dict[int, tuple[Any, int]] = {}


def _raise_errno(what: str, path: str | None = None) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


def open_beneath(root_fd: int, rel: str, flags: int) -> int:
    """Open ``rel`` below ``root_fd`` without following any symlink on the way.
    ``flags`` may be a FUSE request's: bits open(2) does not take are dropped."""
    global _have_openat2
    flags = (flags & OPEN_FLAGS) | os.O_CLOEXEC | os.O_NOFOLLOW
    if not rel:
        return os.open(".", flags, dir_fd=root_fd)
    encoded = os.fsencode(rel)
    if _have_openat2 and len(encoded) < PATH_MAX:
        how = _HOWS.get(flags)
        if how is None:
            struct = _OpenHow(flags, 0, _RESOLVE)
            # The structure lives as long as the reference to it (held here).
            how = _HOWS[flags] = (ctypes.byref(struct), ctypes.sizeof(struct))
        fd = _libc.syscall(SYS_openat2, root_fd, encoded, how[0], how[1])
        if fd >= 0:
            return int(fd)
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp filters
            _raise_errno("openat2", rel)
        _have_openat2 = False
    # One component at a time, each refusing symlinks.
    fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        parts = rel.split("/")
        for part in parts[:-1]:
            nfd = os.open(
                part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


@contextmanager
def dir_fd(root_fd: int, rel: str, flags: int = os.O_PATH) -> Iterator[int]:
    """An fd on directory ``rel`` for the ``*at`` calls; the root fd itself for ''."""
    if not rel and not flags & ~os.O_PATH:
        yield root_fd
        return
    fd = open_beneath(root_fd, rel, flags | os.O_DIRECTORY)
    try:
        yield fd
    finally:
        os.close(fd)


def split(rel: str) -> tuple[str, str]:
    head, _, tail = rel.rpartition("/")
    return head, tail


def lstat_beneath(root_fd: int, rel: str) -> os.stat_result:
    """lstat of ``rel`` below ``root_fd`` (the root itself for '')."""
    if not rel:
        return os.stat(root_fd)
    parent, name = split(rel)
    with dir_fd(root_fd, parent) as pfd:
        return os.stat(name, dir_fd=pfd, follow_symlinks=False)


def lexists_beneath(root_fd: int, rel: str) -> bool:
    """Whether ``rel`` names something below ``root_fd`` (a symlink counts;
    a path through a symlink does not lead anywhere)."""
    try:
        lstat_beneath(root_fd, rel)
    except OSError:
        return False
    return True


def listdir_beneath(root_fd: int, rel: str) -> list[str]:
    """The names in directory ``rel`` below ``root_fd`` (ENOTDIR or ELOOP if
    it is not a directory, a symlink to one included)."""
    fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def fsync_beneath(root_fd: int, rel: str) -> None:
    """Make directory ``rel``'s entries (a new or renamed name) durable."""
    fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def proc_path(pfd: int, name: str) -> str:
    """A path to entry ``name`` of directory ``pfd`` for the calls that have
    no ``*at`` form (the xattr calls): short whatever the directory's depth."""
    return f"/proc/self/fd/{pfd}/{name}"


def chmod_nofollow(pfd: int, name: str, mode: int) -> None:
    """chmod entry ``name`` of ``pfd``; never through a symlink (EOPNOTSUPP:
    Linux symlinks have no mode of their own)."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP), name)
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)


def user_xattrs(pfd: int, name: str) -> list[str]:
    """The ``user.`` extended attribute names of entry ``name`` of ``pfd``."""
    with contextlib.suppress(OSError):
        return [
            n
            for n in os.listxattr(proc_path(pfd, name), follow_symlinks=False)
            if n.startswith("user.")
        ]
    return []
