"""Records of changes of names, made off the request's reply path.

A rename or an unlink through the mount is done on the backing file system
at once and answered; what the history makes of it (the store's record, the
state log, keeping the bytes of the file it destroyed) is queued here and made
by one thread, in the order the changes were made.  Every other step of the
write protocol that reads or writes a record first waits for the queue to be
empty (``drain``), so it sees the records as if they had been made in the
request: the order of events is the order of the requests.

Durability follows POSIX: a change of names is durable once its folder (or
a file) is fsynced, and that fsync waits for the queue first
(``InPlaceWrites.drain``).  A daemon killed before then leaves the
change on disk but not recorded; the next mount's scan records it like a
change made behind the mount.

Bytes a change destroys (the file an unlink or a rename over removes) are
held first by a hard link in the store's ``held/`` folder, one syscall on
the reply path; the queue keeps them in the blob store later and drops the
link.  Links left by a killed daemon are kept when the store next opens
(``Held.recover``): they are content-addressed, so whatever version
names their hash gets its bytes back.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager

log = logging.getLogger(__name__)


# The queue waits for a pause in the changes before it records: while a
# program renames or deletes in a loop, the recording thread would compete
# with the request loop for the interpreter at every change.  It waits until
# no change has come for QUIET seconds, at most MAX_DELAY after the first one
# queued, or until someone waits for it (``drain``).
QUIET = 0.005
MAX_DELAY = 0.2
MAX_BATCH = 4096


class Recorder:
    """One thread that runs queued records in order."""

    def __init__(
        self,
        name: str = "swfs-recorder",
        *,
        quiet: float = QUIET,
        max_delay: float = MAX_DELAY,
        batch: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self._name = name
        self._batch = batch  # entered around each batch of jobs, on the thread
        self._quiet, self._max_delay = quiet, max_delay
        self._queue: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._running = 0  # jobs taken off the queue, not finished
        self._waiting = 0  # drain() calls waiting: no pause to wait for
        self._last = 0.0  # when the last job was queued (monotonic)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """Cheap: whether a record is queued or being made now."""
        return bool(self._queue) or self._running > 0

    def submit(self, job: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                run_now = True
            else:
                run_now = False
                self._queue.append(job)
                self._last = time.monotonic()
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
                self._cond.notify_all()
        if run_now:
            _run_job(job)

    def drain(self) -> None:
        """Wait until every record queued so far is made.  A no-op on the
        recorder's own thread (a record that calls back into the protocol)."""
        if threading.current_thread() is self._thread:
            return
        with self._cond:
            self._waiting += 1
            self._cond.notify_all()
            try:
                while self._queue or self._running:
                    self._cond.wait()
            finally:
                self._waiting -= 1

    def close(self) -> None:
        """Make what is queued, then stop the thread."""
        self.drain()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=60)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                first = time.monotonic()
                while not self._closed and not self._waiting and len(self._queue) < MAX_BATCH:
                    left = min(self._last + self._quiet, first + self._max_delay)
                    left -= time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                jobs = list(self._queue)
                self._queue.clear()
                self._running += len(jobs)
            try:
                with self._batch():
                    for job in jobs:
                        _run_job(job)
            except Exception:
                # The batch's end (its deferred fsyncs) failed: the records
                # are made; what the batch held stays held, kept again at
                # the next open (Held.recover).
                log.exception("%s: the end of a batch of records failed", self._name)
            finally:
                with self._cond:
                    self._running -= len(jobs)
                    self._cond.notify_all()


def _run_job(job: Callable[[], None]) -> None:
    try:
        job()
    except Exception:
        # The change happened on disk whatever its record does: the next
        # scan records what this could not.
        log.exception("a queued record failed")


class Held:
    """The store's ``held/`` folder: hard links to files an unlink or a
    rename over is about to destroy, until their bytes are kept."""

    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._seq = itertools.count()
        self._tag = f"{os.getpid()}-{id(self):x}"  # leftovers name their daemon
        self._made = False

    def path(self) -> str:
        """A fresh name in the folder (created on first need)."""
        if not self._made:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            self._made = True
        return os.path.join(self.dir, f"{self._tag}-{next(self._seq)}")

    def hold(self, name: str, dir_fd: int) -> str | None:
        """Hard-link ``name`` (in ``dir_fd``) into the folder; its path
        there, or None where it cannot be linked (another file system,
        too many links): the caller keeps the bytes the slow way then."""
        path = self.path()
        try:
            os.link(name, path, src_dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return None
        return path

    @staticmethod
    def drop(path: str | None) -> None:
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def leftovers(self) -> list[str]:
        """Links a daemon that is gone left behind (not a running one's)."""
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []
        return [os.path.join(self.dir, n) for n in names if not _alive(n.split("-", 1)[0])]

    def recover(self, keep: Callable[[str], None]) -> int:
        """``keep(path)`` for each leftover link, then drop it (kept or not:
        a link that cannot be kept is logged).  How many were kept."""
        n = 0
        for path in self.leftovers():
            try:
                keep(path)
                n += 1
            except Exception:
                log.exception("%s: bytes held by a killed daemon could not be kept", path)
                continue
            self.drop(path)
        return n


def _alive(pid: str) -> bool:
    """Whether the process ``pid`` (a leftover's tag) is running, not us."""
    try:
        n = int(pid)
    except ValueError:
        return False
    if n == os.getpid():
        return False
    try:
        os.kill(n, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
