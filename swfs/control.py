"""The running daemon's control socket: ``STORE/control.sock``.

While a workspace is mounted the daemon owns its state; commands that change
it (baseline, snapshot, restore, submit, reset, gc) or wait on it (sync) are
sent here, so the daemon records them and invalidates the kernel's caches.  Read-only commands
read the store directly (LMDB allows concurrent readers across processes),
once the daemon has made the records it queued (``drain``: a close's record
and a change of names' are made after their reply).

Protocol: one JSON object per connection, one line each way.
Request ``{"op": NAME, ...args}``; reply ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": "one line"}``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

    from swfs.api import RelPath, Version
    from swfs.find.search import SearchIndex
    from swfs.history.snapshots import Recorded
    from swfs.store.gc import Collected
    from swfs.store.sharedcache import ParseCache
    from swfs.views.serving import Views

    class ControlledWorkspace(Recorded, Collected, Protocol):
        """What the control socket asks of the engine's workspace."""

        shared_cache: ParseCache | None
        parse_runs: int

        def not_preserved(self) -> int: ...

    class ControlledHistory(Protocol):
        """What the control socket asks of the engine's history part."""

        def set_baseline(self) -> int: ...
        def restore(self, rel: RelPath, number: int) -> Version: ...

    class ControlledEvidence(Protocol):
        """What the control socket asks of the engine's evidence part."""

        @property
        def journal_health(self) -> Callable[[], dict[str, Any]] | None: ...
        @property
        def journal_ack(self) -> Callable[[], None] | None: ...

    class Controlled(Protocol):
        """What the control socket asks of the engine (``swfs.engine.Engine``)."""

        @property
        def workspace(self) -> ControlledWorkspace: ...
        @property
        def views(self) -> Views: ...
        @property
        def src(self) -> Path: ...
        @property
        def store_dir(self) -> Path: ...
        @property
        def search_index(self) -> SearchIndex: ...
        @property
        def history(self) -> ControlledHistory: ...
        @property
        def evidence(self) -> ControlledEvidence: ...
        async def wait_all_current(self, limit: float) -> bool: ...
        def scan(self) -> object: ...

# trio is imported where the server runs: the CLI's client side (``request``)
# must start fast.

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
_MAX_REQUEST = 1 << 16


class ControlUnavailable(Exception):
    """No daemon is listening for this store."""


class ControlError(Exception):
    """The daemon answered with an error."""


async def _handle(
    engine: Controlled, request: dict[str, Any], peer: tuple[int, int] = (-1, -1)
) -> Any:
    import trio

    op = request.get("op")
    if op == "ping":
        return {"pid": os.getpid(), "src": str(engine.src), "store": str(engine.store_dir)}
    if op == "drain":  # before a command reads the store itself: the queued records made
        await trio.to_thread.run_sync(engine.workspace.writes.drain)
        return {}
    if op == "sync":
        ok = await engine.wait_all_current(float(request.get("timeout", 600)))
        return {"current": ok, "counts": await trio.to_thread.run_sync(engine.views.counts)}
    if op == "baseline":
        await trio.to_thread.run_sync(engine.scan)
        return {"files": await trio.to_thread.run_sync(engine.history.set_baseline)}
    if op == "restore":
        version = await trio.to_thread.run_sync(
            engine.history.restore, request["path"], int(request["version"])
        )
        return {"version": version.number, "hash": version.hash}
    if op == "search":  # `swfs search` of a mounted workspace, as the connecting user
        engine.views.hurry()  # a changed file's parse waits for no pause now
        return await trio.to_thread.run_sync(
            _search, engine, str(request.get("query", "")), int(request.get("n", 20)), peer
        )
    if op == "status":  # all `swfs status` shows, so it never opens the engine itself
        return await trio.to_thread.run_sync(status_info, engine.workspace, engine.views)
    if op == "counts":  # freshness as the daemon sees it: it knows its open writers
        return await trio.to_thread.run_sync(engine.views.counts)
    if op == "search_state":
        return engine.search_index.health()
    if op == "journal_state":  # the mount's access journal (swfs status, swfs check)
        health = engine.evidence.journal_health
        return {"state": "off", "reason": "not kept by this daemon"} if health is None else health()
    if op == "journal_ack":  # swfs check --repair: a journal started afresh was seen
        ack = engine.evidence.journal_ack
        if ack is not None:
            ack()
        return {}
    if op == "sandbox":  # the parse sandbox this daemon's workers get
        from swfs.views import sandbox

        return {"sandbox": await trio.to_thread.run_sync(sandbox.describe_in_subprocess)}
    if op == "executor":  # where parse jobs run, and how many ran where (docs/scale.md)
        from swfs.views import executor

        return executor.describe()
    if op == "rescan":
        stats = await trio.to_thread.run_sync(engine.scan)
        return stats.__dict__
    from swfs.history import snapshots as history
    from swfs.history import staging
    from swfs.store import gc

    ops: dict[str, Callable[[ControlledWorkspace, dict[str, Any]], Any]] = {
        **history.CONTROL_OPS,
        **gc.CONTROL_OPS,
        **staging.CONTROL_OPS,
    }
    fn = ops.get(str(op))
    if fn is not None:
        return await trio.to_thread.run_sync(fn, engine.workspace, request)
    raise ControlError(f"unknown operation {op!r}")


async def _serve_one(engine: Controlled, conn: trio.SocketStream) -> None:
    import trio

    async with conn:
        data = b""
        try:
            while b"\n" not in data and len(data) < _MAX_REQUEST:
                chunk = await conn.receive_some(4096)
                if not chunk:
                    break
                data += chunk
            request = json.loads(data.decode("utf-8", "surrogateescape") or "{}")
            result = await _handle(engine, request, _peer(conn))
            reply: dict[str, Any] = {"ok": True, "result": result}
        except trio.BrokenResourceError:
            return
        except Exception as exc:  # every error goes back to the client as one line
            log.info("control request failed: %s", exc)
            reply = {"ok": False, "error": str(exc) or type(exc).__name__}
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await conn.send_all(json.dumps(reply).encode() + b"\n")


class ControlServer:
    """The control socket as background work, like the parse scheduler and the
    change feed: the daemon's lifecycle (``mountd.launch``) starts it with
    ``nursery.start(server.run)`` once the engine's background work runs
    (``run`` returns from ``start`` when the socket listens) and ends it with
    ``stop()`` before the engine's, which removes the socket.  Each connection
    is answered in a task of its own; a request's error goes back to its
    client as one line and never ends the server."""

    def __init__(self, engine: Controlled) -> None:
        self.engine = engine
        self.path = engine.store_dir / SOCKET_NAME
        import trio

        self._cancel = trio.CancelScope()

    async def run(self, *, task_status: Any) -> None:
        with self._cancel:
            await serve_control(self.engine, task_status=task_status)

    def stop(self) -> None:
        self._cancel.cancel()


async def serve_control(engine: Controlled, *, task_status: Any) -> None:
    import trio

    path = engine.store_dir / SOCKET_NAME
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old_umask)
    sock.listen(16)
    listener = trio.SocketListener(sock)
    task_status.started()
    try:
        async with trio.open_nursery() as nursery:
            while True:
                conn = await listener.accept()
                nursery.start_soon(_serve_one, engine, conn)
    finally:
        listener.socket.close()  # a cancelled serve leaves no socket for the GC to find
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _peer(conn: trio.SocketStream) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of the socket, from the
    kernel (SO_PEERCRED): who asks, whatever the request says."""
    try:
        raw = conn.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, _ = struct.unpack("3i", raw)
    except (OSError, struct.error):
        return -1, -1
    return pid, uid


def _search(engine: Controlled, query: str, n: int, peer: tuple[int, int]) -> dict[str, Any]:
    """A query run for the connecting process's user: hits, counts and
    snippets are those that user may see (its groups from /proc)."""
    from swfs.find.query import Caller

    pid, uid = peer
    if uid < 0:
        raise ControlError("cannot tell who is asking")
    gids: set[int] = set()
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("Gid:", "Groups:")):
                    gids.update(int(g) for g in line.split(":", 1)[1].split())
    except (OSError, ValueError):
        pass
    result = engine.search_index.search(query, Caller(uid, frozenset(gids)), n)
    return {
        "unavailable": result.unavailable,
        "error": result.error,
        "hits": len(result.hits),
        "json": result.as_json(),
        "text": result.render().decode("utf-8", "surrogateescape"),
    }


def status_info(engine: ControlledWorkspace, views: Views) -> dict[str, Any]:
    """What ``swfs status`` shows of a workspace, from its engine: the
    daemon's while it is mounted (control op ``status``), else the CLI's."""
    from swfs.history import staging
    from swfs.store import gc, sharedcache

    staged: dict[str, Any] | None = None
    layer = staging.Staging.load(engine.src, engine.store_dir)
    if layer is not None:
        layer.close()
        r = staging.CONTROL_OPS["staged"](engine, {"paths": []})
        staged = {"paths": len(r["staged"]), "interrupted_commit": bool(r["commit"])}
    return {
        "counts": views.counts(),
        "content": views.content_counts(),
        "failures": [[p, e] for p, e in views.failures()],
        "blob_bytes": engine.blobs.total_bytes(),
        "store_bytes": gc.store_bytes(engine),
        "reserve_bytes": gc.reserve_bytes(engine),
        "not_preserved": engine.not_preserved(),
        "staged": staged,
        "parses": sharedcache.describe_counts(engine.shared_cache, engine.parse_runs),
    }


def request(store_dir: Path, op: str, *, io_timeout: float = 30.0, **args: Any) -> Any:
    """Send one request to the daemon of ``store_dir`` (blocking client)."""
    path = store_dir / SOCKET_NAME
    if not path.exists():
        raise ControlUnavailable(str(path))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(io_timeout)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            raise ControlUnavailable(str(path)) from exc
        s.sendall(json.dumps({"op": op, **args}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    if not data:
        raise ControlError("the daemon closed the connection without answering")
    reply = json.loads(data)
    if not reply.get("ok"):
        raise ControlError(reply.get("error", "unknown error"))
    return reply["result"]
