"""The access journal's store failing under a running daemon: removed,
replaced or overwritten.  The daemon logs it, says so in ``swfs status`` and
``swfs check``, sets the failed file aside and records on into a new one,
without a remount; nothing it recorded meanwhile is lost."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swfs.evidence.access import DB_NAME
from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]


@pytest.fixture
def ws() -> Iterator[Mount]:
    def populate(src: Path) -> None:
        for i in range(3):
            (src / f"doc{i}.txt").write_text(f"document {i}\n")

    with workspace(populate=populate) as m:
        yield m


def journal_state(m: Mount) -> dict[str, object]:
    return dict(json.loads(swfs("status", m.mnt, "--json").stdout)["journal"])


def poll(what: str, fn: Callable[[], bool], bound: float = 120) -> None:
    deadline = time.monotonic() + bound
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.2)


def read_through(m: Mount, name: str) -> None:
    subprocess.run(["cat", str(m.mnt / name)], check=True, capture_output=True, timeout=60)


def logged_reads(m: Mount) -> set[str]:
    out = swfs("log", m.mnt, "--json", "--kind", "read").stdout
    return {json.loads(line)["path"] for line in out.splitlines()}


def damage_by_removing(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)


def damage_by_overwriting(db: Path) -> None:
    # In place (the same inode): only the database's own errors can tell.
    with open(db, "r+b") as f:
        f.write(os.urandom(64 * 1024))
    Path(str(db) + "-wal").unlink(missing_ok=True)
    Path(str(db) + "-shm").unlink(missing_ok=True)


@pytest.mark.parametrize("damage", [damage_by_removing, damage_by_overwriting])
def test_a_failed_journal_is_started_afresh_and_said(
    ws: Mount, damage: Callable[[Path], None]
) -> None:
    db = ws.src / ".swfs" / DB_NAME
    read_through(ws, "doc0.txt")
    poll("the first read is logged", lambda: "doc0.txt" in logged_reads(ws))
    assert journal_state(ws) == {"state": "ok"}

    damage(db)
    # Keep reading until the journal thread meets the damage (a removal at
    # its next flush; an overwrite when it next writes the file).
    n = 0

    def reopened() -> bool:
        nonlocal n
        n += 1
        read_through(ws, f"doc{1 + n % 2}.txt")
        return journal_state(ws)["state"] == "reopened"

    poll("the journal is started afresh", reopened)
    state = journal_state(ws)
    assert state["reason"]
    status = swfs("status", ws.mnt).stdout
    assert "access journal: started afresh" in status
    if damage is damage_by_overwriting:
        kept = ws.src / ".swfs" / str(state["kept"])
        assert kept.exists()  # the failed file is set aside, never deleted
        assert "kept as" in status
    # Recording goes on, into the new file, without a remount.
    read_through(ws, "doc2.txt")
    poll("reads after the reopen are logged", lambda: "doc2.txt" in logged_reads(ws))
    assert "access journal failed" in ws.log()

    check = swfs("check", ws.mnt, check=False)
    assert check.returncode == 1
    assert "the access journal failed" in check.stdout + check.stderr
    swfs("check", ws.mnt, "--repair")  # seen: check is clean again
    assert swfs("check", ws.mnt, check=False).returncode == 0
    assert journal_state(ws) == {"state": "ok"}
