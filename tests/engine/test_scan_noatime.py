"""The engine's own listings leave a directory's access time alone: a user
who set it (touch -a, utimens) must see what they set, not the time of the
daemon's last scan (relatime updates atime when it is older than mtime)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.store.fsutil import scan_dir


def _old_atime(d: Path) -> int:
    st = os.stat(d)
    atime = st.st_mtime_ns - 10**12  # older than mtime: relatime would update it
    os.utime(d, ns=(atime, st.st_mtime_ns))
    return atime


def test_scan_dir_keeps_the_access_time(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "f.txt").write_text("x\n")
    atime = _old_atime(d)
    with scan_dir(d) as it:
        assert [e.name for e in it] == ["f.txt"]
    assert os.stat(d).st_atime_ns == atime
    with os.scandir(d) as it:  # the plain listing is what moved it
        list(it)
    assert os.stat(d).st_atime_ns != atime


def test_a_scan_keeps_every_directory_s_access_time(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("x\n")
    with Engine.open(src) as eng:
        eng.scan()
        times = {d: _old_atime(d) for d in (src / "a", src / "a" / "b")}
        (src / "a" / "b" / "g.txt").write_text("y\n")
        times[src / "a" / "b"] = _old_atime(src / "a" / "b")
        eng.scan()
        assert eng.workspace.store.get_file("a/b/g.txt") is not None
    for d, atime in times.items():
        assert os.stat(d).st_atime_ns == atime, d


def _file_with_old_atime(tmp_path: Path, name: str, text: str) -> tuple[Path, int]:
    f = tmp_path / name
    f.write_text(text)
    st = os.stat(f)
    atime = 1_000_000_001_000_000_123  # years before mtime: relatime would move it
    os.utime(f, ns=(atime, st.st_mtime_ns))
    return f, atime


def test_reading_a_file_plainly_moves_its_access_time(tmp_path: Path) -> None:
    """The premise of the tests below: this filesystem updates atime on read."""
    f, atime = _file_with_old_atime(tmp_path, "plain.txt", "x\n")
    f.read_bytes()
    assert os.stat(f).st_atime_ns != atime


def test_the_engine_s_reads_of_a_file_keep_its_access_time(tmp_path: Path) -> None:
    """A parse, the journal's line count, a hash and a preserve read a user's
    file in the background, racing the user's own utimens: none may move the
    access time the user set (seen as a flaky utimens in the conformance test)."""
    from parsers._base import ParseOptions
    from swfs.evidence.access import text_lines
    from swfs.store.blobs import BlobStore
    from swfs.store.fsutil import hash_file
    from swfs.views.parsework import parse_job

    f, atime = _file_with_old_atime(tmp_path, "notes.txt", "alpha\nbeta\ngamma\n")
    outcome = parse_job(str(f), "notes.txt", ParseOptions())
    assert outcome.hash == hash_file(f, mmap=False)
    assert text_lines(f, [[0, 8]]) == [1, 2]
    blobs = BlobStore(tmp_path / "blobs")
    assert blobs.link_in(f) == outcome.hash
    assert os.stat(f).st_atime_ns == atime


def test_a_parse_without_a_memory_file_parses_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """memfd refused (a sandbox, no memory): the parse still succeeds, from
    the file itself."""
    from parsers._base import ParseOptions
    from swfs.views import parsework

    def refuse(*_: object) -> int:
        raise OSError(errno.ENOSYS, "memfd_create refused")

    monkeypatch.setattr(parsework.os, "memfd_create", refuse)
    f = tmp_path / "notes.txt"
    f.write_text("alpha\nbeta\n")
    outcome = parsework.parse_job(str(f), "notes.txt", ParseOptions())
    assert outcome.status == parsework.OK
    assert "beta" in outcome.units[0][2]
