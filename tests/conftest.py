"""Shared fixtures.  Mount fixtures: a real FUSE mount in a subprocess, always
torn down (lazily unmounted, daemon reaped) even when the test fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import trio

from swfs.engine import Engine
from swfs.samples import build_sample_workspace
from swfs.workspace import Config
from tests import mountutil
from tests.mountutil import Mount, cleanup_dir, daemon_env, start, swfs, workdir

MountFactory = Callable[..., Mount]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tell tests/mountutil.py whether this test may mount: only one that
    carries the ``mount`` marker, so ``-m "not mount"`` never mounts."""
    mountutil.mount_marked = item.get_closest_marker("mount") is not None


def fuse_available() -> str | None:
    """Why real mounts cannot run here, or None when they can."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3"
    return None


@pytest.fixture
def mount_tree() -> Iterator[MountFactory]:
    """``mount_tree({'a.txt': 'hello'}, args=[...], setup=fn, sync=True)`` ->
    Mount: the real engine (hook calls logged, faults by file name: see
    tests/enginewrap.py), the test parsers of tests/evilparsers.py installed;
    with ``sync``, every view is current when it returns."""
    reason = fuse_available()
    if reason:
        pytest.skip(reason)
    mounts: list[Mount] = []
    dirs: list[Path] = []

    def make(
        files: Mapping[str, str | bytes] | None = None,
        *,
        args: Sequence[str] = (),
        setup: Callable[[Path], None] | None = None,
        sync: bool = True,
    ) -> Mount:
        d = workdir()
        dirs.append(d)
        src, mnt = d / "src", d / "mnt"
        src.mkdir()
        mnt.mkdir()
        src.chmod(0o755)
        mnt.chmod(0o755)
        for rel, content in (files or {}).items():
            p = src / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode() if isinstance(content, str) else content
            p.write_bytes(data)
            p.chmod(0o644)
        if setup is not None:
            setup(src)
        m = start(src, mnt, args=args, env=daemon_env(src))
        mounts.append(m)
        if sync:
            swfs("sync", mnt, timeout=120)
        return m

    yield make
    for m in mounts:
        m.stop()
    for d in dirs:
        cleanup_dir(d)


@pytest.fixture
def sample(tmp_path: Path) -> Iterator[Engine]:
    """The engine over the demo's sample workspace, indexed."""
    src = tmp_path / "ws"
    src.mkdir()
    build_sample_workspace(src)
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        yield eng


# A folder on a file system that shares extents (xfs, btrfs), for the clone
# (reflink) tests: the usual test folders are ext4 or tmpfs, which decline.
REFLINK_DIR_ENV = "SWFS_TEST_REFLINK_DIR"
REFLINK_IMAGE_BYTES = 640 << 20  # xfs wants 300 MiB at least; sparse


@pytest.fixture(scope="session")
def reflink_dir() -> Iterator[Path | str]:
    """``$SWFS_TEST_REFLINK_DIR``, or (as root, with mkfs.xfs) a small xfs
    image loop-mounted for the session; else the reason there is none (a
    str: the tests skip, naming it)."""
    where = os.environ.get(REFLINK_DIR_ENV)
    if where:
        yield Path(where)
        return
    if os.geteuid() != 0 or shutil.which("mkfs.xfs") is None:
        yield f"{REFLINK_DIR_ENV} is unset, and no xfs image can be made (root, mkfs.xfs)"
        return
    base = workdir()
    image, point = base / "xfs.img", base / "xfs"
    point.mkdir()
    with open(image, "wb") as f:
        f.truncate(REFLINK_IMAGE_BYTES)
    made = subprocess.run(["mkfs.xfs", "-q", "-f", str(image)], capture_output=True, text=True)
    mounted = made.returncode == 0 and (
        subprocess.run(
            ["mount", "-o", "loop", str(image), str(point)], capture_output=True, text=True
        )
    )
    if made.returncode != 0 or not mounted or mounted.returncode != 0:
        why = made.stderr if made.returncode != 0 else (mounted.stderr if mounted else "")
        cleanup_dir(base)
        yield f"no xfs image to clone on: {why.strip()[-300:]}"
        return
    try:
        point.chmod(0o755)
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        cleanup_dir(base)
