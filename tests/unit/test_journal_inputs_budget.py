"""The journal's memory of recent ``user.sw.inputs`` values is bounded in
characters as well as in entries: a job that read thousands of files before
each write makes input lists of hundreds of KB each, and a count of entries
alone let the cache hold hundreds of MB over a long run.  Values evicted or
never kept are answered from the outputs table all the same."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from swfs.evidence import access as jmod
from swfs.evidence.procinfo import Caller, Proc


def test_recent_inputs_keeps_a_character_budget() -> None:
    r = jmod.RecentInputs(100, max_chars=1000)
    for n in range(10):
        r[f"p{n}"] = ("h", "x" * 300)
    assert r.chars <= 1000
    assert list(r) == ["p7", "p8", "p9"]  # the newest, oldest dropped first
    assert r.chars == sum(len(v[1]) for v in r.values())
    r["p8"] = ("h", "y" * 10)  # replaced: counted once, moved to the end
    assert list(r) == ["p7", "p9", "p8"]
    assert r.chars == 610
    r["huge"] = ("h", "z" * 1001)  # larger than the whole budget: not kept
    assert "huge" not in r
    assert r.chars == 610
    r.pop("p7")
    r.pop("absent")
    assert r.chars == 310 == sum(len(v[1]) for v in r.values())


def _journal(tmp_path: Path) -> jmod.Journal:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "store").mkdir(exist_ok=True)
    return jmod.Journal(tmp_path / "store", file_hash=lambda p: "a" * 64, src=tmp_path / "src")  # type: ignore[arg-type]


def test_long_input_lists_stay_answered_but_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jmod, "INPUTS_CACHED_CHARS", 20_000)
    j = _journal(tmp_path)
    try:
        p = Proc(1, 1, "p1", 1, 1, 1)
        j.procs._callers[1] = (float("inf"), Caller(p, (p,), "A"))
        reads = 300
        for n in range(reads):  # a job reading many files, then writing several
            j.on_open(1000 + n, 1, f"in/{n:04d}.txt")
            j.on_close(1000 + n)
        for n in range(20):
            fh = 10 + n
            j.on_open(fh, 1, f"out{n}.txt", flags=os.O_WRONLY | os.O_CREAT)
            j.on_wrote(fh, f"out{n}.txt")
            j.on_close(fh)
        j.flush()
        held = j.inputs_by_path
        assert held.chars <= 20_000
        assert held.chars == sum(len(v[1]) for v in held.values())
        assert len(held) < 20  # each value is thousands of characters: not all kept
        for n in range(20):
            got = json.loads(j.inputs_xattr(f"out{n}.txt", None) or "[]")
            assert len(got) == reads, n
            assert got[0]["path"] == "in/0000.txt"
        assert held.chars <= 20_000
    finally:
        j.close()
