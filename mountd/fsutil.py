"""Linux system calls Python's ``os`` module lacks: renameat2, utimensat with
UTIME_OMIT, linkat with AT_EMPTY_PATH; openat2 beneath a root descriptor
lives in ``swfs.store.beneath`` (the staged layer's engine code needs it too) and
is re-exported here."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource

from swfs.store.beneath import OPEN_FLAGS as OPEN_FLAGS
from swfs.store.beneath import dir_fd as dir_fd
from swfs.store.beneath import open_beneath as open_beneath

_libc = ctypes.CDLL(None, use_errno=True)

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
UTIME_OMIT = (1 << 30) - 2


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _raise_errno(what: str, path: str | None = None) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}", path)


def reopen(fd: int, flags: int) -> int:
    """A new open file description of what ``fd`` (an O_PATH one may do)
    refers to, by its /proc magic link: it opens a file no name leads to
    (the link is followed whatever ``flags`` say; nothing is created)."""
    flags &= OPEN_FLAGS & ~(os.O_NOFOLLOW | os.O_CREAT | os.O_EXCL)
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


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
