"""The daemon's long-run memory: the journal keeps user.sw.inputs of the
recently written files only (an older one is read back from its outputs
table), and the mount's change times are kept for a bounded number of
paths, so memory does not grow with every file ever written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from swfs.evidence import access as jmod
from swfs.evidence.procinfo import Caller, Proc


def _journal(tmp_path: Path) -> jmod.Journal:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "store").mkdir(exist_ok=True)
    hashes = {"a.txt": "a" * 64}
    return jmod.Journal(tmp_path / "store", file_hash=hashes.get, src=tmp_path / "src")  # type: ignore[arg-type]


def _as_job(j: jmod.Journal, pid: int, job: str) -> None:
    p = Proc(pid, 1, f"p{pid}", 1, pid, pid)
    j.procs._callers[pid] = (float("inf"), Caller(p, (p,), job))


def _inputs(j: jmod.Journal, path: str) -> list[str]:
    return [i["path"] for i in json.loads(j.inputs_xattr(path, None) or "[]")]


def test_only_recent_inputs_stay_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jmod, "INPUTS_CACHED", 3)
    j = _journal(tmp_path)
    _as_job(j, 1, "A")
    j.on_open(1, 1, "a.txt")
    j.on_close(1)
    for n in range(10):
        fh = 10 + n
        j.on_open(fh, 1, f"out{n}.txt", flags=os.O_WRONLY | os.O_CREAT)
        j.on_wrote(fh, f"out{n}.txt")
        j.on_close(fh)
    j.on_rename(1, "out9.txt", "renamed.txt")
    j.flush()
    assert len(j.inputs_by_path) == 3
    assert "out0.txt" not in j.inputs_by_path
    # Not in memory, still answered: from the outputs table.
    for n in range(9):
        assert _inputs(j, f"out{n}.txt") == ["a.txt"], n
    assert _inputs(j, "renamed.txt") == ["a.txt"]
    assert _inputs(j, "out9.txt") == []  # renamed away
    assert _inputs(j, "never-written.txt") == []
    assert len(j.inputs_by_path) == 3
    j.close()
    # A new journal over the same store loads the newest only.
    again = _journal(tmp_path)
    try:
        assert len(again.inputs_by_path) == 3
        assert _inputs(again, "out0.txt") == ["a.txt"]
    finally:
        again.close()


def test_generation_keeps_a_bounded_number_of_change_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mountd import synthetic

    monkeypatch.setattr(synthetic, "CHANGED_KEPT", 10)
    gen = synthetic.Generation()
    assert gen.changed_ns("never") == gen.started_ns
    times = {}
    for n in range(25):
        gen.bump(f"f{n}")
        times[f"f{n}"] = gen.changed_ns(f"f{n}")
    assert len(gen._changed) <= 10
    # The newest keep their own time; a dropped one is never shown older
    # than its change; times never go backwards for any path.
    assert gen.changed_ns("f24") == times["f24"]
    for n in range(25):
        assert gen.changed_ns(f"f{n}") >= times[f"f{n}"], n
    assert gen.changed_ns("never") >= gen.started_ns
