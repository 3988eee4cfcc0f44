"""Native requests answered at once, without a coroutine (``mountd.reply``),
through a real mount with our pyfuse3, which replies at once to a handler
that returns its reply:

* 2,000 opens and closes of warm native files reach the daemon as 2,000
  OPENs and 2,000 RELEASEs and nothing else, and once the (background)
  RELEASEs are answered the daemon holds no more descriptors than before:
  a release answered in pyfuse3's callback still closes its file;
* a cold walk (LOOKUPs) shows every file as the native tree has it: inode
  number, size, mode, times;
* a file changed behind the mount is read as it is now, and one removed
  behind it fails with ENOENT;
* a shell that creates 200 small files through the mount has each CREATE
  and FLUSH answered in the callback, each file recorded with its bytes'
  hash at its close, and no descriptor left open.

The counts come from the daemon's SIGUSR1 dump (``mountd.reqcount``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import blake3
import pytest

from mountd import binding
from tests.mounted.test_walk_requests import _delta, _poll, _released
from tests.mountutil import needs_fuse, workspace

pytestmark = [
    pytest.mark.mount,
    needs_fuse,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not binding.FORK, reason="stock pyfuse3 awaits every handler (vendor/pyfuse3 does not)"
    ),
]

FOLDERS = 4
PER_FOLDER = 25


def _populate(src: Path) -> None:
    for f in range(FOLDERS):
        (src / f"dir{f}").mkdir()
        for i in range(PER_FOLDER):
            (src / f"dir{f}" / f"f{i:02}.txt").write_text(f"folder {f} file {i}\n" * (i + 1))


def _files() -> list[str]:
    return [f"dir{f}/f{i:02}.txt" for f in range(FOLDERS) for i in range(PER_FOLDER)]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_open_close_pairs_are_answered_and_close_their_descriptors() -> None:
    with workspace(populate=_populate) as m:
        paths = [str(m.mnt / rel) for rel in _files()]
        for _ in range(2):  # warm: entries, attributes, pages
            for p in paths:
                with open(p, "rb") as f:
                    f.read()
        # The warm pass's last RELEASEs go in the background too: take the
        # baseline once every OPEN so far has its RELEASE.
        before = _released(m)
        base = _fds(m.proc.pid)
        pairs = 0
        for _ in range(20):
            for p in paths:
                os.close(os.open(p, os.O_RDONLY))
                pairs += 1
        assert pairs == 2_000
        # RELEASE is sent in the background: wait for the last to be answered.
        after = _released(m)
        _poll(lambda: _fds(m.proc.pid) <= base + 4, f"descriptors back to {base}")
        got = _delta(before, after)
        assert got["open"] == got["release"] == pairs, got
        for op in ("lookup", "getattr", "read", "flush"):
            assert got.get(op, 0) == 0, (op, got)
        assert m.alive()


def test_a_cold_walk_shows_the_native_tree() -> None:
    with workspace(populate=_populate) as m:
        for rel in _files():
            mine, native = os.stat(m.mnt / rel), os.stat(m.src / rel)
            assert (mine.st_ino, mine.st_size, mine.st_mode) == (
                native.st_ino,
                native.st_size,
                native.st_mode,
            ), rel
            assert mine.st_mtime_ns == native.st_mtime_ns, rel
        assert (m.mnt / "dir3" / "f07.txt").read_text() == "folder 3 file 7\n" * 8
        with pytest.raises(FileNotFoundError):
            os.stat(m.mnt / "dir3" / "absent.txt")


def test_changes_behind_the_mount_are_served() -> None:
    with workspace(populate=_populate) as m:
        rel = "dir1/f03.txt"
        assert (m.mnt / rel).read_text() == "folder 1 file 3\n" * 4
        (m.src / rel).write_text("rewritten behind the mount, longer than before\n")
        _poll(
            lambda: (m.mnt / rel).read_text() == "rewritten behind the mount, longer than before\n",
            "the new bytes through the mount",
        )
        (m.src / "dir2" / "f04.txt").unlink()

        def gone() -> bool:
            try:
                os.close(os.open(m.mnt / "dir2" / "f04.txt", os.O_RDONLY))
            except FileNotFoundError:
                return True
            return False

        _poll(gone, "ENOENT for a file removed behind the mount")
        assert m.alive()


def test_a_shell_creating_files_is_answered_in_the_callback_and_recorded() -> None:
    with workspace(populate=_populate) as m:
        out = m.mnt / "out"
        out.mkdir()
        before = _released(m)
        base = _fds(m.proc.pid)
        script = 'for i in $(seq 1 200); do printf "line %s\\n" "$i" > "f$i.dat"; done'
        subprocess.run(["sh", "-c", script], cwd=out, check=True, timeout=120)
        got = _delta(before, _released(m))
        _poll(lambda: _fds(m.proc.pid) <= base + 4, f"descriptors back to {base}")
        assert got["create"] == got["release"] == got["nowait_create"] == 200, got
        # The shell's redirect dups the new fd onto its stdout and closes
        # both: a FLUSH for each, the first of them with nothing to record
        # (answered here always), the second with the file's record (here
        # unless another thread holds the store's writer lock: a worker
        # thread then).
        assert got["flush"] == 400, got
        assert 200 < got["nowait_flush"] <= 400, got
        for i in (1, 77, 200):
            f = out / f"f{i}.dat"
            data = f"line {i}\n".encode()
            assert f.read_bytes() == data
            assert os.getxattr(f, "user.sw.hash").decode() == blake3.blake3(data).hexdigest()
        assert m.alive()
