"""The engine's own listings leave a directory's access time alone: a user
who set it (touch -a, utimens) must see what they set, not the time of the
daemon's last scan (relatime updates atime when it is older than mtime)."""

from __future__ import annotations

import os
from pathlib import Path

from swfs.engine import Engine
from swfs.fsutil import scan_dir


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
        assert eng.store.get_file("a/b/g.txt") is not None
    for d, atime in times.items():
        assert os.stat(d).st_atime_ns == atime, d
