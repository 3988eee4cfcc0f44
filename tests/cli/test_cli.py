"""The command line as a user runs it: exit codes, one-line errors, JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SWFS = str(Path(sys.executable).with_name("swfs"))


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SWFS, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "b.md").write_text("# beta\n")
    (root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    return root


def test_index_status_show_diff_versions_log(folder: Path) -> None:
    out = run("index", folder)
    assert out.returncode == 0, out.stderr
    assert "indexed 3 files" in out.stdout
    status = json.loads(run("status", folder, "--json").stdout)
    assert {
        k: status[k] for k in ("files", "current", "stale", "pending", "failed", "unsupported")
    } == {
        "files": 3,
        "current": 2,
        "stale": 0,
        "pending": 0,
        "failed": 0,
        "unsupported": 1,
    }
    assert status["content"] == {"pages": 0, "slides": 0, "sheets": 0, "cells": 0}
    show = run("show", folder, "a.txt")
    assert show.returncode == 0
    assert '<!-- swfs source="a.txt" unit="content.txt"' in show.stdout
    assert "alpha" in show.stdout
    (folder / "a.txt").write_text("ALPHA\n")
    diff = run("diff", folder)
    assert "-alpha" in diff.stdout
    assert "+ALPHA" in diff.stdout
    versions = run("versions", folder, "a.txt", "--json")
    lines = [json.loads(line) for line in versions.stdout.splitlines()]
    assert [v["cause"] for v in lines] == ["baseline", "external"]
    assert lines[0]["available"] is False
    log = [json.loads(line) for line in run("log", folder, "--json").stdout.splitlines()]
    assert {"scan", "baseline", "parse"} <= {ev["ev"] for ev in log}
    assert run("check", folder).returncode == 0


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (("status", "/nonexistent/folder"), "/nonexistent/folder: no such file", 1),
        (("show", "{f}", "missing.txt"), "missing.txt: no such file in the workspace", 1),
        (("show", "{f}", "img.png"), "img.png: unsupported format", 1),
        (("show", "{f}", "../etc/passwd"), "'..' is not allowed", 1),
        (("restore", "{f}", "a.txt"), "expected PATH@N", 2),
        (("restore", "{f}", "a.txt@9"), "a.txt: no version 9", 1),
        (("snapshot", "{f}", "../x"), "not a valid snapshot name", 1),
    ],
)
def test_errors_name_the_path_and_cause_without_traceback(
    folder: Path, args: tuple[str, ...], message: str, code: int
) -> None:
    run("index", folder)
    out = run(*(a.format(f=folder) for a in args))
    assert out.returncode == code, out
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("swfs: error: ")
    assert out.stderr.count("\n") == 1


def test_prompt_explains_the_trees() -> None:
    out = run("prompt")
    assert out.returncode == 0
    for word in (".parsed/", ".review/", ".versions/", "freshness", "swfs sync"):
        assert word in out.stdout
