"""When a new version of a file replaces its last one instead of adding one.

A program that rewrites a file many times in a row (fsx, a build tool, an
editor's autosave, an agent appending in several tool calls, a database
that fsyncs at every commit) would otherwise leave one version per close or
per fsync.  Writes through the mount, closes and fsyncs alike, that land
within ``interval`` seconds of the first version of a burst replace the
burst's last version: at most one version per file per ``interval`` while a
burst lasts, and the final bytes of every burst are kept.  An fsync still
makes the bytes durable; it does not make their version outlive the burst.
Never replaced: a version recorded by another cause (a restore, a change
made behind the mount), a version whose bytes are in the store (an unlink
kept them), one pinned by ``pin``, and any version a snapshot or baseline
was taken of (taking one closes every open burst).

The policy is the pure function ``collapses``; ``VersionWindows`` holds the
per-file burst starts a process remembers (a restart starts new bursts).
A version about to be replaced is not even kept: before an in-place write
inside a burst, its bytes are not preserved (``skip_keep``), and the
version that write makes replaces it for sure.  A burst therefore costs
the store nothing but its last version.
"""

from __future__ import annotations

import threading
import time

from swfs.api import Cause

# Long enough to fold a save-then-touch-up sequence and a fuzzer's rewrite
# loop, short enough that two edits a person (or an agent's separate tool
# calls a few seconds apart) makes stay two versions.
DEFAULT_INTERVAL = 2.0
# Burst starts remembered at most (older ones are dropped first).
_MAX_WINDOWS = 10_000


def collapses(
    *,
    last_cause: str,
    cause: Cause,
    window_start: float | None,
    now: float,
    interval: float,
    pinned: bool,
) -> bool:
    """True when a version recorded ``now`` (monotonic seconds) for
    ``cause`` replaces the file's last version (recorded for
    ``last_cause``) whose burst began at ``window_start``."""
    if interval <= 0 or pinned or window_start is None:
        return False
    if cause != Cause.WRITE or last_cause != Cause.WRITE.value:
        return False
    return now - window_start < interval


class VersionWindows:
    """Per-file burst starts and fsync pins, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: dict[str, float] = {}
        self._pinned: dict[str, str] = {}  # rel -> hash never to replace
        # rel -> hash of a version whose bytes were not kept before an
        # in-place write because that write's version will replace it.
        self._unkept: dict[str, str] = {}

    def skip_keep(self, rel: str, *, last_hash: str, last_cause: str, interval: float) -> bool:
        """Before an in-place write of ``rel``: True when its present
        version (``last_hash``, its last) will be replaced by the one the
        write makes, so its bytes need not be kept.  The next version
        recorded for ``rel`` then replaces it whenever it comes."""
        now = time.monotonic()
        with self._lock:
            skip = collapses(
                last_cause=last_cause,
                cause=Cause.WRITE,
                window_start=self._starts.get(rel),
                now=now,
                interval=interval,
                pinned=self._pinned.get(rel) == last_hash,
            )
            if skip:
                self._unkept[rel] = last_hash
            return skip

    def decide(
        self, rel: str, *, last_hash: str, last_cause: str, cause: Cause, interval: float
    ) -> bool:
        """Whether the new version of ``rel`` replaces its last one
        (``last_hash``); remembers a new burst when it does not."""
        now = time.monotonic()
        with self._lock:
            replace = self._unkept.pop(rel, None) == last_hash or collapses(
                last_cause=last_cause,
                cause=cause,
                window_start=self._starts.get(rel),
                now=now,
                interval=interval,
                pinned=self._pinned.get(rel) == last_hash,
            )
            if not replace:
                self._starts.pop(rel, None)
                if len(self._starts) >= _MAX_WINDOWS:
                    oldest = min(self._starts, key=self._starts.__getitem__)
                    del self._starts[oldest]
                self._starts[rel] = now
                self._pinned.pop(rel, None)
            return replace

    def pin(self, rel: str, h: str) -> None:
        """Version ``h`` of ``rel`` is never replaced by its burst."""
        with self._lock:
            self._pinned[rel] = h
            if len(self._pinned) > _MAX_WINDOWS:
                self._pinned.pop(next(iter(self._pinned)))

    def close_all(self) -> None:
        """A snapshot or baseline names the present versions: keep them."""
        with self._lock:
            self._starts.clear()

    def forget(self, rel: str) -> None:
        with self._lock:
            self._starts.pop(rel, None)
            self._pinned.pop(rel, None)
            self._unkept.pop(rel, None)
