"""History keeps its permissions (issue #35), through real mounts, with an
unprivileged attacker (``TEST_USER``) and a file owner who is not root.

* A 0600 file rewritten, then made 0644: its old version in ``.versions``,
  its baseline diff in ``.review/<path>.diff`` and ``ALL.diff`` stay closed
  to others (they were readable by everyone before).
* A stale ``.parsed`` view (its file rewritten, then opened; the re-parse
  held back) shows the old text only to who could read it then.
* A world (``swfs mount --at``) keeps a 0700 folder closed, natively and in
  ``.parsed``: one still there, and one deleted after the snapshot (it came
  back 0755 before).

Each check reads as the attacker (the secret must not be seen) and as the
owner (it must be), so a check that reads nothing cannot pass.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, run_as, start_mount, swfs, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(300), needs_fuse]

OLD_SECRET = b"PASSWORD=hunter2-old-private"
KEPT_SECRET = b"KEPT-FOLDER-MARKER-0f21"
GONE_SECRET = b"GONE-FOLDER-MARKER-7c55"
STALE_SECRET = b"STALE-VIEW-MARKER-3e90"
# The file owner: any uid and gid that are neither root nor the attacker's
# (the kernel needs no passwd entry for them).
OWNER_ID = 47035
SAW = errno.EDOM  # "read it, and the secret was there"


@dataclass
class History:
    live: Mount
    attacker: tuple[int, int]
    owner: tuple[int, int]
    world: Mount | None = None


def _ids() -> tuple[tuple[int, int], tuple[int, int]]:
    from tests.mountutil import unprivileged_ids

    attacker = unprivileged_ids()
    if attacker is None:
        pytest.skip("cannot create an unprivileged user here")
    if OWNER_ID in attacker:
        pytest.skip(f"the test user has id {OWNER_ID}")
    return attacker, (OWNER_ID, OWNER_ID)


def _populate_file(src: Path) -> None:
    (src / "secret.env").write_bytes(OLD_SECRET + b"\n")
    (src / "public.txt").write_text("public figures\n")
    for p in (src, src / "secret.env", src / "public.txt"):
        os.chown(p, OWNER_ID, OWNER_ID)
    os.chmod(src / "secret.env", 0o600)


def _open_the_secret(mnt: Path) -> None:
    """Rewrite the 0600 file through the mount, then open it to everyone."""
    (mnt / "secret.env").write_bytes(b"PASSWORD=rotated-and-public\n")
    os.chmod(mnt / "secret.env", 0o644)
    swfs("sync", mnt)


@pytest.fixture(scope="module")
def hist() -> Iterator[History]:
    """A workspace whose one 0600 file was rewritten, then made 0644."""
    attacker, owner = _ids()
    with workspace(populate=_populate_file) as live:
        _open_the_secret(live.mnt)
        yield History(live, attacker, owner)


def _populate_folders(src: Path) -> None:
    _populate_file(src)
    for name, secret in (("kept", KEPT_SECRET), ("gone", GONE_SECRET)):
        (src / name).mkdir()
        (src / name / "plan.txt").write_bytes(secret + b" in a 0700 folder\n")
        os.chmod(src / name / "plan.txt", 0o644)
        os.chown(src / name / "plan.txt", OWNER_ID, OWNER_ID)
        os.chown(src / name, OWNER_ID, OWNER_ID)
        os.chmod(src / name, 0o700)


@pytest.fixture(scope="module")
def world() -> Iterator[History]:
    """A world of a snapshot holding two 0700 folders and the 0600 file;
    after it, one folder was deleted and the file opened to everyone."""
    attacker, owner = _ids()
    with workspace(populate=_populate_folders) as live:
        mnt = live.mnt
        swfs("snapshot", mnt, "then")
        os.unlink(mnt / "gone" / "plan.txt")
        os.rmdir(mnt / "gone")
        _open_the_secret(mnt)
        wmnt = live.root / "world"
        wmnt.mkdir()
        wmnt.chmod(0o755)
        w = start_mount(live.src, wmnt, "--at", "then")
        try:
            yield History(live, attacker, owner, w)
        finally:
            w.stop()


def _reads(ids: tuple[int, int], path: Path, secret: bytes) -> int:
    """As ``ids``: SAW if ``path`` reads with ``secret`` in it, 0 if it
    reads without, else the errno."""

    def read() -> None:
        if secret in path.read_bytes():
            raise OSError(SAW, "saw the secret")

    return run_as(ids, read)


def _grep(ids: tuple[int, int], root: Path, secret: bytes, *tops: str) -> bytes:
    """``grep -r`` as ``ids`` below ``root`` (ALL.diff included): what it found."""
    skip = [f"--exclude-dir={d}" for d in (".render", ".search", ".tab")]
    proc = subprocess.run(
        ["grep", "-r", "-a", "-l", *skip, secret.decode(), *tops],
        cwd=root,
        capture_output=True,
        timeout=120,
        check=False,
        user=ids[0],
        group=ids[1],
        extra_groups=[],
    )
    return proc.stdout


def test_old_versions_keep_the_mode_they_were_recorded_with(hist: History) -> None:
    mnt = hist.live.mnt
    assert _reads(hist.attacker, mnt / "secret.env", b"rotated") == SAW  # open to all now
    versions = sorted((mnt / ".versions" / "secret.env").iterdir())
    old = [v for v in versions if OLD_SECRET in v.read_bytes()]
    assert old, versions
    for v in old:
        assert _reads(hist.attacker, v, OLD_SECRET) == errno.EACCES, v
        assert _reads(hist.owner, v, OLD_SECRET) == SAW, v
        assert stat.S_IMODE(os.stat(v).st_mode) & 0o044 == 0, v


def test_the_baseline_diff_keeps_the_baseline_mode(hist: History) -> None:
    diff = hist.live.mnt / ".review" / "secret.env.diff"
    assert OLD_SECRET in diff.read_bytes()
    assert _reads(hist.attacker, diff, OLD_SECRET) == errno.EACCES
    assert _reads(hist.owner, diff, OLD_SECRET) == SAW


def test_all_diff_is_refused_to_who_may_not_read_every_part(hist: History) -> None:
    all_diff = hist.live.mnt / ".review" / "ALL.diff"
    assert OLD_SECRET in all_diff.read_bytes()
    assert _reads(hist.attacker, all_diff, OLD_SECRET) == errno.EACCES
    assert _reads(hist.owner, all_diff, OLD_SECRET) == SAW


def test_nothing_old_is_found_by_the_attacker_anywhere(hist: History) -> None:
    mnt = hist.live.mnt
    assert _grep(hist.attacker, mnt, OLD_SECRET, ".", ".versions") == b""
    assert _grep(hist.owner, mnt, OLD_SECRET, ".versions", ".review") != b""


def _populate_gated(src: Path) -> None:
    # tests/evilparsers.py's gated parser: parsed once its ``.go`` file exists.
    (src / "plan.gated").write_bytes(STALE_SECRET + b"\n")
    (src / "plan.gated.go").touch()
    for p in (src, src / "plan.gated"):
        os.chown(p, OWNER_ID, OWNER_ID)
    os.chmod(src / "plan.gated", 0o600)


def test_a_stale_view_keeps_the_mode_of_its_content() -> None:
    attacker, owner = _ids()
    with workspace(["--stale", "serve"], populate=_populate_gated) as live:
        mnt, view = live.mnt, live.mnt / ".parsed" / "plan.gated"
        unit = view / "content.txt"
        assert STALE_SECRET in unit.read_bytes()
        try:
            (live.src / "plan.gated.go").unlink()  # the next parse waits
            (mnt / "plan.gated").write_bytes(b"rotated and public\n")
            os.chmod(mnt / "plan.gated", 0o644)
            deadline = time.monotonic() + 60
            while os.getxattr(view, "user.sw.freshness") != b"stale":
                assert time.monotonic() < deadline, "the view never went stale"
                time.sleep(0.05)
            assert STALE_SECRET in unit.read_bytes()  # served stale, as root
            assert _reads(attacker, mnt / "plan.gated", b"rotated") == SAW
            assert _reads(attacker, unit, STALE_SECRET) == errno.EACCES
            assert run_as(attacker, lambda: os.listdir(view)) == errno.EACCES
            assert _reads(owner, unit, STALE_SECRET) == SAW
        finally:
            (live.src / "plan.gated.go").touch()  # let the parse end


def test_a_world_keeps_a_closed_folder_closed(world: History) -> None:
    hist = world
    assert hist.world is not None
    w = hist.world.mnt
    st = os.stat(w / "kept")
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, OWNER_ID)
    native = w / "kept" / "plan.txt"
    unit = w / ".parsed" / "kept" / "plan.txt" / "content.txt"
    assert KEPT_SECRET in unit.read_bytes()  # as root: the parse is there
    for path in (native, unit):
        assert _reads(hist.attacker, path, KEPT_SECRET) == errno.EACCES, path
        assert _reads(hist.owner, path, KEPT_SECRET) == SAW, path


def test_a_world_keeps_a_deleted_closed_folder_closed(world: History) -> None:
    hist = world
    assert hist.world is not None
    w = hist.world.mnt
    assert not (hist.live.mnt / "gone").exists()
    st = os.stat(w / "gone")
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, OWNER_ID)
    native = w / "gone" / "plan.txt"
    unit = w / ".parsed" / "gone" / "plan.txt" / "content.txt"
    assert GONE_SECRET in unit.read_bytes()
    for path in (native, unit):
        assert _reads(hist.attacker, path, GONE_SECRET) == errno.EACCES, path
        assert _reads(hist.owner, path, GONE_SECRET) == SAW, path


def test_a_world_shows_the_recorded_modes_narrowed_by_the_present(world: History) -> None:
    hist = world
    assert hist.world is not None
    w = hist.world.mnt
    # 0600 at the snapshot, 0644 now: the world keeps it 0600.
    st = os.stat(w / "secret.env")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, OWNER_ID, OWNER_ID)
    assert _reads(hist.attacker, w / "secret.env", OLD_SECRET) == errno.EACCES
    assert _reads(hist.owner, w / "secret.env", OLD_SECRET) == SAW
    assert _reads(hist.attacker, w / "public.txt", b"public figures") == SAW
    for secret in (OLD_SECRET, KEPT_SECRET, GONE_SECRET):
        assert _grep(hist.attacker, w, secret, ".") == b"", secret
