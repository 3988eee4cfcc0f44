"""The daemon runs with umask 077: what it makes in its store (the
databases, the search index, the render cache, its log) is closed to
others, while a file or folder made through the mount gets exactly the
mode its caller asked for (the caller's umask applied by the kernel, none
of the daemon's)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests import docgen
from tests.mountutil import needs_fuse, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]


def _populate(src: Path) -> None:
    (src / "report.pdf").write_bytes(docgen.pdf_bytes(2, fact_page=1, fact="A planted fact."))
    (src / "notes.txt").write_text("zebra notes\n")
    (src / "open").mkdir()
    (src / "open").chmod(0o777)


def _as_user(ids: tuple[int, int], script: str, cwd: Path) -> None:
    proc = subprocess.run(
        ["sh", "-c", script],
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=False,
        user=ids[0],
        group=ids[1],
        extra_groups=[],
    )
    assert proc.returncode == 0, proc.stderr


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


def test_the_store_is_private_and_the_mount_keeps_requested_modes() -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    with workspace(populate=_populate) as m:
        with open(f"/proc/{m.proc.pid}/status", encoding="ascii") as f:
            umask = next(line.split()[1] for line in f if line.startswith("Umask:"))
        assert umask == "0077"

        # Through the mount, as an ordinary user: the modes asked for.
        work = m.mnt / "open"
        _as_user(ids, "umask 022; touch f644; mkdir d755", work)
        fd_script = (
            "import os; os.umask(0); "
            "os.close(os.open('f644b', os.O_CREAT | os.O_WRONLY, 0o644)); "
            "os.close(os.open('f666', os.O_CREAT | os.O_WRONLY, 0o666)); "
            "os.mkdir('d777', 0o777); os.mkfifo('p666', 0o666); "
            "os.umask(0o027); os.mkfifo('p640', 0o666)"
        )
        _as_user(ids, f'python3 -c "{fd_script}"', work)
        src = m.src / "open"
        expected = {
            "f644": 0o644,
            "f644b": 0o644,
            "d755": 0o755,
            "f666": 0o666,
            "d777": 0o777,
            "p666": 0o666,
            "p640": 0o640,
        }
        assert {name: _mode(src / name) for name in expected} == expected
        assert {name: _mode(work / name) for name in expected} == expected
        assert (src / "f644").stat().st_uid == ids[0]

        # The daemon's own: make it write its caches (a render, the search
        # index), then look at everything it has in the store.
        assert (m.mnt / ".render" / "report.pdf" / "page-0001.png").read_bytes()[:4] == b"\x89PNG"
        assert "notes.txt" in (m.mnt / ".search" / "zebra").read_text()
        swfs("sync", m.mnt)
        store = m.src / ".swfs"
        assert _mode(store) == 0o700
        render = store / "render"
        assert render.is_dir()
        open_to_others = []
        for dirpath, dirnames, filenames in os.walk(store):
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if p.is_socket() or p.is_symlink():
                    continue
                if _mode(p) & 0o077:
                    open_to_others.append(f"{p.relative_to(store)} {oct(_mode(p))}")
        assert open_to_others == []


def test_a_staged_commit_keeps_the_modes_of_what_it_writes_back() -> None:
    with workspace(["--staged"], populate=_populate) as m:
        work = m.mnt / "open"
        script = (
            "import os; os.umask(0); os.mkfifo('p644', 0o644); "
            "os.close(os.open('f664', os.O_CREAT | os.O_WRONLY, 0o664)); os.mkdir('d775', 0o775)"
        )
        subprocess.run(["python3", "-c", script], cwd=work, check=True, timeout=60)
        swfs("commit", m.mnt)
        src = m.src / "open"
        expected = {"p644": 0o644, "f664": 0o664, "d775": 0o775}
        assert {name: _mode(src / name) for name in expected} == expected
        assert stat.S_ISFIFO((src / "p644").lstat().st_mode)
