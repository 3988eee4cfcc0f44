"""The change feed without FUSE: inotify events reach the engine's file table
(and the ``changed`` callback) with no rescan, new directories are watched
and walked, moves and lost events fall back to a rescan, and the watch limit
leaves the rest to the rescan with a warning."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from swfs import changefeed
from swfs.api import RelPath
from swfs.changefeed import IN_Q_OVERFLOW, ChangeFeed
from swfs.workspace import Workspace

BOUND = 30.0  # seconds: generous, the machine may be busy


class Recorder(Workspace):
    """The real workspace, counting the calls the feed makes."""

    def __init__(self, src: Path) -> None:
        super().__init__(src)
        self.checked: list[str] = []
        self.scans = 0

    def check_file(self, rel: RelPath, **kw: object) -> object:  # type: ignore[override]
        self.checked.append(rel)
        return super().check_file(rel, **kw)  # type: ignore[arg-type]

    def scan(self, progress: object = None) -> object:  # type: ignore[override]
        self.scans += 1
        return super().scan()


def run_feed(
    src: Path,
    act: Callable[[Recorder, ChangeFeed], object],
    *,
    skip: Callable[[list[str]], set[str]] = lambda rels: set(),
    touched: Callable[[list[str] | None], None] = lambda rels: None,
) -> tuple[Recorder, list[str]]:
    ws = Recorder(src)
    ws.scan()
    seen: list[str] = []

    async def main() -> None:
        feed = ChangeFeed(ws, changed=seen.extend, skip=skip, touched=touched)
        async with trio.open_nursery() as nursery:
            await nursery.start(feed.run)
            await act(ws, feed)  # type: ignore[misc]
            feed.stop()

    try:
        trio.run(main)
    finally:
        ws.close()
    return ws, seen


async def until(cond: Callable[[], bool], what: str) -> None:
    """Poll ``cond`` (state in another thread: no event to wait for)."""
    deadline = trio.current_time() + BOUND
    while not cond():
        if trio.current_time() > deadline:
            raise AssertionError(f"not within {BOUND} s: {what}")
        await trio.sleep(0.01)


@pytest.fixture
def src(tmp_path: Path) -> Path:
    s = tmp_path / "src"
    (s / "d").mkdir(parents=True)
    (s / "d" / "a.txt").write_text("alpha\n")
    return s


def test_a_write_behind_the_mount_is_recorded_without_a_rescan(src: Path) -> None:
    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        old = ws.get_record("d/a.txt")
        assert old is not None
        (src / "d" / "a.txt").write_text("bravo, longer\n")
        await until(
            lambda: (rec := ws.get_record("d/a.txt")) is not None and rec.hash != old.hash,
            "the new hash recorded",
        )
        (src / "d" / "a.txt").unlink()
        await until(lambda: ws.get_record("d/a.txt") is None, "the deletion recorded")

    ws, seen = run_feed(src, act)
    assert ws.scans == 1  # only the one before the feed started
    assert "d/a.txt" in ws.checked
    assert "d/a.txt" in seen


def test_files_in_a_new_directory_are_found(src: Path) -> None:
    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        # Files written right after mkdir, before the feed can watch the directory.
        deep = src / "new" / "sub" / "deeper"
        deep.mkdir(parents=True)
        (deep / "b.txt").write_text("beta\n")
        (src / "new" / "c.txt").write_text("gamma\n")
        await until(lambda: ws.get_record("new/sub/deeper/b.txt") is not None, "b.txt")
        await until(lambda: ws.get_record("new/c.txt") is not None, "c.txt")
        # And the new directories are watched from then on.
        (deep / "later.txt").write_text("delta\n")
        await until(lambda: ws.get_record("new/sub/deeper/later.txt") is not None, "later")

    ws, _ = run_feed(src, act)
    assert ws.scans == 1


def test_a_moved_directory_is_rescanned(src: Path) -> None:
    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        os.rename(src / "d", src / "e")
        await until(lambda: ws.get_record("e/a.txt") is not None, "the moved file")
        await until(lambda: ws.get_record("d/a.txt") is None, "the old path gone")
        # The watch follows the directory to its new name.
        (src / "e" / "z.txt").write_text("zeta\n")
        await until(lambda: ws.get_record("e/z.txt") is not None, "a file in the moved dir")

    ws, _ = run_feed(src, act)
    assert ws.scans >= 2


def test_the_store_is_not_watched(src: Path) -> None:
    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        (src / ".swfs" / "junk").write_text("x")
        (src / "d" / "marker.txt").write_text("m\n")
        await until(lambda: ws.get_record("d/marker.txt") is not None, "the marker")

    ws, seen = run_feed(src, act)
    assert not [r for r in [*ws.checked, *seen] if r.startswith(".swfs")]


def test_paths_the_daemon_writes_are_left_to_it(src: Path) -> None:
    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        (src / "d" / "a.txt").write_text("half written")
        (src / "d" / "marker.txt").write_text("m\n")
        await until(lambda: ws.get_record("d/marker.txt") is not None, "the marker")

    ws, _ = run_feed(src, act, skip=lambda rels: {r for r in rels if r == "d/a.txt"})
    assert "d/a.txt" not in ws.checked


def test_a_file_the_daemon_creates_in_a_new_directory_is_left_to_it(src: Path) -> None:
    """The walk of a new directory must not record a file the daemon is
    still writing: its empty first state would become a version of its own."""

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        new = src / "new" / "sub"
        new.mkdir(parents=True)
        (new / "inner.txt").write_text("")  # created, not yet written
        (new / "marker.txt").write_text("m\n")
        await until(lambda: ws.get_record("new/sub/marker.txt") is not None, "the marker")

    ws, _ = run_feed(src, act, skip=lambda rels: {r for r in rels if r.endswith("inner.txt")})
    assert "new/sub/inner.txt" not in ws.checked


def test_lost_events_mean_a_rescan(src: Path) -> None:
    ws = Recorder(src)
    try:
        feed = ChangeFeed(ws)
        assert feed._events([(-1, IN_Q_OVERFLOW, 0, "")]) == [None]
    finally:
        ws.close()

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        before = ws.scans
        # As the reader does when the kernel says its queue overflowed.
        assert feed._ino is not None
        real = feed._ino.read

        def overflow() -> list[tuple[int, int, int, str]]:
            feed._ino.read = real  # type: ignore[union-attr, method-assign]
            return [(-1, IN_Q_OVERFLOW, 0, "")]

        feed._ino.read = overflow  # type: ignore[method-assign]
        (src / "d" / "lost.txt").write_text("l\n")
        await until(lambda: ws.scans > before, "a rescan")
        await until(lambda: ws.get_record("d/lost.txt") is not None, "the file")

    run_feed(src, act)


def test_the_watch_limit_leaves_the_rest_to_the_rescan(
    src: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(5):
        (src / f"dir{i}").mkdir()
    calls = {"n": 0}
    real = changefeed.Inotify.add_watch

    def limited(self: changefeed.Inotify, path: str, mask: int) -> int:
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real(self, path, mask)

    monkeypatch.setattr(changefeed.Inotify, "add_watch", limited)

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        assert feed._limited
        assert len(feed._by_dir) == 3
        assert not feed.watching  # the daemon keeps no xattr names from now on

    with caplog.at_level(logging.WARNING, logger="swfs.changefeed"):
        run_feed(src, act)
    assert "watch limit" in caplog.text
    assert "periodic rescan" in caplog.text


def test_looking_at_a_file_leaves_its_access_time(src: Path) -> None:
    """The feed has the engine hash a file within milliseconds of a change: a
    utimensat behind the mount (or through it) must still read back as set."""
    f = src / "d" / "a.txt"
    f.write_text("changed, to be hashed again\n")
    atime, mtime = 1_000_000_000_123, 2_000_000_000_456  # atime < mtime: relatime updates it
    os.utime(f, ns=(atime, mtime))

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        os.utime(f, ns=(atime, mtime + 1000))
        await until(
            lambda: (rec := ws.get_record("d/a.txt")) is not None and rec.mtime_ns == mtime + 1000,
            "the change recorded",
        )

    ws, _ = run_feed(src, act)
    assert os.stat(f).st_atime_ns == atime


def test_a_failing_callback_does_not_end_the_feed(src: Path) -> None:
    calls = {"n": 0}

    def broken(rels: list[str]) -> set[str]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the daemon's callback")
        return set()

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        (src / "d" / "first.txt").write_text("1\n")
        await until(lambda: calls["n"] >= 1, "the first batch")
        (src / "d" / "second.txt").write_text("2\n")
        await until(lambda: ws.get_record("d/second.txt") is not None, "the second file")

    run_feed(src, act, skip=broken)


def test_a_change_already_recorded_needs_no_check_but_is_reported(src: Path) -> None:
    """The mount records its own writes at their close; the events they
    raise are sorted on the loop: no check for a file whose stat signature
    its record already holds, yet the kernel is still told (``changed``)."""

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        (src / "d" / "a.txt").write_text("recorded first\n")
        ws.check_file(RelPath("d/a.txt"))  # as a close through the mount does
        ws.checked.clear()
        await until(lambda: "d/a.txt" in seen, "the event reported")
        assert ws.checked == []
        # A change after the record is checked as ever.
        (src / "d" / "a.txt").write_text("then behind the mount\n")
        await until(lambda: "d/a.txt" in ws.checked, "the later change checked")
        rec = ws.get_record("d/a.txt")
        assert rec is not None
        assert rec.size == len("then behind the mount\n")

    seen: list[str] = []
    ws = Recorder(src)
    ws.scan()

    async def main() -> None:
        feed = ChangeFeed(ws, changed=seen.extend)
        async with trio.open_nursery() as nursery:
            await nursery.start(feed.run)
            await act(ws, feed)
            feed.stop()

    try:
        trio.run(main)
    finally:
        ws.close()


def test_attribute_changes_and_new_names_are_told_as_soon_as_read(src: Path) -> None:
    """``touched`` hears of an xattr change, a create and a rename into place
    behind the mount before any coalescing or check (the daemon forgets the
    xattr names it keeps of those inodes), of the files found in a new
    directory, and of lost events as None; ``watching`` says the whole tree
    is watched while the feed runs."""
    told: list[list[str] | None] = []
    recorder: list[Recorder] = []  # the feed's engine, once it runs
    checked_when_told: list[int] = []

    def touched(rels: list[str] | None) -> None:
        told.append(rels)
        checked_when_told.append(len(recorder[0].checked))

    def flat() -> list[str]:
        return [r for rels in told if rels is not None for r in rels]

    async def act(ws: Recorder, feed: ChangeFeed) -> None:
        recorder.append(ws)
        assert feed.watching
        os.setxattr(src / "d" / "a.txt", "user.colour", b"teal")
        await until(lambda: "d/a.txt" in flat(), "the xattr change told")
        (src / "d" / "b.txt").write_text("b\n")
        await until(lambda: "d/b.txt" in flat(), "the create told")
        (src / "tmp.txt").write_text("t\n")
        os.rename(src / "tmp.txt", src / "d" / "c.txt")
        await until(lambda: "d/c.txt" in flat(), "the rename into place told")
        deep = src / "new" / "sub"
        deep.mkdir(parents=True)
        (deep / "x.txt").write_text("x\n")
        await until(lambda: "new/sub/x.txt" in flat(), "a file found in a new directory")
        # A write that changes only the bytes is not an attribute change.
        n, checks = len(told), ws.checked.count("d/a.txt")
        fd = os.open(src / "d" / "a.txt", os.O_WRONLY)
        try:
            os.pwrite(fd, b"A", 0)
        finally:
            os.close(fd)
        await until(lambda: ws.checked.count("d/a.txt") > checks, "the write recorded")
        assert all(rels is None or "d/a.txt" not in rels for rels in told[n:])
        # Lost events: every path may have changed.
        assert feed._ino is not None
        real = feed._ino.read

        def overflow() -> list[tuple[int, int, int, str]]:
            feed._ino.read = real  # type: ignore[union-attr, method-assign]
            return [(-1, changefeed.IN_Q_OVERFLOW, 0, "")]

        feed._ino.read = overflow  # type: ignore[method-assign]
        (src / "d" / "lost.txt").write_text("l\n")
        await until(lambda: None in told, "lost events told as None")

    run_feed(src, act, touched=touched)
    # The xattr change was told before the engine looked at the file.
    first = next(i for i, rels in enumerate(told) if rels and "d/a.txt" in rels)
    assert checked_when_told[first] == 0


def test_watching_ends_with_the_feed(src: Path) -> None:
    ws = Recorder(src)
    feed = ChangeFeed(ws)
    try:
        assert not feed.watching  # not before the first walk

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(feed.run)
                assert feed.watching
                feed.stop()

        trio.run(main)
        assert not feed.watching
    finally:
        ws.close()
