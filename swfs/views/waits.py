"""How long a read waits for a view: the stale and pending wait, stated once.

A read of a unit whose view is *pending* (the file's present bytes were never
parsed) waits up to ``pending`` seconds for the parse.  One of a *stale* view
(parsed at older bytes, the re-parse queued) waits up to ``stale`` seconds,
then serves the prior view marked stale; a mount that serves stale views at
once (``serve_stale``) never waits for one.  Three readers bend the rule:

* a listing waits ``brief``ly: a pending view at most the stale wait, so that
  ``grep -r`` right after a save finds the text, and a parse that takes
  longer is listed as ``pending.md``;
* a read that asks for what is there now (``pending=False``) waits only for
  a stale view;
* a diff compares the present bytes' text, so for it a stale view is a
  pending one (``diff=True``).

The wait itself moves the file to the front of the parse queue
(``ViewsAPI.wait_view``).  The daemon asks here how long (``Waits.limit``)
and waits through here (``settle``); it keeps only its caches.

Imports: ``swfs.api``.
"""

from __future__ import annotations

from dataclasses import dataclass

from swfs.api import Freshness, RelPath, ViewsAPI


@dataclass(frozen=True)
class Waits:
    pending: float = 10.0  # seconds a read of a pending view waits for its parse
    stale: float = 2.0  # seconds a read of a stale view waits for its re-parse
    serve_stale: bool = False  # a stale view is served at once, as it is

    @property
    def stale_limit(self) -> float:
        """How long a read of a stale view waits."""
        return 0.0 if self.serve_stale else self.stale

    def limit(
        self,
        fresh: Freshness | None,
        *,
        pending: bool = True,
        brief: bool = False,
        diff: bool = False,
    ) -> float:
        """Seconds a read of a view as ``fresh`` waits (0: not at all)."""
        if diff and fresh is Freshness.STALE:
            fresh = Freshness.PENDING
        if fresh is Freshness.PENDING and pending:
            return min(self.pending, self.stale) if brief else self.pending
        if fresh is Freshness.STALE:
            return self.stale_limit
        return 0.0


async def settle(views: ViewsAPI, rel: str, limit: float, unit: str | None = None) -> bool:
    """Wait at most ``limit`` seconds for the view of ``rel`` (with ``unit``:
    of a view parsed range by range, for that unit only).  Whether it waited
    (the caller's cached state of the view is then out of date)."""
    if limit <= 0:
        return False
    await views.wait_view(RelPath(rel), limit, unit)
    return True
