"""A file whose name is not UTF-8 (``b"caf\\xe9.txt"``) through a real mount:
the daemon's indexer takes it (it used to log "indexing failed: surrogates
not allowed" and drop the batch), ``.search/`` and ``swfs search`` find it,
and the hit names it as the access journal does (``caf\\xe9.txt``), whether
the file was there before the mount or written through it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.mountutil import SWFS, needs_fuse, swfs, wait_until, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

BEFORE = b"caf\xe9.txt"  # Latin-1 bytes: not UTF-8
AFTER = b"cr\xe8me.txt"


def search_file(mnt: Path, query: str) -> str:
    # A hit list is UTF-8 text: a name that is not UTF-8 is escaped in it.
    return (mnt / ".search" / query).read_bytes().decode("utf-8")


def hit_paths(text: str) -> list[str]:
    return [line.split("\t")[0] for line in text.splitlines() if not line.startswith("#")]


def test_names_that_are_not_utf8_are_indexed_and_found() -> None:
    def populate(src: Path) -> None:
        (src / os.fsdecode(BEFORE)).write_text("The espresso machine is descaled on Fridays.\n")
        (src / "plain.txt").write_text("Nothing about coffee here.\n")

    with workspace(populate=populate) as m:
        wait_until(
            "the hit for the name there before the mount",
            lambda: (
                hit_paths(search_file(m.mnt, "descaled")) == [".parsed/caf\\xe9.txt/content.txt"]
            ),
        )
        # Written through the mount: the daemon's indexer thread takes it.
        with open(os.path.join(os.fsencode(m.mnt), AFTER), "w") as f:
            f.write("Whipped cream on the descaled espresso.\n")
        swfs("sync", m.mnt)
        wait_until(
            "the hit for the name written through the mount",
            lambda: ".parsed/cr\\xe8me.txt/content.txt" in hit_paths(search_file(m.mnt, "whipped")),
        )
        both = hit_paths(search_file(m.mnt, "descaled"))
        assert sorted(both) == [
            ".parsed/caf\\xe9.txt/content.txt",
            ".parsed/cr\\xe8me.txt/content.txt",
        ]
        # The unit is there under the file's own bytes.
        unit = os.path.join(os.fsencode(m.mnt), b".parsed", BEFORE, b"content.txt")
        with open(unit, "rb") as f:
            assert b"descaled" in f.read()
        # swfs search through the daemon, text and JSON.
        out = subprocess.run(
            [SWFS, "search", str(m.mnt), "whipped"], capture_output=True, timeout=60, check=False
        )
        assert out.returncode == 0, out.stderr
        assert (
            out.stdout.decode("utf-8")
            .splitlines()[1]
            .startswith(".parsed/cr\\xe8me.txt/content.txt\t")
        )
        data = json.loads(swfs("search", m.mnt, "descaled", "--json").stdout)
        assert {h["source"] for h in data["hits"]} == {"caf\\xe9.txt", "cr\\xe8me.txt"}
        # The journal names the file the same way.
        with open(os.path.join(os.fsencode(m.mnt), BEFORE), "rb") as f:
            f.read()
        swfs("sync", m.mnt)

        def logged() -> bool:
            lines = swfs("log", m.mnt, "--json", "--kind", "read").stdout.splitlines()
            return any(json.loads(line).get("path") == "caf\\xe9.txt" for line in lines)

        wait_until("the read in the journal", logged)
        assert "indexing failed" not in m.log()
        assert "surrogates not allowed" not in m.log()
