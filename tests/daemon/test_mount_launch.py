"""Mount lifecycle: daemonizing, readiness, errors, signals, crashes."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mountd.launch import MountError, fuse_options, mount, mounted_swfs, unmount
from mountd.options import MountOptions
from tests import mountutil
from tests.conftest import MountFactory, fuse_available
from tests.mountutil import REPO, cleanup_dir, lazy_unmount, workdir

needs_fuse = pytest.mark.skipif(fuse_available() is not None, reason="no FUSE here")

SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from mountd.launch import MountError, mount
    from mountd.options import MountOptions
    from swfs.engine import Engine

    src, mnt, log, mode = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]

    def factory():
        if mode == "fail":
            raise RuntimeError("store is locked by another daemon")
        return Engine.open(src)

    try:
        mount(factory, src, mnt, MountOptions(), foreground=False, log_file=log)
    except MountError as exc:
        print(f"MountError: {exc}")
        sys.exit(3)
    print("mounted")
    """
)


def run_script(d: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(d / "src"), str(d / "mnt"), str(d / "log"), mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture
def dirs() -> Iterator[Path]:
    d = workdir()
    (d / "src").mkdir()
    (d / "mnt").mkdir()
    (d / "src/a.txt").write_text("hello\n")
    yield d
    if mounted_swfs(d / "mnt"):
        lazy_unmount(d / "mnt")
    cleanup_dir(d)


@needs_fuse
@pytest.mark.mount
@pytest.mark.timeout(60)
def test_background_mount_returns_when_ready(dirs: Path) -> None:
    r = run_script(dirs, "ok")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "mounted"
    # The caller's process has exited; the daemon serves on.
    assert mounted_swfs(dirs / "mnt")
    assert (dirs / "mnt/a.txt").read_text() == "hello\n"
    assert "serving" in (dirs / "log").read_text()
    unmount(dirs / "mnt")
    assert not mounted_swfs(dirs / "mnt")
    deadline = time.monotonic() + 10
    while "unmounted" not in (dirs / "log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "unmounted" in (dirs / "log").read_text()


@needs_fuse
@pytest.mark.mount
@pytest.mark.timeout(60)
def test_background_mount_reports_the_daemons_error(dirs: Path) -> None:
    r = run_script(dirs, "fail")
    assert r.returncode == 3
    assert r.stdout.strip() == "MountError: store is locked by another daemon"
    assert not mounted_swfs(dirs / "mnt")


def test_bad_mount_point_is_refused_before_forking(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(MountError, match="not a directory"):
        mount(
            lambda: pytest.fail("engine opened"),
            tmp_path / "src",
            tmp_path / "missing",
            MountOptions(),
            foreground=False,
            log_file=None,
        )
    with pytest.raises(MountError, match="inside the workspace"):
        mount(
            lambda: pytest.fail("engine opened"),
            tmp_path / "src",
            tmp_path / "src",
            MountOptions(),
            foreground=True,
            log_file=None,
        )


def test_unmount_of_something_not_mounted_says_why(tmp_path: Path) -> None:
    with pytest.raises(MountError):
        unmount(tmp_path)


def test_fuse_options() -> None:
    opts = fuse_options(Path("/w/s"), MountOptions(allow_other=True))
    assert {"fsname=swfs:/w/s", "subtype=swfs", "default_permissions", "allow_other"} <= opts
    assert "allow_other" not in fuse_options(Path("/w"), MountOptions(allow_other=False))
    assert "debug" in fuse_options(Path("/w"), MountOptions(allow_other=False, debug=True))
    with pytest.raises(ValueError, match="stale"):
        MountOptions(stale="never")  # type: ignore[arg-type]


@pytest.mark.mount
@pytest.mark.timeout(60)
def test_sigterm_unmounts_cleanly(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"})
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(20) == 0
    assert not mounted_swfs(m.mnt)
    assert os.listdir(m.mnt) == []


@pytest.mark.mount
@pytest.mark.timeout(60)
def test_a_crash_leaves_the_mount_in_place(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a"}, args=["--crash-after", "0.5"], sync=False)
    assert m.proc.wait(60) != 0
    # Still mounted, answering ENOTCONN: never an empty directory that a sync
    # tool would take for "everything was deleted".
    assert mounted_swfs(m.mnt)
    with pytest.raises(OSError, match="not connected") as exc:
        os.listdir(m.mnt)
    assert exc.value.errno == errno.ENOTCONN
    assert "leaving" in m.log()


def test_a_test_without_the_mount_marker_cannot_mount(tmp_path: Path) -> None:
    assert mountutil.mount_marked is False
    with pytest.raises(AssertionError, match="mount marker"):
        mountutil.start(tmp_path / "src", tmp_path / "mnt")
    assert not (tmp_path / "daemon.log").exists()  # no daemon was started


@pytest.mark.mount
def test_a_test_with_the_mount_marker_may_mount() -> None:
    assert mountutil.mount_marked is True
