"""``swfs log`` shows two stores, each line labelled with its own: ``state``
(the state log in the store's LMDB) and ``access`` (the access journal)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli import lineage
from cli.base import Target

SWFS = str(Path(sys.executable).with_name("swfs"))


def test_the_state_logs_lines_are_labelled_state(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    for args in (("index", folder), ("log", folder)):
        out = subprocess.run(
            [SWFS, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
        )
        assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(" baseline " in line for line in lines), out.stdout
    assert all(line.startswith("state ") for line in lines), out.stdout


def test_both_logs_in_time_order_each_line_labelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    read = {
        "seq": 7,
        "t": 2.0,
        "kind": "read",
        "op": "read",
        "path": "a.txt",
        "lines": [1, 3],
        "process": {"name": "cat", "pid": 42},
    }

    def access_events(t: Target, kind: str | None) -> Iterator[dict[str, Any]]:
        return iter([read] if kind in (None, "read") else [])

    monkeypatch.setattr(lineage, "access_events", access_events)
    state = [(1, {"t": 1.0, "ev": "baseline", "files": 1}), (2, {"t": 3.0, "ev": "gc"})]
    target = Target(tmp_path, tmp_path / ".swfs", mounted=False)
    lineage.print_log(state, target, argparse.Namespace(kind=None, limit=0, json=False))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["state", "access", "state"]
    assert "baseline" in lines[0]
    assert "a.txt (lines 1-3)  by cat[42]" in lines[1]
    assert lines[2].split()[1] == "2"
    # --kind state: the state log alone; --kind read: the access journal's reads alone.
    lineage.print_log(state, target, argparse.Namespace(kind="state", limit=0, json=False))
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()} == {"state"}
    lineage.print_log(state, target, argparse.Namespace(kind="read", limit=0, json=False))
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["access"]
