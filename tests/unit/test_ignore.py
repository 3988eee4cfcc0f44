"""``.swfsignore`` matching, checked against git's own answers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from swfs.ignore import IGNORE_FILE, IgnoreRules

RULES = """\
# comments and blank lines are ignored

*.log
!keep.log
build/
/top.txt
docs/**/*.tmp
cache
secret[0-9].txt
data/*
!data/keep/
"""

# (path, is_dir); the directories are created for git, so a name is never
# both a file and a directory here (test_basic_patterns covers that case).
PATHS = [
    ("a.log", False),
    ("sub/b.log", False),
    ("keep.log", False),
    ("sub/keep.log", False),
    ("build", True),
    ("build/out.o", False),
    ("src/build", True),
    ("src/build/x", False),
    ("top.txt", False),
    ("sub/top.txt", False),
    ("docs/x.tmp", False),
    ("docs/a/b/x.tmp", False),
    ("other/x.tmp", False),
    ("cache", True),
    ("a/cache/file", False),
    ("secret1.txt", False),
    ("secretX.txt", False),
    ("data/file.csv", False),
    ("data/keep", True),
    ("data/keep/file.csv", False),
    ("report.pdf", False),
    ("dir/report.xlsx", False),
]


def test_missing_file_ignores_nothing(tmp_path: Path) -> None:
    rules = IgnoreRules.load(tmp_path)
    assert not rules.ignored("anything.log")
    assert not rules.ignored("dir", is_dir=True)


def test_empty_path_is_never_ignored(tmp_path: Path) -> None:
    (tmp_path / IGNORE_FILE).write_text("*\n")
    rules = IgnoreRules.load(tmp_path)
    assert not rules.ignored("")
    assert rules.ignored("x")


def test_basic_patterns(tmp_path: Path) -> None:
    (tmp_path / IGNORE_FILE).write_text(RULES)
    rules = IgnoreRules.load(tmp_path)
    assert rules.ignored("a.log")
    assert rules.ignored("sub/b.log")
    assert not rules.ignored("keep.log")
    assert rules.ignored("build", is_dir=True)
    assert not rules.ignored("build", is_dir=False)
    assert rules.ignored("build/out.o")
    assert rules.ignored("top.txt")
    assert not rules.ignored("sub/top.txt")
    assert not rules.ignored("report.pdf")
    assert rules.ignored("cache", is_dir=False)
    # Leading or trailing slashes from callers do not change the answer.
    assert rules.ignored("/build/", is_dir=True)


def test_crlf_lines(tmp_path: Path) -> None:
    (tmp_path / IGNORE_FILE).write_bytes(b"*.log\r\n!keep.log\r\n")
    rules = IgnoreRules.load(tmp_path)
    assert rules.ignored("x.log")
    assert not rules.ignored("keep.log")


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_agrees_with_git(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text(RULES)
    (repo / IGNORE_FILE).write_text(RULES)
    for rel, is_dir in PATHS:
        if is_dir:
            (repo / rel).mkdir(parents=True, exist_ok=True)
    rules = IgnoreRules.load(repo)
    for rel, is_dir in PATHS:
        # check-ignore decides directories by the trailing slash, like we do.
        arg = rel + "/" if is_dir else rel
        proc = subprocess.run(
            ["git", "-C", str(repo), "check-ignore", "-q", "--no-index", arg], check=False
        )
        assert proc.returncode in (0, 1), proc
        assert rules.ignored(rel, is_dir=is_dir) == (proc.returncode == 0), (rel, is_dir)
