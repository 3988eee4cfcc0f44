"""``Generation.below_ns``: the mtime of a generated folder whose listing the
kernel keeps moves with every change event below it, and only with those
(mountd.dirlist: the kernel drops a kept listing whose mtime moved)."""

from __future__ import annotations

import time

import pytest

from mountd import synthetic


def _later(gen: synthetic.Generation, rel: str) -> int:
    """Bump ``rel`` at a time the clock shows as later than any before."""
    before = gen.last_ns
    while time.time_ns() <= before:
        time.sleep(0.001)
    gen.bump(rel)
    return gen.last_ns


def test_a_change_moves_the_folders_above_it_and_no_other() -> None:
    gen = synthetic.Generation()
    start = gen.below_ns("")
    assert start == gen.started_ns
    at = _later(gen, "a/b/x.pdf")
    for folder in ("a/b", "a", ""):
        assert gen.below_ns(folder) == at, folder
    for folder in ("a/c", "b", "a/b/x.pdf/sub"):
        assert gen.below_ns(folder) == start, folder
    assert gen.changed_ns("a/b/x.pdf") == at
    assert gen.changed_ns("a/b") == start  # a folder is not a changed path

    then = _later(gen, "a/c/y.txt")
    assert gen.below_ns("a/c") == gen.below_ns("a") == gen.below_ns("") == then
    assert gen.below_ns("a/b") == at


def test_an_event_that_names_a_folder_moves_it() -> None:
    gen = synthetic.Generation()
    at = _later(gen, "docs/old")  # a reset names the folders whose entries changed
    assert gen.below_ns("docs/old") == gen.below_ns("docs") == gen.below_ns("") == at
    root = _later(gen, "")
    assert gen.below_ns("") == root
    assert gen.below_ns("docs") == at


def test_folder_times_never_go_back_when_the_record_is_trimmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(synthetic, "CHANGED_KEPT", 8)
    gen = synthetic.Generation()
    seen: dict[str, int] = {}
    for n in range(30):
        _later(gen, f"d{n}/f.txt")
        seen[f"d{n}"] = gen.below_ns(f"d{n}")
    assert len(gen._changed) <= 8
    for folder, at in seen.items():
        assert gen.below_ns(folder) >= at, folder
    assert gen.below_ns("") == gen.last_ns
