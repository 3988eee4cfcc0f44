"""Two daemons over two workspaces that share files, through one shared
parse cache (``swfs mount --cache DIR``): the second parses nothing, both
show the same ``.parsed`` text, and a shared parse reveals a file to no user
who may not read it in the workspace they look through."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mountd.launch import mounted_swfs
from tests.mountutil import (
    Mount,
    lazy_unmount,
    needs_fuse,
    run_as,
    start_mount,
    swfs,
    unprivileged_ids,
    workdir,
)

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]

SHARED = {
    "report.txt": "Quarterly figures: the northern region grew 14 percent.\n",
    "notes/brief.md": "# Brief\n\nSummarise revenue by region.\n",
    "data.csv": "region,amount\nNorth,1200\nSouth,900\n",
}


def status(mnt: Path) -> dict[str, Any]:
    return dict(json.loads(swfs("status", mnt, "--json").stdout))


def parsed_text(mnt: Path, rel: str) -> str:
    p = mnt / ".parsed" / rel
    if p.is_dir():
        (name,) = os.listdir(p)
        p = p / name
    return p.read_text()


def parsed_file(mnt: Path, rel: str) -> Path:
    p = mnt / ".parsed" / rel
    return p / os.listdir(p)[0] if p.is_dir() else p


def test_second_daemon_parses_nothing_and_leaks_nothing() -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("needs root and the unprivileged test user")
    root = workdir()
    cache = root / "cache"
    mounts: list[Mount] = []
    try:
        srcs = {}
        for name in ("a", "b"):
            src = root / name / "src"
            for rel, text in SHARED.items():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                (src / rel).write_text(text)
            (root / name / "mnt").mkdir()
            srcs[name] = src
        # A: every file readable by all.  B: the same report, root's alone.
        for p in srcs["a"].rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (srcs["b"] / "report.txt").chmod(0o600)
        a_mnt, b_mnt = root / "a" / "mnt", root / "b" / "mnt"

        mounts.append(start_mount(srcs["a"], a_mnt, "--cache", str(cache)))
        swfs("sync", a_mnt)
        first = status(a_mnt)["parses"]
        assert first["runs"] == len(SHARED), first
        assert first["cache"]["published"] == len(SHARED), first
        assert cache.stat().st_mode & 0o777 == 0o700

        mounts.append(start_mount(srcs["b"], b_mnt, "--cache", str(cache)))
        swfs("sync", b_mnt)
        second = status(b_mnt)["parses"]
        assert second["runs"] == 0, second
        assert second["cache"]["hits"] == len(SHARED), second
        assert status(b_mnt)["current"] == len(SHARED)

        for rel in SHARED:
            assert parsed_text(a_mnt, rel) == parsed_text(b_mnt, rel)
        assert "northern region grew" in parsed_text(b_mnt, "report.txt")

        # The unprivileged user reads A's view of the report, not B's.
        a_report, b_report = parsed_file(a_mnt, "report.txt"), parsed_file(b_mnt, "report.txt")
        assert run_as(ids, a_report.read_bytes) == 0
        assert run_as(ids, b_report.read_bytes) == errno.EACCES
        assert run_as(ids, lambda: (b_mnt / "report.txt").read_bytes()) == errno.EACCES
        # ... nor the cache itself (it is the daemons' user's alone).
        assert run_as(ids, lambda: os.listdir(cache)) == errno.EACCES
        # The brief, readable in both, is readable through both.
        assert run_as(ids, parsed_file(b_mnt, "notes/brief.md").read_bytes) == 0
    finally:
        for m in mounts:
            m.stop()
        for name in ("a", "b"):
            lazy_unmount(root / name / "mnt")
        if not any(mounted_swfs(root / n / "mnt") for n in ("a", "b")):
            shutil.rmtree(root, ignore_errors=True)
