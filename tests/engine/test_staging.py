"""The staged layer without FUSE (swfs.staging): resolution through
whiteouts, copy-up, commit (whole, per path, interrupted) and discard, on
the real engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from swfs.engine import Engine
from swfs.history import staging


@pytest.fixture
def ws(tmp_path: Path):  # type: ignore[no-untyped-def]
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")
    (src / "d").mkdir()
    (src / "d" / "x.txt").write_text("x\n")
    (src / "d" / "y.txt").write_text("y\n")
    staging.Staging.activate(src, src / ".swfs")
    with Engine.open(src, src / ".swfs") as engine:
        engine.scan()
        yield engine


def write_upper(st: staging.Staging, rel: str, text: str) -> None:
    st.copy_up(rel) if st.in_lower(rel) else st.copy_up(rel.rpartition("/")[0])
    Path(st.upath(rel)).write_text(text)


def test_resolution_and_whiteouts(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    assert st.resolve("a.txt") == os.path.join(ws.src, "a.txt")
    write_upper(st, "a.txt", "A\n")
    assert st.resolve("a.txt") == st.upath("a.txt")
    assert Path(ws.workspace.abspath("a.txt")).read_text() == "A\n"
    assert (ws.src / "a.txt").read_text() == "a\n"
    # A whited-out directory hides everything below it, also once made again.
    st.whiteout("d/x.txt")
    st.whiteout("d/y.txt")
    st.whiteout("d")
    assert st.resolve("d/x.txt") is None
    assert not os.path.exists(ws.workspace.abspath("d/x.txt"))
    os.makedirs(st.upath("d"), exist_ok=True)
    Path(st.upath("d/z.txt")).write_text("z\n")
    assert sorted(st.names("d")) == ["z.txt"]
    assert sorted(r for r, _ in staging.walk(st, frozenset({".swfs"}))) == ["a.txt", "d/z.txt"]
    assert {c.path: c.status for c in st.changes()} == {
        "a.txt": "modified",
        "d": "replaced",
        "d/x.txt": "deleted",
        "d/y.txt": "deleted",
        "d/z.txt": "added",
    }
    st.commit()
    assert sorted(os.listdir(ws.src / "d")) == ["z.txt"]
    assert (ws.src / "a.txt").read_text() == "A\n"
    assert st.changes() == []
    assert st.whiteouts == set()


def test_copy_up_keeps_identity_and_metadata(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    os.chmod(ws.src / "d" / "x.txt", 0o640)
    lower = os.lstat(ws.src / "d" / "x.txt")
    st.copy_up("d/x.txt")
    upper = os.lstat(st.upath("d/x.txt"))
    assert upper.st_ino != lower.st_ino
    assert st.identity(upper) == (lower.st_dev, lower.st_ino)
    assert upper.st_mode == lower.st_mode
    assert upper.st_mtime_ns == lower.st_mtime_ns
    assert Path(st.upath("d/x.txt")).read_text() == "x\n"
    # Reloaded from the state file, as a restarted daemon sees it.
    again = staging.Staging(ws.src, ws.store_dir)
    assert again.identity(upper) == (lower.st_dev, lower.st_ino)
    with pytest.raises(FileNotFoundError):
        st.copy_up("nope.txt")


def test_discard_per_path_and_whole(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    write_upper(st, "a.txt", "A\n")
    write_upper(st, "d/new.txt", "new\n")
    st.whiteout("d/x.txt")
    ws.scan()
    assert ws.workspace.get_record("d/x.txt") is None
    assert staging.discard_ws(ws.workspace, ["d/x.txt"])["discarded"] == ["d/x.txt"]
    assert ws.workspace.get_record("d/x.txt") is not None  # back, and the engine knows
    assert sorted(c.path for c in st.changes()) == ["a.txt", "d/new.txt"]
    staging.discard_ws(ws.workspace)
    assert st.changes() == []
    assert not os.path.exists(st.upath("d"))
    assert Path(ws.workspace.abspath("a.txt")).read_text() == "a\n"
    assert ws.workspace.get_record("d/new.txt") is None


def test_interrupted_commit_is_reported_and_finished(ws: Engine) -> None:
    st = ws.staging
    assert st is not None
    write_upper(st, "a.txt", "A\n")
    write_upper(st, "d/x.txt", "X\n")
    # What a crash leaves: the intent log, one file renamed into SRC, a
    # temp file of the next one, both upper copies still there.
    (st.dir / staging.INTENT).write_text(json.dumps({"paths": None, "todo": ["a.txt", "d/x.txt"]}))
    (ws.src / "a.txt").write_text("A\n")
    (ws.src / "d" / ".x.txt.swfs-commit").write_text("X")
    assert dict(staging.committed_report(st)) == {"a.txt": "committed", "d/x.txt": "staged"}
    assert staging.recover_ws(ws.workspace) is not None
    assert (ws.src / "d" / "x.txt").read_text() == "X\n"
    assert not (ws.src / "d" / ".x.txt.swfs-commit").exists()
    assert st.intent() is None
    assert staging.committed_report(st) == []
    assert st.changes() == []
