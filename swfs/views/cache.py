"""What a reader of views keeps of the engine's answers, how long, and when it
drops them: the rules of the daemon's view caches, stated in the engine.

``.parsed`` asks the engine for a view's state, its unit names and each
unit separately (``ViewsAPI``), and ``ls -l`` of a view stats every unit, so
the daemon keeps those answers (``mountd.synthetic``):

* a listing of the workspace's views (and every generated tree's listing)
  is rebuilt on the next use after a change event or ``INDEX_TTL`` seconds;
  a lookup that will retry with a fresh one on a miss rebuilds at most every
  ``REBUILD_EVERY`` seconds (``outdated``), so that a ``grep -r`` during a
  burst of parses does not rebuild the listing once per file it opens;
* a view's state is kept per change event, at most ``INDEX_TTL`` seconds,
  and only while the file holds the recorded bytes it was made with (a
  writer's first write sends no change event): ``ViewStates``;
* a unit, and a view's unit names, are kept for the state they were read
  with, never for a pending view (its units change as the parse goes):
  ``Units`` (at most ``UNIT_CACHE`` units and ``UNIT_CACHE_BYTES``),
  ``UnitNames`` (at most ``STATE_CACHE``);
* a ``pending.md`` a listing showed stays readable ``PENDING_KEPT``
  seconds after its parse ended (``ListedPending``), rather than vanish
  between the listing and the open.

The kernel's own caches (page cache, dentries, attributes, kept listings)
and their invalidation stay the daemon's.

Imports: ``swfs.api``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from swfs.api import Freshness, RenderedUnit, ViewState

INDEX_TTL = 2.0  # seconds a cached listing is trusted without a change event
REBUILD_EVERY = 0.5  # seconds between rebuilds for lookups that hit the cached listing
STATE_CACHE = 4096  # view states and unit-name lists kept (a few fields each)
# Rendered units kept: an open asks on lookup, getattr and open, and a warm
# grep of a folder of documents opens each unit once per pass.
UNIT_CACHE = 4096
UNIT_CACHE_BYTES = 32 << 20
PENDING_KEPT = 60.0  # seconds a listed pending.md stays readable after its parse ended
LISTED_PENDING = 4096  # pending.md listings remembered


def outdated(kept_gen: int, kept_at: float, gen: int, now: float, *, fresh: bool) -> bool:
    """Whether a listing kept at change count ``kept_gen`` and time
    ``kept_at`` is to be rebuilt now (``fresh``: a miss will not retry)."""
    age = now - kept_at
    stale = kept_gen != gen or age > INDEX_TTL
    return stale and (fresh or age > REBUILD_EVERY)


class ViewStates:
    """rel -> the engine's state of its view, asked once per change (or
    ``INDEX_TTL``), not once per unit a listing stats."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[int, float, ViewState | None]] = OrderedDict()

    def get(self, rel: str, gen: int, settled: Callable[[], bool]) -> tuple[bool, ViewState | None]:
        """(hit, state).  ``settled``: whether the file holds recorded bytes
        now (asked on every hit: a kept state is used only while the answer
        is the one it was made with)."""
        hit = self._kept.get(rel)
        if hit is None or hit[0] != gen or time.monotonic() - hit[1] >= INDEX_TTL:
            return False, None
        state = hit[2]
        if state is not None and settled() != (state.current_hash is not None):
            return False, None
        self._kept.move_to_end(rel)
        return True, state

    def keep(self, rel: str, gen: int, state: ViewState | None) -> None:
        self._kept[rel] = (gen, time.monotonic(), state)
        self._kept.move_to_end(rel)
        while len(self._kept) > STATE_CACHE:
            self._kept.popitem(last=False)

    def forget(self, rel: str) -> None:
        self._kept.pop(rel, None)


class Units:
    """(rel, unit name) -> the unit as read for a state of its view."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, str], tuple[ViewState, RenderedUnit | None]] = (
            OrderedDict()
        )
        self._bytes = 0  # of the units kept (UNIT_CACHE_BYTES)
        # key -> the state an open of the unit was answered for, and that
        # answer (the daemon's entry, opaque here): kept only while the unit is.
        self._opened: dict[tuple[str, str], tuple[ViewState, object]] = {}

    def get(self, key: tuple[str, str], view: ViewState) -> tuple[bool, RenderedUnit | None]:
        """(hit, unit): kept for ``view``, and ``view`` is not pending."""
        hit = self._kept.get(key)
        if hit is None or hit[0] != view or view.freshness is Freshness.PENDING:
            return False, None
        self._kept.move_to_end(key)
        return True, hit[1]

    def keep(self, key: tuple[str, str], view: ViewState, unit: RenderedUnit | None) -> None:
        old = self._kept.pop(key, None)
        self._opened.pop(key, None)
        if old is not None and old[1] is not None:
            self._bytes -= len(old[1].content)
        self._kept[key] = (view, unit)
        if unit is not None:
            self._bytes += len(unit.content)
        while len(self._kept) > UNIT_CACHE or self._bytes > UNIT_CACHE_BYTES:
            gone_key, (_, gone) = self._kept.popitem(last=False)
            self._opened.pop(gone_key, None)  # its answer goes with its bytes
            if gone is not None:
                self._bytes -= len(gone.content)

    def note_opened(self, key: tuple[str, str], view: ViewState, answer: object) -> None:
        """An open of the unit kept for ``view`` was answered ``answer``: kept
        as long as the unit is (its bytes), for ``opened``."""
        if key in self._kept:
            self._opened[key] = (view, answer)

    def opened(self, key: tuple[str, str]) -> tuple[ViewState, object] | None:
        """The state the last open of the unit was answered for, and its answer."""
        return self._opened.get(key)

    def forget_opened(self, key: tuple[str, str]) -> None:
        self._opened.pop(key, None)


class UnitNames:
    """rel -> its view's unit names, as listed for a state of the view."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, tuple[ViewState, Sequence[str]]] = OrderedDict()

    def get(self, view: ViewState) -> Sequence[str] | None:
        hit = self._kept.get(view.rel)
        if hit is None or hit[0] != view or view.freshness is Freshness.PENDING:
            return None
        self._kept.move_to_end(view.rel)
        return hit[1]

    def keep(self, view: ViewState, names: Sequence[str]) -> None:
        self._kept[view.rel] = (view, names)
        while len(self._kept) > STATE_CACHE:
            self._kept.popitem(last=False)


class ListedPending:
    """The views whose listing showed ``pending.md``, and when."""

    def __init__(self) -> None:
        self._at: dict[str, float] = {}

    def note(self, rel: str) -> None:
        self._at[rel] = time.monotonic()
        while len(self._at) > LISTED_PENDING:
            self._at.pop(next(iter(self._at)))

    def shown(self, rel: str) -> bool:
        """A listing showed ``rel``'s pending.md within ``PENDING_KEPT`` seconds."""
        at = self._at.get(rel)
        if at is None or time.monotonic() - at > PENDING_KEPT:
            self._at.pop(rel, None)
            return False
        return True
