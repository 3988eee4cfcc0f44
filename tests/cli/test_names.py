"""Snapshot, submission, world and tab names: an empty one, or one with a
control character (a newline, a tab, an escape), a line separator, a byte
that is not UTF-8 or more than 255 bytes, is refused with one line on
stderr (exit 2, no traceback) and nothing is made; a plain one still
works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swfs.history import names

SWFS = str(Path(sys.executable).with_name("swfs"))

BAD = ("", "a\nb", "tab\there", "esc\x1bape", "nul\x7f", "line\u2028sep", "c1\x85", "x" * 256)


def run(*args: str | bytes | Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [SWFS, *(a if isinstance(a, bytes) else str(a) for a in args)],
        capture_output=True,
        timeout=120,
        check=False,
    )


def refused(proc: subprocess.CompletedProcess[bytes], what: str) -> None:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith("swfs: error: ")
    assert f"{what} name" in err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("names") / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    out = run("index", root)
    assert out.returncode == 0, out.stderr
    return root


@pytest.mark.parametrize("name", BAD)
def test_a_bad_name_is_refused_in_one_line(ws: Path, name: str) -> None:
    refused(run("snapshot", ws, name), "snapshot")
    refused(run("snapshot", ws, "--delete", name), "snapshot")
    refused(run("submit", ws, name, "a.txt"), "submission")
    refused(run("tab", "new", ws, name), "tab")
    refused(run("tab", "show", ws, "--old", name), "tab")
    mnt = ws.parent / "mnt"
    mnt.mkdir(exist_ok=True)
    refused(run("mount", ws, mnt, "--at", name), "world")
    assert not os.path.ismount(mnt)


def test_a_name_that_is_not_utf8_is_refused(ws: Path) -> None:
    refused(run("snapshot", ws, b"caf\xe9"), "snapshot")
    refused(run("tab", "new", ws, b"caf\xe9"), "tab")


def test_nothing_bad_was_made_and_plain_names_work(ws: Path) -> None:
    assert run("snapshot", ws, "plain-name").returncode == 0
    assert run("tab", "new", ws, "tab one").returncode == 0
    shown = [
        json.loads(line)["name"] for line in run("snapshots", ws, "--json").stdout.splitlines()
    ]
    assert shown == ["plain-name"]
    assert run("snapshots", ws).stdout.decode().count("\n") == 2  # the header, one snapshot


def test_the_rule() -> None:
    for name in BAD:
        assert names.problem(name, "snapshot") is not None, name
    for name in ("q3", "Q3 report (final)", "café", "報告", "a" * 255):
        assert names.problem(name, "snapshot") is None, name
    assert names.problem("a\nb", "tab") == (
        "'a\\nb': a tab name cannot hold a control character or a byte that is not UTF-8 "
        "(here '\\n')"
    )
