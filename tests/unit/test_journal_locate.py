"""The journal counts a read's lines in the bytes the mount served: with
``locate`` (a ``--staged`` mount's resolution), the staged copy, not SRC's
file of the same name."""

from __future__ import annotations

import os
from pathlib import Path

from swfs.evidence import access as jmod


def _read_lines(tmp_path: Path, locate: bool, reads: list[tuple[int, int]]) -> object:
    src, layer, store = tmp_path / "src", tmp_path / "upper", tmp_path / "store"
    for d in (src, layer, store):
        d.mkdir(parents=True, exist_ok=True)
    (src / "notes.txt").write_text("src line 1\nsrc line 2\n")
    staged = "".join(f"staged line {i}\n" for i in range(1, 11)).encode()
    (layer / "notes.txt").write_bytes(staged)
    j = jmod.Journal(
        store,
        file_hash=lambda rel: None,
        src=src,
        locate=(lambda rel: str(layer / rel)) if locate else None,
    )
    try:
        j.on_open(1, os.getpid(), "notes.txt")
        for off, size in reads:
            data = staged[off : off + size]
            j.on_read(1, off, len(data), data)
        j.on_close(1)
        j.flush()
        con = jmod.open_readonly(store)
        try:
            (ev,) = [e for e in jmod.iter_events(con, kind="read") if e["path"] == "notes.txt"]
        finally:
            con.close()
        return ev.get("lines")
    finally:
        j.close()


def test_lines_of_the_located_file(tmp_path: Path) -> None:
    whole = [(0, 4096)]
    middle = [(14 * 6, 14 * 2)]  # "staged line N\n" is 14 bytes up to N=9: lines 7-8
    assert _read_lines(tmp_path / "a", True, whole) == [1, 10]
    assert _read_lines(tmp_path / "b", True, middle) == [7, 8]
    # Without it, SRC's bytes under the same name: the wrong lines.
    assert _read_lines(tmp_path / "c", False, whole) == [1, 2]
    assert _read_lines(tmp_path / "d", False, middle) is None
