"""mountd.fusectl without a FUSE mount: finding a mount in mountinfo
without touching it, probing, and telling a dead process from a live one.
The watchdog and the aborts are tested on real mounts
(tests/mounted/test_deadmount_mounted.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mountd import fusectl


def test_canonical_resolves_the_parent_only(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "mnt").mkdir()
    (tmp_path / "link").symlink_to(real)
    (real / "alias").symlink_to(real / "mnt")
    # The parent's symlinks are resolved; the last name is not followed (a
    # hung mount point would hang a stat of it).
    assert fusectl.canonical(tmp_path / "link" / "mnt") == real / "mnt"
    assert fusectl.canonical(tmp_path / "link" / "alias") == real / "alias"
    assert fusectl.canonical("/") == Path("/")


def test_mount_entry_reads_mountinfo() -> None:
    proc = fusectl.mount_entry("/proc", fstype="proc")
    assert proc is not None
    assert proc[0] > 0
    assert fusectl.connection("/proc") is None  # not FUSE
    assert fusectl.connection("/proc", fstype=None) is None
    assert fusectl.connection("/no/such/mount", fstype=None) is None


def test_a_plain_folder_probes_live(tmp_path: Path) -> None:
    assert fusectl.probe(tmp_path, 30) == "live"


def test_dead_process_tells_a_zombie_and_a_reaped_child_from_a_live_one() -> None:
    assert not fusectl.dead_process(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 120  # a busy machine starts Python slowly
    while not fusectl.dead_process(child.pid):  # a zombie until reaped
        assert time.monotonic() < deadline, "the child never ended"
        time.sleep(0.05)
    assert child.returncode is None  # not reaped yet: a zombie
    child.wait()
    assert fusectl.dead_process(child.pid)


def test_abort_names_a_connection_that_does_not_exist() -> None:
    with pytest.raises(fusectl.FusectlError, match="2147483647|fusectl is not mounted"):
        fusectl.abort(2**31 - 1)
