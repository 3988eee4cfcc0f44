"""The tab and a file whose name is not UTF-8 (``b"terr\\xe9.txt"``): listed
but never opened, it is in ``unopened.md`` under the name the journal and
search give it (``terr\\xe9.txt``), ranked by the open requirement it
matches; once read, it is the requirement's evidence."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.mountutil import needs_fuse, swfs, wait_until, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

LATIN1 = b"terr\xe9.txt"  # Latin-1 bytes: not UTF-8
SHOWN = "data/terr\\xe9.txt"


def _populate(src: Path) -> None:
    (src / "data").mkdir()
    (src / "data" / os.fsdecode(LATIN1)).write_text(
        "Quarterly revenue by territory: the North territory led all regions.\n"
    )
    (src / "data" / "aardvark.txt").write_text("Notes on burrowing animals of the savanna.\n")


def _tab(mnt: Path, name: str) -> str:
    return (mnt / ".tab" / name).read_bytes().decode("utf-8")


def _ranked(mnt: Path) -> list[str]:
    lines = _tab(mnt, "unopened.md").splitlines()
    return [ln[2:].split("  ")[0] for ln in lines if ln.startswith("- ")]


def test_a_name_that_is_not_utf8_is_ranked_in_unopened_and_read_as_evidence() -> None:
    with workspace(populate=_populate) as m:
        swfs("tab", "new", m.mnt)
        with open(m.mnt / ".tab" / "requirements.md", "a") as f:
            f.write("- [ ] Q3 revenue of the North territory\n")
        subprocess.run(["ls", "data"], cwd=m.mnt, check=True, timeout=60, capture_output=True)
        wait_until("the Latin-1 name ranked first", lambda: _ranked(m.mnt)[:1] == [SHOWN])
        assert set(_ranked(m.mnt)) == {SHOWN, "data/aardvark.txt"}
        assert f"{SHOWN}#" in _tab(m.mnt, "unopened.md")  # with its best snippet's locator
        with open(os.path.join(os.fsencode(m.mnt), b"data", LATIN1), "rb") as f:
            assert b"North territory" in f.read()
        wait_until("the read file no longer unopened", lambda: SHOWN not in _ranked(m.mnt))
        tab = _tab(m.mnt, "TAB.md")
        assert f"read:\n  - {SHOWN}#" in tab, tab
