"""Line ranges counted from the bytes as the loop serves them say what
``text_lines`` says from the file, read patterns and file kinds alike."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from swfs.evidence import access as jmod


def _lines(
    tmp_path: Path, name: str, body: bytes, reads: list[tuple[int, int]]
) -> tuple[list[int] | None, int]:
    """The stored "lines" of a read event whose handle read ``reads``
    ((offset, size) each, served the bytes the file has there)."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    store = tmp_path / "store"
    store.mkdir(exist_ok=True)
    (src / name).write_bytes(body)
    j = jmod.Journal(store, file_hash=lambda rel: None, src=src)
    try:
        j.on_open(1, os.getpid(), name)
        for off, size in reads:
            data = body[off : off + size]
            j.on_read(1, off, len(data), data)
        event = j._open[1].event
        assert event is not None
        j.on_close(1)
        j.flush()
        con = jmod.open_readonly(store)
        try:
            (ev,) = [e for e in jmod.iter_events(con, kind="read") if e["path"] == name]
        finally:
            con.close()
        ranges = ev.get("ranges") or []
        expected = jmod.text_lines(src / name, ranges) if ranges else None
        assert ev.get("lines") == expected
        lines = ev.get("lines")
        assert lines is None or isinstance(lines, list)
        return lines, event.newlines
    finally:
        j.close()


def _text(n: int, *, trailing: bool = True) -> bytes:
    body = "".join(f"row {i},{i * 7}\n" for i in range(1, n + 1)).encode()
    return body if trailing else body[:-1]


@pytest.mark.parametrize("chunk", [1, 7, 4096, 131072])
def test_whole_text_file_read_in_order_is_counted(tmp_path: Path, chunk: int) -> None:
    body = _text(3000)
    reads = [(off, chunk) for off in range(0, len(body), chunk)]
    lines, counted = _lines(tmp_path, "a.csv", body, reads)
    assert lines == [1, 3000]
    assert counted >= 0  # counted on the way, the file not read again


def test_no_trailing_newline_and_a_partial_read(tmp_path: Path) -> None:
    body = _text(500, trailing=False)
    assert _lines(tmp_path, "a.txt", body, [(0, len(body))])[0] == [1, 500]
    # The first 10,000 bytes only (the probe read whole): lines up to there.
    lines, counted = _lines(tmp_path, "b.txt", body, [(0, 10_000)])
    assert counted >= 0
    assert lines is not None
    assert lines[0] == 1


def test_out_of_order_reads_fall_back_to_the_file(tmp_path: Path) -> None:
    body = _text(4000)
    lines, counted = _lines(tmp_path, "a.txt", body, [(8192, 8192), (0, 8192)])
    assert counted == jmod.UNCOUNTED
    assert lines == jmod.text_lines(tmp_path / "src" / "a.txt", [[0, 16384]])
    lines, _ = _lines(tmp_path, "b.txt", body, [(20_000, 100)])
    assert lines is not None
    assert lines[0] > 1


def test_a_short_read_of_a_long_file_checks_the_probe_in_the_file(tmp_path: Path) -> None:
    body = _text(100) + b"\0" + _text(3000)  # a NUL past the bytes read, in the probe
    lines, counted = _lines(tmp_path, "a.dat", body, [(0, 100)])
    assert counted >= 0
    assert lines is None


def test_binary_file_has_no_lines(tmp_path: Path) -> None:
    rng = random.Random(5)
    body = b"PK\x03\x04\0\0" + bytes(rng.randrange(256) for _ in range(50_000))
    lines, counted = _lines(tmp_path, "a.xlsx", body, [(0, 4096), (4096, 65536)])
    assert (lines, counted) == (None, jmod.BINARY)


def test_empty_and_one_byte_files(tmp_path: Path) -> None:
    assert _lines(tmp_path, "nl.txt", b"\n", [(0, 1)])[0] == [1, 1]
    assert _lines(tmp_path, "x.txt", b"x", [(0, 1)])[0] == [1, 1]
