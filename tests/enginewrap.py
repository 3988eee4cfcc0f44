"""The real engine, watched and faulted for daemon tests.

``Watched(engine, calls=FILE)`` passes every call through to the real engine
(nothing is re-implemented: versions, views and review are the engine's
own) and appends the daemon's hook calls to a JSON-lines log, so that a test
in another process can check the order in which the daemon calls them.

Faults a test picks by naming a file:
``boom*``     the engine's answers about it raise RuntimeError (the daemon
              must answer EIO and live on)
``nospace*``  preserving its bytes fails with ENOSPC (the write must fail)

``crash_after``: the background work raises after that many seconds (the
daemon must die without unmounting).

A file ``slow-diff`` next to SRC (not in it) makes ``review_all_diff`` slow on
purpose: it creates ``diff-started`` there and blocks until ``diff-go``
appears, so a test can hold a diff "being computed" as long as it needs.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from swfs.api import EngineAPI

HOOKS = frozenset(
    {
        "check_file",
        "preserve",
        "preserve_inode",
        "keep_held",
        "preserve_freeing",
        "record_write",
        "record_rename",
        "record_unlink",
        "wait_view",
    }
)
# Methods whose first argument is a path (or a view of one) that ``boom*`` faults.
FAULTED = frozenset(
    {
        "file_state",
        "freshness",
        "check_file",
        "record_write",
        "view_state",
        "view_unit_names",
        "view_unit",
        "parsed_view",
    }
)


def _rel(arg: Any) -> str:
    return str(getattr(arg, "rel", arg))


class Watched:
    """The engine, its parts (``workspace``, ``views``, ``reviews``) watched."""

    def __init__(
        self, engine: EngineAPI, *, calls: Path | None = None, crash_after: float | None = None
    ) -> None:
        self._engine = engine
        self._calls_file = calls
        self._crash_after = crash_after
        self.calls: list[list[str]] = []
        self.workspace = _Part(engine.workspace, self)
        self.views = _Part(engine.views, self)
        self.reviews = _Reviews(engine, self)
        # The write protocol asks the workspace's history primitives (preserve,
        # record_write...) of whatever it was given: route them through here,
        # so they are logged and faulted like the daemon's own calls.
        writes = getattr(engine.workspace, "writes", None)
        if writes is not None and hasattr(writes, "history"):
            writes.history = self.workspace

    def _log(self, call: list[str]) -> None:
        self.calls.append(call)
        if self._calls_file is not None:
            with self._calls_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps(call) + "\n")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def run_background(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        if self._crash_after is None:
            await self._engine.run_background(task_status=task_status)
            return
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: self._engine.run_background(task_status=task_status)
            )
            task_status.started()
            await trio.sleep(self._crash_after)
            raise RuntimeError("injected: background work crashed")


def watched(factory: Callable[[], Any], **kw: Any) -> Callable[[], Any]:
    """An engine factory (a context manager) whose engine is ``Watched``."""
    import contextlib

    @contextlib.contextmanager
    def make() -> Any:
        with factory() as engine:
            yield Watched(engine, **kw)

    return make


class _Part:
    """One part of the engine: its hooks logged, its answers faulted."""

    def __init__(self, part: Any, watched: Watched) -> None:
        self._part = part
        self._watched = watched

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._part, name)
        if not callable(attr) or (name not in HOOKS and name not in FAULTED):
            return attr
        log = self._watched._log
        if name == "wait_view":

            async def waiting(rel: Any, limit: float, unit: str | None = None) -> None:
                log([name, _rel(rel)])
                await attr(rel, limit, unit)

            return waiting

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            rels = [_rel(a) for a in args if isinstance(a, str) or hasattr(a, "rel")]
            if name in HOOKS:
                log([name, *rels])
            base = os.path.basename(rels[0]) if rels else ""
            if name in FAULTED and base.startswith("boom"):
                raise RuntimeError(f"injected engine fault on {rels[0]}")
            if name == "preserve" and base.startswith("nospace"):
                raise OSError(errno.ENOSPC, "injected: no space to preserve", rels[0])
            return attr(*args, **kwargs)

        return call


class _Reviews(_Part):
    def __init__(self, engine: EngineAPI, watched: Watched) -> None:
        super().__init__(engine.reviews, watched)
        self._src = engine.src

    def review_all_diff(self) -> bytes:
        gate = Path(self._src).parent
        if (gate / "slow-diff").exists():
            (gate / "diff-started").touch()
            deadline = time.monotonic() + 120
            while not (gate / "diff-go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return bytes(self._part.review_all_diff())
