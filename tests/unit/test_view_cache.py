"""The rules of the daemon's view caches (``swfs.views.cache``): what is kept
of the engine's answers, for how long, and when it is dropped."""

from __future__ import annotations

import pytest

from swfs.api import Freshness, Hash, RelPath, RenderedUnit, ViewState
from swfs.views import cache


def _view(fresh: Freshness, current: str | None = "h1") -> ViewState:
    h = None if current is None else Hash(current)
    return ViewState(RelPath("a.pdf"), fresh, h, h, "pdf@1", None)


def test_a_listing_is_rebuilt_after_a_change_or_its_ttl_and_lookups_rebuild_less() -> None:
    assert not cache.outdated(3, 100.0, 3, 100.1, fresh=True)
    assert cache.outdated(3, 100.0, 4, 100.1, fresh=True)  # a change event
    assert not cache.outdated(3, 100.0, 4, 100.1, fresh=False)  # within REBUILD_EVERY
    assert cache.outdated(3, 100.0, 4, 100.0 + cache.REBUILD_EVERY + 0.01, fresh=False)
    assert cache.outdated(3, 100.0, 3, 100.0 + cache.INDEX_TTL + 0.01, fresh=True)


def test_a_state_is_kept_per_change_and_while_the_file_is_as_recorded() -> None:
    states = cache.ViewStates()
    view = _view(Freshness.CURRENT)
    states.keep("a.pdf", 1, view)
    assert states.get("a.pdf", 1, lambda: True) == (True, view)
    assert states.get("a.pdf", 2, lambda: True) == (False, None)  # a change event since
    assert states.get("a.pdf", 1, lambda: False) == (False, None)  # written since: unsettled
    states.keep("b.txt", 1, None)  # no view: kept as such
    assert states.get("b.txt", 1, lambda: False) == (True, None)
    states.forget("a.pdf")
    assert states.get("a.pdf", 1, lambda: True) == (False, None)


def test_units_and_names_are_kept_for_their_state_never_for_a_pending_view() -> None:
    units, names = cache.Units(), cache.UnitNames()
    unit = RenderedUnit("page-0001.md", "a.pdf#page=1", b"text\n")
    view = _view(Freshness.CURRENT)
    units.keep(("a.pdf", unit.name), view, unit)
    names.keep(view, [unit.name])
    assert units.get(("a.pdf", unit.name), view) == (True, unit)
    assert names.get(view) == [unit.name]
    other = _view(Freshness.CURRENT, "h2")
    assert units.get(("a.pdf", unit.name), other) == (False, None)
    assert names.get(other) is None
    pending = _view(Freshness.PENDING)
    units.keep(("a.pdf", unit.name), pending, unit)
    names.keep(pending, [unit.name])
    assert units.get(("a.pdf", unit.name), pending) == (False, None)
    assert names.get(pending) is None


def test_units_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "UNIT_CACHE_BYTES", 10)
    units = cache.Units()
    view = _view(Freshness.CURRENT)
    first = RenderedUnit("u1", "a.pdf#1", b"123456")
    second = RenderedUnit("u2", "a.pdf#2", b"abcdef")
    units.keep(("a.pdf", "u1"), view, first)
    units.keep(("a.pdf", "u2"), view, second)
    assert units.get(("a.pdf", "u1"), view) == (False, None)  # the oldest went
    assert units.get(("a.pdf", "u2"), view) == (True, second)


def test_a_listed_pending_md_stays_readable_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = cache.ListedPending()
    assert not listed.shown("a.pdf")
    listed.note("a.pdf")
    assert listed.shown("a.pdf")
    monkeypatch.setattr(cache, "PENDING_KEPT", -1.0)
    assert not listed.shown("a.pdf")
