"""The history rule (swfs.permissions): content recorded in the past is
readable only by who could read the file then and can now."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import pytest

from swfs.api import Access
from swfs.permissions import allows, may_read, narrowed, then_and_now

UIDS = (1, 2, 3)
GIDS = (10, 20, 30)


@dataclass(frozen=True)
class Who:
    uid: int
    gids: frozenset[int]


def callers() -> list[Who]:
    return [
        Who(u, frozenset(gs))
        for u in UIDS
        for k in range(len(GIDS) + 1)
        for gs in itertools.combinations(GIDS, k)
    ]


def test_the_shown_triple_never_grants_more_than_both_sides() -> None:
    rng = random.Random(35)
    everyone = callers()
    exact = total = 0
    for _ in range(3000):
        then = Access(rng.choice(UIDS), rng.choice(GIDS), rng.randrange(0o1000))
        now = Access(rng.choice(UIDS), rng.choice(GIDS), rng.randrange(0o1000))
        shown = then_and_now(then, now)
        assert (shown.uid, shown.gid) == (now.uid, now.gid)
        for who in everyone:
            for bit in (0o4, 0o2, 0o1):
                kernel = allows(shown, who, bit)
                both = allows(then, who, bit) and allows(now, who, bit)
                assert not kernel or both, (then, now, who, bit)
                exact += kernel == both
                total += 1
        assert may_read(everyone[0], then, now) == (
            allows(then, everyone[0], 0o4) and allows(now, everyone[0], 0o4)
        )
    assert exact / total > 0.8  # strict only where group membership is unknown


@pytest.mark.parametrize(
    ("then", "now", "shown"),
    [
        # The reproducer: a 0600 file made 0644 later.
        (Access(0, 0, 0o600), Access(0, 0, 0o644), Access(0, 0, 0o600)),
        (Access(1, 10, 0o644), Access(1, 10, 0o640), Access(1, 10, 0o640)),
        # A group given the file later: then readable by everyone, so the group keeps it.
        (Access(0, 0, 0o644), Access(0, 20, 0o640), Access(0, 20, 0o640)),
        # Another owner then and closed to others: nobody but root now.
        (Access(1, 10, 0o600), Access(2, 10, 0o644), Access(2, 10, 0o000)),
    ],
)
def test_cases(then: Access, now: Access, shown: Access) -> None:
    assert then_and_now(then, now) == shown


def test_a_gone_file_keeps_what_was_recorded() -> None:
    then = Access(1, 10, 0o640)
    assert then_and_now(then, None) == then
    assert narrowed(then, None) == then


def test_root_reads_everything() -> None:
    assert may_read(Who(0, frozenset()), Access(1, 1, 0), Access(1, 1, 0))
