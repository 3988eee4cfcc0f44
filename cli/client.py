"""One client for the commands that change or wait on a workspace's state.

While a workspace is mounted its daemon owns the state, so these go through
its control socket (the daemon records them and invalidates the kernel's
caches); otherwise the engine is opened here.  A command asks for a client
and never branches on which one it got.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from swfs import control
from swfs.api import RelPath

from .base import Progress, Target, open_engine
from .mountat import refuse_world

if TYPE_CHECKING:
    from swfs.engine import Engine


@dataclass(frozen=True)
class SyncResult:
    current: bool
    counts: dict[str, int]


class Client(Protocol):
    def sync(self, timeout: float) -> SyncResult: ...
    def baseline(self) -> int: ...
    def snapshot(self, name: str) -> int: ...
    def restore(self, rel: RelPath, number: int) -> int: ...
    def restore_from(self, rel: RelPath, source: str) -> str: ...
    def delete_snapshot(self, name: str) -> int: ...
    def submit(self, name: str, paths: list[str]) -> dict[str, Any]: ...
    def reset(self, to: str) -> dict[str, Any]: ...
    def gc(self, keep_days: float, dry_run: bool) -> dict[str, Any]: ...


class DaemonClient:
    def __init__(self, t: Target) -> None:
        self.store = t.store

    def _call(self, op: str, io_timeout: float, **args: Any) -> Any:
        return control.request(self.store, op, io_timeout=io_timeout, **args)

    def sync(self, timeout: float) -> SyncResult:
        r = self._call("sync", timeout + 5, timeout=timeout)
        return SyncResult(bool(r["current"]), r["counts"])

    def baseline(self) -> int:
        return int(self._call("baseline", 600)["files"])

    def snapshot(self, name: str) -> int:
        return int(self._call("snapshot", 3600, name=name)["files"])

    def restore(self, rel: RelPath, number: int) -> int:
        return int(self._call("restore", 600, path=rel, version=number)["version"])

    def restore_from(self, rel: RelPath, source: str) -> str:
        return str(self._call("restore_from", 600, path=rel, source=source)["hash"])

    def delete_snapshot(self, name: str) -> int:
        return int(self._call("snapshot_delete", 60, name=name)["files"])

    def submit(self, name: str, paths: list[str]) -> dict[str, Any]:
        return dict(self._call("submit", 3600, name=name, paths=paths))

    def reset(self, to: str) -> dict[str, Any]:
        return dict(self._call("reset", 3600, to=to))

    def gc(self, keep_days: float, dry_run: bool) -> dict[str, Any]:
        return dict(self._call("gc", 3600, keep_days=keep_days, dry_run=dry_run))


class LocalClient:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def sync(self, timeout: float) -> SyncResult:
        import trio

        self.engine.scan()

        async def drain() -> None:
            with trio.move_on_after(timeout):
                await self.engine.drain(Progress("parsing"), scan=False)

        trio.run(drain)
        counts = self.engine.views.counts()
        return SyncResult(not (counts["pending"] or counts["stale"]), counts)

    def baseline(self) -> int:
        import trio

        self.engine.scan()
        # Parse what the baseline will name while its bytes are at hand: a
        # review diff needs the baseline's text after the file changes.
        trio.run(partial(self.engine.drain, Progress("parsing"), scan=False))
        return self.engine.history.set_baseline()

    def snapshot(self, name: str) -> int:
        from swfs.history import snapshots as history

        return history.take_snapshot(self.engine.workspace, name)

    def restore(self, rel: RelPath, number: int) -> int:
        self.engine.workspace.check_file(rel)
        return self.engine.history.restore(rel, number).number

    def restore_from(self, rel: RelPath, source: str) -> str:
        from swfs.history import snapshots as history

        return history.restore_from(self.engine.workspace, rel, source)

    def delete_snapshot(self, name: str) -> int:
        from swfs.history import snapshots as history

        return history.delete_snapshot(self.engine.workspace, name)

    def submit(self, name: str, paths: list[str]) -> dict[str, Any]:
        from swfs.history import snapshots as history

        return history.submit(self.engine.workspace, name, paths or None).as_json()

    def reset(self, to: str) -> dict[str, Any]:
        from swfs.history import snapshots as history

        self.engine.scan()  # no daemon saw the changes: find them first
        return history.reset(self.engine.workspace, to).as_json()

    def gc(self, keep_days: float, dry_run: bool) -> dict[str, Any]:
        from swfs.store import gc

        self.engine.scan()
        return gc.collect(self.engine.workspace, keep_days=keep_days, dry_run=dry_run).as_json()


@contextmanager
def connect(t: Target, args: argparse.Namespace) -> Iterator[Client]:
    refuse_world(t)  # changes go to the workspace, never through a world
    if t.mounted:
        yield DaemonClient(t)
        return
    with open_engine(t, args) as engine:
        yield LocalClient(engine)
