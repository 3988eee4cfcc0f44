"""Parse jobs on a Ray cluster (``swfs mount --parse-on ray://HOST:PORT``).

A Ray worker may run on another machine and cannot see the workspace, so
a job ships the file's *bytes*, its name and the parse options.  On the
Ray worker, ``parsework.parse_bytes`` writes them to a private temporary
file and parses it exactly as a local worker does: same registry, same
confined child (swfs.views.sandbox: dropped privileges, limits), same
memory cap and timeout.  The outcome comes back with the hash of the
bytes it parsed; the daemon checks it is the hash of what it sent before
the engine stores it through its normal path.

Ray is an optional extra (``pip install 'swfs[ray]'``), imported only here,
only when ``--parse-on`` asks for it.

Nothing Ray does can take the daemon down.  A job Ray cannot run (worker
died, cluster gone, a connection error, an answer that does not match)
is parsed by the local pool instead, with a warning naming the cause;
after ``DOWN_AFTER`` such failures in a row the connection is dropped and
everything parses locally while a fresh connection is tried every
``RETRY_SECS``.  Files bigger than
``parsework.SNAPSHOT_LIMIT`` parse locally (no 64 MiB arguments over the
network).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import stat
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from swfs.store.fsutil import hash_bytes, open_to_read
from swfs.views import parsework, sandbox
from swfs.views.parsework import (
    FAILED,
    GONE,
    INTERNAL,
    STARTUP_GRACE,
    Pages,
    ParseOutcome,
    ParsePool,
    WorkerLimits,
)

log = logging.getLogger(__name__)

SCHEME = "ray://"
MISSING = "Ray is not installed; install the extra: pip install 'swfs[ray]'"
# Failures in a row before the connection is dropped and made afresh.
DOWN_AFTER = 3
# Seconds parses wait for the first connection before parsing locally, and
# between later tries.
CONNECT_TIMEOUT = 120.0
RETRY_SECS = 30.0
TASK_NAME = "swfs-parse"


def _line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` of ``exc`` on one line."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FarmFailed(Exception):
    """Ray could not run a job (not the parser's verdict on the file)."""


def problem(parse_on: str) -> str | None:
    """Why ``parse_on`` cannot work on this machine (None: it may), before
    mounting: an address Ray would not take, or Ray not installed."""
    address = address_of(parse_on)
    if address is None:
        return (
            f"--parse-on {parse_on!r}: give ray://HOST:PORT (the head's Ray client port), "
            "or 'ray' with RAY_ADDRESS set"
        )
    if importlib.util.find_spec("ray") is None:
        return f"--parse-on {parse_on}: {MISSING}"
    return None


def address_of(parse_on: str) -> str | None:
    """The address ``ray.init`` gets, or None if ``parse_on`` names none.
    'ray' alone means RAY_ADDRESS, as Ray's own tools read it; without it
    ray.init would start a private cluster, which is never what is meant."""
    if parse_on == "ray":
        return os.environ.get("RAY_ADDRESS") or None
    if parse_on.startswith(SCHEME) and len(parse_on) > len(SCHEME):
        return parse_on
    return None


def read_for_farm(abs_path: str) -> tuple[bytes, str, object] | None:
    """The bytes of ``abs_path``, their hash and its sandbox domain (which
    files may share a confined child on the Ray worker: those of one owner
    that only that owner may write, of this daemon; None: a child of its
    own), read as a local worker reads them (no symlink, no access-time
    change); None: parse it locally (gone, not a regular file, too big, or
    changed while read)."""
    try:
        fd = open_to_read(abs_path, os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > parsework.SNAPSHOT_LIMIT:
            return None
        chunks: list[bytes] = []
        offset = 0
        while True:
            block = os.pread(fd, 1 << 20, offset)
            if not block:
                break
            chunks.append(block)
            offset += len(block)
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    owner = sandbox.file_domain(st)
    domain = None if owner is None else (socket.gethostname(), os.getpid(), owner)
    return data, hash_bytes(data), domain


# Joins the cluster at an address as a client, in a thread: Ray (the
# module) and the remote parse task (``join_cluster``).
Connect = Callable[[str | None], tuple[Any, Any]]


class RayExecutor:
    """Parse jobs on Ray, the local pool as fallback (swfs.views.executor).

    ``connect``: how to join the cluster, each time a connection is made
    (``join_cluster`` by default)."""

    def __init__(
        self,
        limits: WorkerLimits,
        local: ParsePool,
        state: dict[str, Any],
        address: str | None,
        connect: Connect | None = None,
    ) -> None:
        self.limits = limits
        self.local = local
        self.address = address
        self._join: Connect = connect or join_cluster
        self._state = state
        self._remote: Any = None  # None: no cluster; everything is local
        self._ray: Any = None
        self._connected = trio.Event()  # set once connected, or given up
        self._limiter = trio.CapacityLimiter(limits.workers)
        # Blocking waits on Ray, outside trio's default thread limiter: FUSE
        # handlers' threads must never queue behind parse jobs.
        self._threads = trio.CapacityLimiter(limits.workers + 1)
        self._failures = 0
        self._nursery: trio.Nursery | None = None
        self._reconnecting = False
        self._lock = threading.Lock()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        limits: WorkerLimits,
        local: ParsePool,
        state: dict[str, Any],
        connect: Connect | None = None,
    ) -> AsyncIterator[RayExecutor]:
        """The executor, connecting in the background: the mount does not
        wait for the cluster, only parses do (``CONNECT_TIMEOUT`` at most)."""
        address = address_of(limits.parse_on or "")
        state.clear()
        state.update(
            executor="ray (connecting)", address=address, ray=0, local=0, fallbacks=0, error=None
        )
        farm = cls(limits, local, state, address, connect)
        try:
            async with trio.open_nursery() as nursery:
                farm._nursery = nursery
                nursery.start_soon(farm._connect)
                try:
                    yield farm
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            if farm._ray is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await trio.to_thread.run_sync(_disconnect, farm._ray, abandon_on_cancel=True)

    async def _connect(self) -> None:
        """Connect, trying again until it works: parses wait for the first
        ``CONNECT_TIMEOUT`` seconds (Ray's client gives up on one try after
        about 35 s, and a loaded head may take longer to answer), then
        parse locally while the tries go on every ``RETRY_SECS``."""
        state = self._state
        deadline = trio.current_time() + CONNECT_TIMEOUT
        while True:
            try:
                self._ray, self._remote = await trio.to_thread.run_sync(
                    self._join, self.address, abandon_on_cancel=True
                )
            except Exception as exc:  # no Ray, no cluster, a refused connection
                state["error"] = f"cannot connect to {self.address}: {_line(exc)}"
                if not self._connected.is_set() and trio.current_time() >= deadline:
                    state["executor"] = "local (ray unavailable)"
                    log.error("parse farm: %s; parsing locally meanwhile", state["error"])
                    self._connected.set()
                else:
                    log.warning("parse farm: %s; trying again", state["error"])
                await trio.sleep(RETRY_SECS if self._connected.is_set() else 1.0)
                continue
            state["executor"] = "ray"
            log.info("parse farm: parse jobs run on the Ray cluster at %s", self.address)
            self._connected.set()
            return

    async def parse(
        self,
        abs_path: str,
        rel: str,
        *,
        pages: Pages | None = None,
        budget: float | None = None,
    ) -> ParseOutcome:
        await self._connected.wait()
        if self._remote is None:
            return await self._locally(abs_path, rel, pages, budget)
        async with self._limiter:
            sent = await trio.to_thread.run_sync(read_for_farm, abs_path, limiter=self._threads)
            if sent is None:
                return await self._locally(abs_path, rel, pages, budget)
            data, h, domain = sent
            timeout = self.limits.timeout if budget is None else budget
            try:
                outcome = await trio.to_thread.run_sync(
                    self._run,
                    data,
                    rel,
                    timeout,
                    pages,
                    domain,
                    abandon_on_cancel=True,
                    limiter=self._threads,
                )
            except FarmFailed as exc:
                return await self._fell_back(abs_path, rel, pages, budget, str(exc))
            if outcome.hash is not None and outcome.hash != h:
                return await self._fell_back(
                    abs_path, rel, pages, budget, f"the answer is for {outcome.hash}, not {h}"
                )
            if outcome.status in (INTERNAL, GONE):
                # GONE on Ray: its temporary copy, not the user's file.
                return await self._fell_back(
                    abs_path, rel, pages, budget, outcome.error or outcome.status
                )
        self._failures = 0
        self._count("ray")
        return outcome

    def _run(
        self, data: bytes, rel: str, timeout: float, pages: Pages | None, domain: object
    ) -> ParseOutcome:
        """In a thread: one job on Ray, its outcome or FarmFailed."""
        ray, remote = self._ray, self._remote  # either may be dropped meanwhile (_lost)
        if ray is None or remote is None:
            raise FarmFailed("the connection to the cluster was dropped")
        try:
            ref = remote.remote(
                data,
                rel,
                self.limits.options,
                timeout,
                pages,
                self.limits.memory_mb * 1024 * 1024,
                domain,
            )
        except Exception as exc:
            raise FarmFailed(f"cannot submit: {_line(exc)}") from exc
        try:
            outcome = ray.get(ref, timeout=timeout + STARTUP_GRACE)
        except ray.exceptions.GetTimeoutError:
            try:
                ray.cancel(ref, force=True)
            except Exception as exc:
                log.debug("%s: cancelling its Ray task: %s", rel, exc)
            return ParseOutcome(FAILED, error=f"parse timed out on Ray after {timeout:g} s")
        except Exception as exc:  # worker died, node lost, connection gone
            raise FarmFailed(_line(exc)) from exc
        if not isinstance(outcome, ParseOutcome):
            raise FarmFailed(f"Ray returned a {type(outcome).__name__}, not a parse outcome")
        return outcome

    async def _fell_back(
        self, abs_path: str, rel: str, pages: Pages | None, budget: float | None, why: str
    ) -> ParseOutcome:
        self._failures += 1
        self._state["fallbacks"] += 1
        self._state["error"] = f"{rel}: {why}"
        log.warning("%s: Ray could not parse it (%s); parsing it locally", rel, why)
        if self._failures >= DOWN_AFTER:
            self._lost()
        return await self._locally(abs_path, rel, pages, budget)

    def _lost(self) -> None:
        """Too many failures in a row: the cluster (or the connection to it)
        is gone.  Parse locally, and connect afresh in the background."""
        if self._reconnecting or self._nursery is None:
            return
        log.warning(
            "parse farm: %d failures in a row; parsing locally, reconnecting every %g s",
            self._failures,
            RETRY_SECS,
        )
        self._reconnecting = True
        self._remote = None
        self._state["executor"] = "local (ray lost; reconnecting)"
        self._nursery.start_soon(self._reconnect)

    async def _reconnect(self) -> None:
        old, self._ray = self._ray, None
        if old is not None:
            with trio.move_on_after(30):
                await trio.to_thread.run_sync(_disconnect, old, abandon_on_cancel=True)
        await trio.sleep(RETRY_SECS)
        await self._connect()
        self._failures = 0
        self._reconnecting = False

    async def _locally(
        self, abs_path: str, rel: str, pages: Pages | None, budget: float | None
    ) -> ParseOutcome:
        outcome = await self.local.parse(abs_path, rel, pages=pages, budget=budget)
        self._count("local")
        return outcome

    def _count(self, where: str) -> None:
        with self._lock:
            self._state[where] = self._state.get(where, 0) + 1


def join_cluster(address: str | None) -> tuple[Any, Any]:
    """In a thread: join the cluster as a client; Ray and the remote task."""
    import ray

    ray.init(
        address=address,
        namespace="swfs",
        ignore_reinit_error=True,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    remote = ray.remote(num_cpus=1, max_retries=0)(parsework.parse_bytes).options(name=TASK_NAME)
    return ray, remote


def _disconnect(ray: Any) -> None:
    try:
        ray.shutdown()
    except Exception as exc:
        log.debug("parse farm: ray.shutdown: %s", exc)
