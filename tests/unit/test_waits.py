"""The stale and pending wait (``swfs.views.waits``): the rule, per freshness."""

from __future__ import annotations

from swfs.api import Freshness
from swfs.views.waits import Waits

W = Waits(pending=10.0, stale=2.0)
SERVE = Waits(pending=10.0, stale=2.0, serve_stale=True)


def test_a_pending_view_waits_the_pending_wait_and_a_listing_at_most_the_stale_wait() -> None:
    assert W.limit(Freshness.PENDING) == 10.0
    assert W.limit(Freshness.PENDING, brief=True) == 2.0
    assert W.limit(Freshness.PENDING, pending=False) == 0.0
    assert Waits(pending=1.0, stale=2.0).limit(Freshness.PENDING, brief=True) == 1.0


def test_a_stale_view_waits_the_stale_wait_unless_served_at_once() -> None:
    assert W.limit(Freshness.STALE) == 2.0
    assert W.limit(Freshness.STALE, pending=False) == 2.0
    assert SERVE.limit(Freshness.STALE) == 0.0
    assert SERVE.stale_limit == 0.0
    assert W.stale_limit == 2.0


def test_for_a_diff_a_stale_view_is_pending() -> None:
    assert W.limit(Freshness.STALE, diff=True) == 10.0
    assert W.limit(Freshness.STALE, diff=True, brief=True) == 2.0
    assert SERVE.limit(Freshness.STALE, diff=True) == 10.0


def test_a_fresh_or_unknown_view_never_waits() -> None:
    for fresh in (Freshness.CURRENT, Freshness.FAILED, Freshness.UNSUPPORTED, None):
        assert W.limit(fresh) == 0.0
        assert W.limit(fresh, diff=True) == 0.0
