"""The daemon owns its search index (issue 37), with the real CLI against a
real mount:

- ``swfs tab show SRC`` (the workspace folder, not the mount point) beside
  a mounted workspace whose tab has requirements leaves the index alone:
  its WAL files stay, new files are indexed, ``.search/`` and ``swfs
  search`` find them.
- An index removed or corrupted under the running daemon is logged, shown
  by ``swfs status`` and ``swfs check`` while it is rebuilt, answered as
  unavailable (exit 3) rather than "no hits", and rebuilt without a remount.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(300), needs_fuse]

DB = "search.sqlite"


def poll(cond: Callable[[], object], what: str, bound: float = 120.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def populate(src: Path) -> None:
    (src / "north.txt").write_text("Revenue in the north territory grew by a third.\n")
    (src / "south.txt").write_text("The south office moved to the harbour.\n")


def found(m: Mount, word: str, rel: str) -> bool:
    text = (m.mnt / ".search" / word).read_text(encoding="utf-8")
    return f".parsed/{rel}/" in text


def store(m: Mount) -> Path:
    return m.src / ".swfs"


def test_tab_show_on_src_leaves_the_daemons_index_alone() -> None:
    with workspace(populate=populate) as m:
        poll(lambda: found(m, "territory", "north.txt"), "the first index")
        wal, shm = store(m) / (DB + "-wal"), store(m) / (DB + "-shm")
        assert wal.exists()
        assert shm.exists()
        with open(m.mnt / ".tab" / "requirements.md", "a", encoding="utf-8") as f:
            f.write("- [ ] find the north territory revenue\n")
        for _ in range(3):
            out = swfs("tab", "show", m.src)
            assert "north territory" in out.stdout
            out = swfs("search", m.src, "harbour")
            assert "south.txt" in out.stdout
        assert wal.exists(), "the CLI removed the daemon's WAL file"
        assert shm.exists(), "the CLI removed the daemon's shared-memory file"
        (m.mnt / "east.txt").write_text("The east warehouse stocks lanterns.\n")
        poll(lambda: found(m, "lanterns", "east.txt"), "a new file indexed after the CLI calls")
        out = swfs("search", m.src, "lanterns")
        assert "east.txt" in out.stdout
        assert "disk I/O error" not in m.log()


def status_search(m: Mount) -> dict[str, object]:
    info = json.loads(swfs("status", m.mnt, "--json").stdout)
    search = info["search"]
    assert isinstance(search, dict)
    return search


@pytest.mark.parametrize("damage", ["wal files removed", "database overwritten"])
def test_an_index_broken_under_the_daemon_is_shown_and_rebuilt(damage: str) -> None:
    with workspace(populate=populate) as m:
        poll(lambda: found(m, "territory", "north.txt"), "the first index")
        assert status_search(m)["state"] == "ok"
        db = store(m) / DB
        if damage == "wal files removed":
            for suffix in ("-wal", "-shm"):
                os.unlink(str(db) + suffix)
        else:
            with open(db, "r+b") as f:  # its first page, header included
                f.write(b"\xff" * 4096)
        seen_states: set[str] = set()
        answers: set[str] = set()

        def healed() -> bool:
            seen_states.add(str(status_search(m)["state"]))
            (m.mnt / "west.txt").write_text("The west depot keeps spare lanterns.\n")
            text = (m.mnt / ".search" / "territory").read_text(encoding="utf-8")
            proc = swfs("search", m.mnt, "territory", check=False)
            answers.add(f"{proc.returncode}")
            if "no hits" in text or proc.returncode == 1:
                raise AssertionError(f"a broken index answered as empty: {text!r}")
            return ".parsed/north.txt/" in text and proc.returncode == 0

        try:
            poll(healed, "the index rebuilt", bound=240)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: states {seen_states}, exits {answers}; daemon log: {m.log()[-3000:]}"
            ) from None
        poll(lambda: found(m, "lanterns", "west.txt"), "a new file indexed after the rebuild")
        assert status_search(m)["state"] == "ok"
        log = m.log()
        assert "search index unavailable" in log
        assert "search index rebuilt" in log
        out = swfs("check", m.mnt)
        assert "search" not in out.stdout
        print(f"\n{damage}: states seen {sorted(seen_states)}, swfs search exits {answers}")
