"""The content-addressed blob store: preserved bytes of recorded versions.

Layout under ``root``::

    ab/cdef0123...      the blob whose blake3 is ``abcdef0123...`` (64 hex);
                        the first two hex characters are a fan-out directory
    tmp/<pid>-<rand>    a blob being written; renamed into place when complete

Invariants (``swfs.check`` relies on them):

- A file under its final name holds exactly the bytes its name says; it is
  complete and was fsynced before the rename made it visible.
- Blobs are never rewritten: storing content that is already there stores
  nothing.  Blob files are mode 0o400, store directories 0o700.
- Only ``tmp/`` may hold partial files; ``cleanup_temp()`` removes those left
  by a process that died.

A blob added by ``link_in`` is a hard link to an inode that a workspace file
had until a moment ago.  The caller must unlink or rename over that name right
after: while the name still exists, writes through it would change the blob
(``verify`` would then report it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from swfs.api import Hash
from swfs.fsutil import copy_fd, fsync_dir, hash_bytes, hash_fd, hash_file, reflink, write_all

log = logging.getLogger(__name__)

BLOB_MODE = 0o400
DIR_MODE = 0o700
TMP_DIR = "tmp"

_HASH_RE = re.compile(r"[0-9a-f]{64}")
_FANOUT_RE = re.compile(r"[0-9a-f]{2}")
_REST_RE = re.compile(r"[0-9a-f]{62}")
# Hard links that cannot be made for reasons other than a bug: across
# filesystems, too many links, protected_hardlinks, no hard links at all.
_NO_LINK = frozenset({errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP})


class HashMismatch(Exception):
    """The bytes stored are not the bytes the caller said they were."""

    def __init__(self, *, expected: str, actual: str, source: str) -> None:
        super().__init__(f"{source}: expected blake3 {expected[:16]}..., got {actual[:16]}...")
        self.expected = expected
        self.actual = actual
        self.source = source


def check_hash(h: str) -> Hash:
    """``h`` if it is a well-formed blob name; a path must never come from
    anything else (no '..', no '/')."""
    if not _HASH_RE.fullmatch(h):
        raise ValueError(f"not a blake3 hex digest: {h!r}")
    return Hash(h)


class BlobStore:
    """Blobs under ``root``; see the module docstring for the layout."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.tmp = self.root / TMP_DIR
        self.root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        self.tmp.mkdir(mode=DIR_MODE, exist_ok=True)

    # -- reading

    def path(self, h: str) -> Path:
        h = check_hash(h)
        return self.root / h[:2] / h[2:]

    def has(self, h: str) -> bool:
        return self.path(h).is_file()

    def open(self, h: str) -> int:
        """A read-only descriptor on blob ``h`` (the caller closes it).
        FileNotFoundError if it is not stored."""
        return os.open(self.path(h), os.O_RDONLY | os.O_CLOEXEC)

    def size(self, h: str) -> int:
        return os.stat(self.path(h)).st_size

    def verify(self, h: str) -> bool:
        """True if blob ``h`` exists and its bytes hash to ``h``."""
        try:
            return hash_file(self.path(h)) == h
        except FileNotFoundError:
            return False

    def iter_hashes(self) -> Iterator[Hash]:
        """Every stored blob, in no particular order."""
        for fan in os.scandir(self.root):
            if not (fan.is_dir(follow_symlinks=False) and _FANOUT_RE.fullmatch(fan.name)):
                continue
            for entry in os.scandir(fan.path):
                if _REST_RE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    yield Hash(fan.name + entry.name)

    def total_bytes(self) -> int:
        """Sum of the blobs' sizes (logical bytes: reflinked and hard-linked
        blobs may use less space on disk)."""
        return sum(self.size(h) for h in self.iter_hashes())

    # -- writing

    def put_bytes(self, data: bytes) -> Hash:
        """Store ``data``; its hash."""
        h = Hash(hash_bytes(data))
        if self.has(h):
            return h
        tmp, fd = self._new_temp()
        try:
            try:
                write_all(fd, data)
                self._seal(fd)
            finally:
                os.close(fd)
            self._commit(tmp, h)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise
        return h

    def put_fd(self, fd: int, *, expected: str | None = None) -> Hash:
        """Store the whole file behind ``fd`` (from offset 0): by reflink where
        the filesystem can, else by copy.  The hash is taken of the stored copy,
        so a source that changes meanwhile cannot give a blob a wrong name.
        HashMismatch (nothing stored) if ``expected`` is given and differs.

        If blob ``expected`` is already stored, nothing is read or copied and
        ``expected`` is returned: the caller's question, "are these bytes
        kept?", is answered, and preserving before every in-place write stays
        cheap.  Hash ``fd`` separately to learn whether it still holds them."""
        if expected is not None and self.has(expected):
            # Already kept.  Whatever fd holds now is not what the caller asked for.
            return Hash(expected)
        tmp, out = self._new_temp(readable=True)
        try:
            try:
                if not reflink(fd, out):
                    copy_fd(fd, out)
                self._seal(out)
                h = Hash(hash_fd(out))
            finally:
                os.close(out)
            if expected is not None and h != expected:
                raise HashMismatch(expected=expected, actual=h, source=f"fd {fd}")
            self._commit(tmp, h)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise
        return h

    def link_in(self, path: Path, *, expected: str | None = None) -> Hash:
        """Keep the bytes of ``path``, a workspace file about to be unlinked or
        renamed over, and return their hash.

        A hard link keeps the whole inode without copying, but only when
        nothing else will write to it: the file must have no other name
        (st_nlink == 1) and be on the store's filesystem.  Otherwise the bytes
        are copied.  HashMismatch (nothing stored) if ``expected`` is given and
        the file does not hold those bytes; call again without ``expected`` to
        keep whatever it holds.
        """
        st = os.stat(path, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if st.st_nlink == 1 and st.st_dev == os.stat(self.root).st_dev:
            tmp = self._temp_name()
            try:
                os.link(path, tmp, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                log.debug("cannot hard-link %s into the store (%s), copying", path, exc)
            else:
                return self._adopt_link(tmp, path, expected)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            if expected is not None and self.has(expected):
                # Nothing to copy, but unlike put_fd say whether the file
                # still holds those bytes: after the unlink nobody can tell.
                actual = hash_fd(fd)
                if actual != expected:
                    raise HashMismatch(expected=expected, actual=actual, source=str(path))
                return Hash(expected)
            return self.put_fd(fd, expected=expected)
        except HashMismatch as exc:
            raise HashMismatch(expected=exc.expected, actual=exc.actual, source=str(path)) from None
        finally:
            os.close(fd)

    def remove(self, h: str) -> None:
        """Delete blob ``h`` (no error if it is not there)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(h))

    def cleanup_temp(self) -> int:
        """Remove temp files of writers that are gone (crashed or killed);
        the number removed.  Temps of live processes are left alone."""
        removed = 0
        for entry in os.scandir(self.tmp):
            if entry.is_dir(follow_symlinks=False):
                continue
            pid_part = entry.name.split("-", 1)[0]
            if pid_part.isdigit() and _alive(int(pid_part)):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
        if removed:
            log.info("removed %d leftover temp file(s) from %s", removed, self.tmp)
        return removed

    # -- internals

    def _temp_name(self) -> Path:
        # The pid lets cleanup_temp tell a live writer's temp from litter.
        return self.tmp / f"{os.getpid()}-{secrets.token_hex(8)}"

    def _new_temp(self, *, readable: bool = False) -> tuple[Path, int]:
        tmp = self._temp_name()
        flags = os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | (os.O_RDWR if readable else os.O_WRONLY)
        try:
            fd = os.open(tmp, flags, 0o600)
        except OSError as exc:
            _reraise_naming(exc, tmp)
            raise
        return tmp, fd

    @staticmethod
    def _seal(fd: int) -> None:
        os.fsync(fd)
        os.fchmod(fd, BLOB_MODE)

    def _commit(self, tmp: Path, h: Hash) -> None:
        """Give the complete, fsynced temp ``tmp`` its final name ``h``."""
        final = self.path(h)
        fan = final.parent
        if not fan.is_dir():
            fan.mkdir(mode=DIR_MODE, exist_ok=True)
            fsync_dir(self.root)
        # link, not rename: rename would replace a blob another thread stored
        # meanwhile (same bytes, but under a reader's feet); link fails instead.
        try:
            os.link(tmp, final)
        except FileExistsError:
            self._discard(tmp)
            return
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            os.rename(tmp, final)  # a filesystem without hard links
        else:
            self._discard(tmp)
        fsync_dir(fan)

    def _adopt_link(self, tmp: Path, source: Path, expected: str | None) -> Hash:
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
            try:
                h = Hash(hash_fd(fd))
            finally:
                os.close(fd)
            if expected is not None and h != expected:
                raise HashMismatch(expected=expected, actual=h, source=str(source))
            if self.has(h):
                self._discard(tmp)
                return h
            # No chmod here: the inode still has its workspace name until the
            # caller's unlink or rename succeeds, and a failed rename must not
            # leave the user's file with changed permissions.  The store's
            # 0700 directories keep it private; the engine breaks the link
            # if the name survives and is written to (see Workspace.preserve).
            self._commit(tmp, h)
        except BaseException as exc:
            self._discard(tmp)
            _reraise_naming(exc, tmp)
            raise
        return h

    @staticmethod
    def _discard(tmp: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _reraise_naming(exc: BaseException, path: Path) -> None:
    """Re-raise an OSError that does not say which file it is about as one
    that does, keeping its errno; other exceptions are left to the caller."""
    if isinstance(exc, OSError) and exc.errno is not None and not exc.filename:
        raise OSError(exc.errno, f"{exc.strerror} (writing blob)", str(path)) from exc


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
