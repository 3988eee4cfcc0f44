"""Linux system calls Python's ``os`` module lacks: openat2, renameat2, utimensat
with UTIME_OMIT, linkat with AT_EMPTY_PATH."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_libc = ctypes.CDLL(None, use_errno=True)

SYS_openat2 = 437  # the same number on every architecture (added in Linux 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
UTIME_OMIT = (1 << 30) - 2


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


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
    if _have_openat2:
        how = _HOWS.get(flags)
        if how is None:
            struct = _OpenHow(flags, 0, _RESOLVE)
            # The structure lives as long as the reference to it (held here).
            how = _HOWS[flags] = (ctypes.byref(struct), ctypes.sizeof(struct))
        fd = _libc.syscall(SYS_openat2, root_fd, os.fsencode(rel), how[0], how[1])
        if fd >= 0:
            return int(fd)
        if ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM):  # EPERM: seccomp filters
            _raise_errno("openat2", rel)
        _have_openat2 = False
    # Fallback: one component at a time, each refusing symlinks.
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


def reopen(fd: int, flags: int) -> int:
    """A new open file description of what ``fd`` (an O_PATH one may do)
    refers to, by its /proc magic link: it opens a file no name leads to
    (the link is followed whatever ``flags`` say; nothing is created)."""
    flags &= OPEN_FLAGS & ~(os.O_NOFOLLOW | os.O_CREAT | os.O_EXCL)
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


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


def renameat2(old_dir: int, old: str, new_dir: int, new: str, flags: int) -> None:
    if not flags:
        os.rename(old, new, src_dir_fd=old_dir, dst_dir_fd=new_dir)
        return
    ret = _libc.renameat2(old_dir, os.fsencode(old), new_dir, os.fsencode(new), flags)
    if ret != 0:
        _raise_errno("renameat2", new)


def link_fd(fd: int, dst_dir: int, name: str) -> None:
    """Give the file open as ``fd`` (an O_TMPFILE file, say) the name ``name``
    in directory ``dst_dir``: linkat(fd, "", AT_EMPTY_PATH), which needs
    CAP_DAC_READ_SEARCH; without it, through its /proc/self/fd link."""
    if _libc.linkat(fd, b"", dst_dir, os.fsencode(name), AT_EMPTY_PATH) == 0:
        return
    if ctypes.get_errno() not in (errno.ENOENT, errno.EPERM):
        _raise_errno("linkat", name)
    os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dst_dir, follow_symlinks=True)


def utimensat(dirfd: int, name: str | None, atime_ns: int | None, mtime_ns: int | None) -> None:
    """Set times without following symlinks; None leaves that time alone.  With
    ``name`` None, ``dirfd`` is the file itself (futimens)."""
    times = (_Timespec * 2)()
    for i, ns in enumerate((atime_ns, mtime_ns)):
        if ns is None:
            times[i] = _Timespec(0, UTIME_OMIT)
        else:
            times[i] = _Timespec(*divmod(ns, 1_000_000_000))
    if name is None:
        # glibc's utimensat refuses a NULL path (EINVAL): futimens is that call.
        if _libc.futimens(dirfd, times) != 0:
            _raise_errno("futimens")
        return
    if _libc.utimensat(dirfd, os.fsencode(name), times, AT_SYMLINK_NOFOLLOW) != 0:
        _raise_errno("utimensat", name)


def raise_fd_limit() -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit (every file open through
    the mount holds a descriptor in the daemon)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
