"""Records of changes of names are made after the reply (swfs.history.recorder):
a daemon killed with records still queued loses nothing an fsync made durable,
and no bytes an unlink or a rename over destroyed.

The queue is made to wait for long (``SWFS_TEST_RECORD_QUIET``), so that the
records are queued for sure when the daemon dies; ``SWFS_TEST_KILL_AT``
``queued:REL`` kills it right after a change's reply-path steps."""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

import pytest
from blake3 import blake3

from swfs.history.writesession import KILL_AT_ENV, RECORD_QUIET_ENV
from tests.mountutil import lazy_unmount, needs_fuse, start_mount, swfs, wait_until, workdir

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]

A1 = b"a, first\n"
A2 = b"a, second version\n"
C1 = random.Random(38).randbytes(200_000)


def _versions(mnt: Path, name: str) -> dict[str, bytes]:
    vdir = mnt / ".versions" / name
    out = {}
    with contextlib.suppress(FileNotFoundError):
        for v in sorted(os.listdir(vdir)):
            out[v] = (vdir / v).read_bytes()
    return out


def _folders() -> tuple[Path, Path]:
    """A new SRC and mount point (its queue made to wait long by the caller)."""
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    return src, mnt


def _setup(src: Path, mnt: Path) -> None:
    (src / "c.bin").write_bytes(C1)
    swfs("sync", mnt)
    (mnt / "a.txt").write_bytes(A1)
    (mnt / "a.txt").write_bytes(A2)  # two versions through the mount
    swfs("sync", mnt)
    assert list(_versions(mnt, "a.txt").values()) == [A1, A2]


def test_an_fsynced_folder_keeps_its_changes_records(monkeypatch: pytest.MonkeyPatch) -> None:
    src, mnt = _folders()
    monkeypatch.setenv(RECORD_QUIET_ENV, "600")
    m = start_mount(src, mnt, "--version-interval", "0")
    m2 = None
    try:
        _setup(src, mnt)
        os.rename(mnt / "a.txt", mnt / "b.txt")
        os.unlink(mnt / "c.bin")
        fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # POSIX: the folder's changes are durable now
        finally:
            os.close(fd)
        m.kill()
        lazy_unmount(mnt)
        monkeypatch.delenv(RECORD_QUIET_ENV)
        m2 = start_mount(src, mnt, "--version-interval", "0")
        swfs("sync", mnt, timeout=120)
        # The rename was recorded: b.txt carries a.txt's history.
        assert list(_versions(mnt, "b.txt").values()) == [A1, A2]
        # The unlink was recorded, c.bin's bytes kept.
        assert list(_versions(mnt, "c.bin").values()) == [C1]
        assert not os.listdir(src / ".swfs" / "held")
        swfs("check", mnt)
    finally:
        for mount in (m, m2):
            if mount is not None:
                mount.stop()


@pytest.mark.parametrize("change", ["unlink", "rename_over"])
def test_bytes_held_by_a_killed_daemon_are_kept(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, mnt = _folders()
    monkeypatch.setenv(RECORD_QUIET_ENV, "600")
    monkeypatch.setenv(KILL_AT_ENV, "queued:c.bin")
    m = start_mount(src, mnt, "--version-interval", "0")
    m2 = None
    try:
        _setup(src, mnt)
        with contextlib.suppress(OSError):  # the daemon dies under the change
            if change == "unlink":
                os.unlink(mnt / "c.bin")
            else:
                os.rename(mnt / "a.txt", mnt / "c.bin")
        wait_until("the daemon to kill itself", lambda: m.proc.poll() is not None, timeout=60)
        lazy_unmount(mnt)
        assert os.listdir(src / ".swfs" / "held")  # the link that holds c.bin's bytes
        monkeypatch.delenv(KILL_AT_ENV)
        monkeypatch.delenv(RECORD_QUIET_ENV)
        m2 = start_mount(src, mnt, "--version-interval", "0")
        swfs("sync", mnt, timeout=120)
        assert not os.listdir(src / ".swfs" / "held")
        kept = _versions(mnt, "c.bin")
        assert blake3(C1).hexdigest() in {blake3(b).hexdigest() for b in kept.values()}, kept
        swfs("check", mnt)
    finally:
        for mount in (m, m2):
            if mount is not None:
                mount.stop()


def test_a_write_into_a_new_file_does_not_wait_for_queued_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """git checkout's pattern: unlink a recorded file, create a new one under
    the same name, write it.  The new file has nothing recorded to keep, so
    its writes go on while the unlink's record is still queued (they used to
    drain the whole queue, on the daemon's loop), and so does its close,
    whose record is queued after the unlink's: both are made in order."""
    src, mnt = _folders()
    monkeypatch.setenv(RECORD_QUIET_ENV, "600")
    m = start_mount(src, mnt, "--version-interval", "0")
    try:
        _setup(src, mnt)
        held = src / ".swfs" / "held"
        os.unlink(mnt / "c.bin")
        assert os.listdir(held)  # the unlink's record is queued, its bytes held
        new = b"c, a new file under the old name\n"
        fd = os.open(mnt / "c.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            assert os.write(fd, new) == len(new)
            # The write did not wait for the queued record.
            assert os.listdir(held)
        finally:
            os.close(fd)  # its record is queued after the unlink's
        assert os.listdir(held)  # nor did the close
        swfs("sync", mnt, timeout=120)  # waits for the queue
        assert not os.listdir(held)
        kept = [blake3(b).hexdigest() for b in _versions(mnt, "c.bin").values()]
        assert blake3(C1).hexdigest() in kept, kept
        assert blake3(new).hexdigest() == kept[-1], kept
        swfs("check", mnt)
    finally:
        m.stop()


def test_a_close_whose_record_was_queued_is_recorded_after_a_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A close answers before its record is made: a daemon killed in between
    leaves the written bytes in SRC, and the next mount records them (as a
    change behind the mount); the version before them was kept at the
    first write, so nothing is lost."""
    src, mnt = _folders()
    monkeypatch.setenv(RECORD_QUIET_ENV, "600")
    m = start_mount(src, mnt, "--version-interval", "0")
    m2 = None
    a3 = b"a, third, closed as the daemon died\n"
    try:
        _setup(src, mnt)
        m.stop()
        lazy_unmount(mnt)
        monkeypatch.setenv(KILL_AT_ENV, "record-queued:a.txt")
        m = start_mount(src, mnt, "--version-interval", "0")
        # The daemon dies under the close.
        with contextlib.suppress(OSError), open(mnt / "a.txt", "r+b") as f:
            f.write(a3)
        wait_until("the daemon to kill itself", lambda: m.proc.poll() is not None, timeout=60)
        lazy_unmount(mnt)
        assert (src / "a.txt").read_bytes() == a3
        monkeypatch.delenv(KILL_AT_ENV)
        monkeypatch.delenv(RECORD_QUIET_ENV)
        m2 = start_mount(src, mnt, "--version-interval", "0")
        swfs("sync", mnt, timeout=120)
        assert list(_versions(mnt, "a.txt").values()) == [A1, A2, a3]
        swfs("check", mnt)
    finally:
        for mount in (m, m2):
            if mount is not None:
                mount.stop()
