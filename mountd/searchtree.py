"""``.search/``: every name is a query, and reading it runs the query.

A file's content is the caller's ranked hits (``swfs.find.search``), so it
depends on who asks: it is computed once per (query, caller) and kept a
moment, so that the size a lookup reports and the bytes the open that
follows serves are the same.  Listing the directory shows the caller's own
recent queries.  Nothing here is writable.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import trio

from mountd.caller import current_caller
from mountd.nodes import Tree
from mountd.synthetic import Entry, Generation, TreeDefaults
from swfs.api import Access, RelPath
from swfs.find.search import Caller, SearchResult

log = logging.getLogger(__name__)

KEPT = 2.0  # seconds a computed result answers the same caller without a change
CACHED = 256  # results kept
RECENT = 20  # queries listed per caller
NAME_MAX = 255


class SearchTree(TreeDefaults):
    tree = Tree.SEARCH
    scope = "all"  # a query's hits may name any file (mountd.router)

    def listed(self) -> bool:
        """Reachable by name only: a recursive grep from the root runs no queries."""
        return False

    def __init__(self, engine: Any, gen: Generation) -> None:
        self.engine, self.gen = engine, gen
        self._results: OrderedDict[tuple[str, Caller], tuple[object, float, bytes]] = OrderedDict()
        self._recent: dict[int, OrderedDict[str, None]] = {}
        self._limiter = trio.CapacityLimiter(2)

    def _access(self) -> Access:
        root = self.engine.evidence.access(RelPath(""))
        if root is None:
            return Access(0, 0, 0o444)
        return Access(root.uid, root.gid, 0o444)  # the content is filtered per caller

    def _stamp(self) -> object:
        index = self.engine.search_index
        return (self.gen.value, 0 if index is None else index.generation)

    async def _run(self, name: str, caller: Caller) -> bytes:
        key = (name, caller)
        stamp = self._stamp()
        hit = self._results.get(key)
        if hit is not None and hit[0] == stamp and time.monotonic() - hit[1] < KEPT:
            return hit[2]
        search = None if self.engine.search_index is None else self.engine.search_index.search
        if search is None:
            result = SearchResult(name, error="this mount has no search index")
        else:
            result = await trio.to_thread.run_sync(search, name, caller, 20, limiter=self._limiter)
        data = result.render()
        self._results[key] = (stamp, time.monotonic(), data)
        self._results.move_to_end(key)
        while len(self._results) > CACHED:
            self._results.popitem(last=False)
        if result.error is None:
            recent = self._recent.setdefault(caller.uid, OrderedDict())
            recent[name] = None
            recent.move_to_end(name)
            while len(recent) > RECENT:
                recent.popitem(last=False)
        return data

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        if not path:
            return Entry(True, self._access(), mtime_ns=self.gen.last_ns)
        if "/" in path or len(path.encode()) > NAME_MAX:
            return None
        data = await self._run(path, current_caller())
        return Entry(
            False,
            self._access(),
            size=len(data),
            mtime_ns=time.time_ns(),
            xattrs={"query": path},
            data=data,
        )

    async def children(self, path: str) -> list[str]:
        if path:
            return []
        recent = self._recent.get(current_caller().uid)
        return [] if recent is None else list(reversed(recent))

    async def xattrs(self, path: str) -> Mapping[str, str]:
        e = await self.entry(path, wait=False)
        return {} if e is None else e.xattrs
