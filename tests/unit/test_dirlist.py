"""mountd.dirlist's bookkeeping and mountd.reqcount's dump line."""

from __future__ import annotations

from mountd import reqcount
from mountd.dirlist import Listings


def test_a_kept_listing_continues_until_its_end_or_a_newer_one() -> None:
    kept = Listings(cap=2)
    first = [".", "..", "a", "b"]
    kept.keep(10, first)
    assert kept.get(10) is first
    newer = [".", "..", "a", "b", "c"]
    kept.keep(10, newer)  # another process listed from the start meanwhile
    kept.drop(10, first)  # the first reader's end leaves the newer listing alone
    assert kept.get(10) is newer
    kept.drop(10, newer)
    assert kept.get(10) is None
    assert len(kept) == 0


def test_kept_listings_are_bounded_oldest_first() -> None:
    kept = Listings(cap=2)
    for ino in (1, 2, 3):
        kept.keep(ino, [".", "..", str(ino)])
    assert kept.get(1) is None
    assert kept.get(2) == [".", "..", "2"]
    assert kept.get(3) == [".", "..", "3"]


def test_request_counts_line_round_trips() -> None:
    reqcount.COUNTS.clear()
    reqcount.COUNTS.update({"getattr": 3, "readdir": 2})
    try:
        line = reqcount.line()
        assert line == "requests since start: getattr=3 readdir=2"
        log = f"older\n{reqcount.PREFIX} getattr=1\nnoise\n{line}\nend of dump\n"
        assert reqcount.parse(log) == {"getattr": 3, "readdir": 2}
        assert reqcount.parse("nothing here") == {}
    finally:
        reqcount.COUNTS.clear()
