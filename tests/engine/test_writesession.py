"""The engine's write protocol (swfs.writesession) without FUSE: what a
daemon's open, write, truncate, close, unlink and rename of a native file
turn into, and who decides what to preserve and when to record."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import blake3
import pytest

from parsers import registry
from parsers._base import FileInfo
from swfs.api import RelPath, WriteSession
from swfs.engine import Engine
from swfs.views.parsework import CHANGED, OK, ParseOutcome
from swfs.workspace import Config, WorkspaceError

OLD = b"the recorded bytes\n"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(OLD)
    (src / "b.txt").write_bytes(b"bee\n")
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        yield eng


def opener(engine: Engine, rel: str, flags: int = os.O_RDWR) -> object:
    return lambda: os.open(engine.src / rel, flags | os.O_CLOEXEC)


def versions(engine: Engine, rel: str) -> list[str]:
    return [v.hash for v in engine.history.versions(RelPath(rel))]


def test_first_write_preserves_and_release_records(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = engine.workspace.preserve
    monkeypatch.setattr(engine.workspace, "preserve", lambda rel: (calls.append(rel), real(rel))[1])
    before = versions(engine, "a.txt")
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    assert s.needs_preserve
    assert not s.dirty
    s.write(0, b"THE")
    s.write(3, b" new")  # the recorded bytes are kept once, not per write
    assert calls == ["a.txt"]
    assert engine.workspace.writes.busy_paths() == {"a.txt"}  # the rescan leaves it to the session
    s.release()
    after = versions(engine, "a.txt")
    assert len(after) == len(before) + 1
    assert engine.workspace.writes.busy_paths() == set()
    # The old bytes are a version one can read back.
    blob = engine.history.version_file(RelPath("a.txt"), 1)
    assert blob is not None
    assert Path(blob).read_bytes() == OLD
    # The next session on the new version keeps it first.
    s2 = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    assert s2.needs_preserve
    s2.release()
    assert len(versions(engine, "a.txt")) == len(after)  # nothing written: no version


def _disk_full(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every attempt to keep bytes fails as on a full disk: the blob store
    takes none (copied in or linked in)."""

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "no space left in the store")

    monkeypatch.setattr(engine.workspace.blobs, "put_fd", full)
    monkeypatch.setattr(engine.workspace.blobs, "link_in", full)


def not_kept(engine: Engine, rel: str) -> list[str | None]:
    return [v.not_kept for v in engine.history.versions(RelPath(rel))]


def test_a_write_whose_bytes_cannot_be_kept_fails_and_leaves_the_file(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    _disk_full(engine, monkeypatch)
    with pytest.raises(OSError, match="no space") as info:
        s.write(0, b"XXXX")
    assert info.value.errno == errno.ENOSPC
    # Nor may it grow the file: only a truncate that frees space goes on.
    with pytest.raises(OSError, match="no space"):
        s.truncate(len(OLD) + 10)
    assert (engine.src / "a.txt").read_bytes() == OLD
    assert not s.dirty
    s.release()
    assert not_kept(engine, "a.txt") == [None]
    assert engine.workspace.writes.busy_paths() == set()


def test_a_truncate_on_a_full_disk_goes_on_and_records_the_loss(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    _disk_full(engine, monkeypatch)
    s.truncate(4)  # frees space: never ENOSPC
    assert (engine.src / "a.txt").read_bytes() == OLD[:4]
    s.write(0, b"more")  # the bytes to keep are gone already: nothing to keep
    s.release()
    vs = engine.history.versions(RelPath("a.txt"))
    assert [v.not_kept for v in vs] == ["disk full", None]
    assert not vs[0].available
    events = [e for _, e in engine.workspace.store.iter_state_log() if e["ev"] == "not-kept"]
    assert [(e["path"], e["version"], e["why"]) for e in events] == [("a.txt", 1, "disk full")]
    with pytest.raises(WorkspaceError, match="not kept: disk full"):
        engine.history.restore(RelPath("a.txt"), 1)
    # An O_TRUNC open goes on too; so does an unlink.
    fd = engine.workspace.writes.begin_write(
        "b.txt", opener(engine, "b.txt", os.O_RDWR | os.O_TRUNC), truncate=True
    )
    fd.release()
    assert (engine.src / "b.txt").read_bytes() == b""
    assert not_kept(engine, "b.txt") == ["disk full", None]
    engine.workspace.writes.unlink("a.txt").run(lambda: os.unlink(engine.src / "a.txt"))
    assert not_kept(engine, "a.txt") == ["disk full", "disk full"]
    assert engine.workspace.store.get_file("a.txt") is None
    assert engine.workspace.writes.busy_paths() == set()


def test_sessions_on_one_inode_share_what_is_kept(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.link(engine.src / "a.txt", engine.src / "link.txt")
    engine.scan()
    calls: list[str] = []
    real = engine.workspace.preserve
    monkeypatch.setattr(engine.workspace, "preserve", lambda rel: (calls.append(rel), real(rel))[1])
    s1 = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    s2 = engine.workspace.writes.begin_write("link.txt", opener(engine, "link.txt"), truncate=False)
    s1.write(0, b"one")
    assert not s2.needs_preserve  # the same inode's bytes are kept already
    s2.write(3, b"two")
    assert calls == ["a.txt"]
    s1.flush()  # recorded: a new version, which the next change must keep first
    assert s2.needs_preserve
    s1.release()
    s2.release()


def test_rename_over_settles_the_writer_first_and_follows_open_sessions(engine: Engine) -> None:
    src = engine.src
    # An editor: writes a temp file, and renames it over the original while
    # the kernel's release of the temp file is still on its way.
    fd = os.open(src / ".a.txt.tmp", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    tmp = engine.workspace.writes.adopt_new(".a.txt.tmp", fd)
    tmp.write(0, b"saved by an editor\n")
    change = engine.workspace.writes.rename(".a.txt.tmp", "a.txt", replaces_file=True)
    change.prepare()  # records the temp file, keeps the inode of a.txt
    assert not tmp.dirty
    os.rename(src / ".a.txt.tmp", src / "a.txt")
    change.commit()
    assert tmp.rel == "a.txt"  # the open session follows its file
    hashes = versions(engine, "a.txt")
    assert len(hashes) == 2
    assert Path(str(engine.history.version_file(RelPath("a.txt"), 1))).read_bytes() == OLD
    assert versions(engine, ".a.txt.tmp") == []
    # Writes through the renamed session are recorded under the new name.
    tmp.write(0, b"SAVED")
    tmp.release()
    assert len(versions(engine, "a.txt")) == 3
    assert (src / "a.txt").read_bytes().startswith(b"SAVED")


def test_unlink_keeps_the_inode_and_forgets_the_name(engine: Engine) -> None:
    s = engine.workspace.writes.begin_write("b.txt", opener(engine, "b.txt"), truncate=False)
    assert (
        engine.workspace.writes.unlink("b.txt").run(lambda: os.unlink(engine.src / "b.txt")) is None
    )
    assert s.rel is None
    assert engine.workspace.file_state(RelPath("b.txt")) is None
    blob = engine.history.version_file(RelPath("b.txt"), 1)
    assert blob is not None
    assert Path(blob).read_bytes() == b"bee\n"
    s.write(0, b"after unlink")  # an unlinked but open file: nothing to record
    s.release()
    assert engine.workspace.writes.busy_paths() == set()


def test_a_failed_change_is_not_recorded_and_frees_its_paths(engine: Engine) -> None:
    change = engine.workspace.writes.rename("nope.txt", "a.txt", replaces_file=True)
    with pytest.raises(FileNotFoundError):
        change.run(lambda: os.rename(engine.src / "nope.txt", engine.src / "a.txt"))
    assert engine.workspace.writes.busy_paths() == set()
    assert (engine.src / "a.txt").read_bytes() == OLD
    assert len(versions(engine, "a.txt")) == 1


class _WatchedLock:
    """A lock that says when someone has come to take it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waiting = threading.Event()

    def __enter__(self) -> None:
        self.waiting.set()
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_a_check_behind_the_mount_never_reads_half_a_write(engine: Engine) -> None:
    """The change feed checks a file changed behind the mount while a write
    through the mount begins: the write waits until the check has read the
    file, so the check records the old bytes, never a torn state."""
    locks = [_WatchedLock() for _ in engine.workspace.writes._stripes]
    engine.workspace.writes._stripes = tuple(locks)  # type: ignore[assignment]
    lock = locks[hash("a.txt") % len(locks)]
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    assert not s.dirty
    lock.waiting.clear()  # begin_write took it on its way through
    seen: list[bytes] = []
    in_check = threading.Event()

    def check(rel: RelPath) -> None:
        in_check.set()
        # The write below has come for the path's lock, and must wait for us.
        assert lock.waiting.wait(60)
        seen.append((engine.src / rel).read_bytes())
        engine.workspace.check_file(rel)

    result: list[bool] = []
    checker = threading.Thread(
        target=lambda: result.append(engine.workspace.writes.check_behind("a.txt", check))
    )
    checker.start()
    assert in_check.wait(60)
    writer = threading.Thread(target=s.write, args=(0, b"NEW"))
    writer.start()
    checker.join(60)
    writer.join(60)
    assert not checker.is_alive()
    assert not writer.is_alive()
    assert seen == [OLD]  # read before the write changed a byte
    assert result == [True]
    assert (engine.src / "a.txt").read_bytes() == b"NEW" + OLD[3:]
    # Now the session is changing the file: a check leaves it to the session.
    assert s.dirty
    ran: list[str] = []
    assert engine.workspace.writes.check_behind("a.txt", ran.append) is False
    assert ran == []
    s.release()
    assert engine.workspace.writes.check_behind("a.txt", ran.append) is True
    assert ran == ["a.txt"]


@pytest.fixture
def every_write(tmp_path: Path) -> Iterator[Engine]:
    """An engine over ``a.txt`` (OLD) that keeps every write as a version."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(OLD)
    config = Config(rescan_interval=0, version_interval=0)
    with Engine.open(src, tmp_path / "store", config=config) as eng:
        eng.scan()
        yield eng


def b3(*contents: bytes) -> list[str]:
    return [blake3.blake3(b).hexdigest() for b in contents]


def truncating(eng: Engine) -> WriteSession:
    """What a write_text (or `> f`) through the mount opens: O_TRUNC, then writes."""
    return eng.workspace.writes.begin_write(
        "a.txt", opener(eng, "a.txt", os.O_WRONLY | os.O_TRUNC), truncate=True
    )


def test_a_scan_never_records_bytes_older_than_a_write_it_overlapped(
    every_write: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan hashes a file changed behind the mount; before it stores what
    # it found, a write through the mount records newer bytes.  Storing the
    # scan's older finding then recorded those old bytes as a new version and
    # left the file's record behind its content (seen under load as one
    # version too many).
    eng = every_write
    behind, through = b"changed behind the mount\n", b"written through the mount\n"
    (eng.src / "a.txt").write_bytes(behind)
    real = registry.select
    wrote: list[bool] = []

    def select(info: FileInfo) -> object:
        # A file's examination picks its parser last, after hashing it and
        # checking it held still: the scan's finding is complete here.
        found = real(info)
        if info.name == "a.txt" and not wrote:  # the write's own check examines too
            wrote.append(True)
            s = truncating(eng)
            s.write(0, through)
            s.release()
        return found

    monkeypatch.setattr(registry, "select", select)
    eng.scan()
    assert wrote  # the write did overlap the scan
    want = b3(OLD, behind, through)
    assert versions(eng, "a.txt") == want
    rec = eng.workspace.store.get_file("a.txt")
    assert rec is not None
    assert rec.hash == want[-1]
    # The next scan finds nothing to do: the record describes the file.
    monkeypatch.setattr(registry, "select", real)
    eng.scan()
    assert versions(eng, "a.txt") == want


def test_a_parse_that_saw_a_write_midway_records_no_torn_version(every_write: Engine) -> None:
    # A re-parse that finds the file changed under it asks the engine to look
    # again.  If the change is a write through the mount still going on (here
    # just truncated, as `> f` or write_text does first), the look must be
    # left to the writer: recording then stored the empty file as a version.
    eng = every_write
    rec = eng.workspace.store.get_file("a.txt")
    assert rec is not None
    new = b"the next revision\n"
    s = truncating(eng)
    outcome = ParseOutcome(CHANGED, hash=b3(b"")[0])
    eng.workspace.apply_parse(
        RelPath("a.txt"), outcome, queued_hash=rec.hash, queued_parser=rec.parser or "text"
    )
    s.write(0, new)
    s.release()
    assert versions(eng, "a.txt") == b3(OLD, new)


def test_a_parse_landing_midway_through_a_write_records_no_torn_version(
    every_write: Engine,
) -> None:
    # The re-parse of the previous revision lands after the next write_text
    # truncated the file and before it wrote.  That tells the write protocol
    # something changed; the writer must not then take its own empty file for
    # a change behind the mount (it recorded it as a version before keeping
    # it; seen under load as one version too many).
    eng = every_write
    rec = eng.workspace.store.get_file("a.txt")
    assert rec is not None
    assert rec.parser is not None
    new = b"the next revision\n"
    s = truncating(eng)
    landed = ParseOutcome(
        OK, hash=rec.hash, parser=rec.parser, units=(("content.txt", "content", OLD.decode()),)
    )
    eng.workspace.apply_parse(
        RelPath("a.txt"), landed, queued_hash=rec.hash, queued_parser=rec.parser
    )
    if s.needs_preserve:
        s.preserve()  # what the daemon does in a worker thread before a write
    s.write(0, new)
    s.release()
    assert versions(eng, "a.txt") == b3(OLD, new)


def test_a_notice_for_the_kept_version_keeps_nothing_again(
    every_write: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers: A's record (and notices that come late for it, such as
    its parse landing) must make B keep A's bytes once, and only once.
    (Every write kept: inside a burst, A's version would be replaced by B's,
    and kept by nobody: swfs.history.versioning.)"""
    engine = every_write
    calls: list[str] = []
    real = engine.workspace.preserve
    monkeypatch.setattr(engine.workspace, "preserve", lambda rel: (calls.append(rel), real(rel))[1])
    a = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    b = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    a.write(0, b"A")
    a.sync(False)  # records A's version
    recorded = engine.workspace.recorded_hash(RelPath("a.txt"))
    assert recorded == blake3.blake3(b"A" + OLD[1:]).hexdigest()
    assert b.needs_preserve  # A's bytes are not kept yet
    b.preserve()
    assert blake3.blake3(engine.workspace.blobs.read_bytes(recorded)).hexdigest() == recorded
    engine.workspace.writes.changed("a.txt")  # a late notice for the record B kept
    engine.workspace.writes.changed("a.txt")  # or one for its view
    assert not b.needs_preserve
    b.write(1, b"B")
    assert calls == ["a.txt", "a.txt"]  # A's first write, then B's, once
    b.sync(False)
    assert b.needs_preserve  # B's own record: its bytes are kept before the next change
    a.release()
    b.release()


def test_a_notice_for_a_newer_record_keeps_again(engine: Engine) -> None:
    b = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    b.preserve()
    assert not b.needs_preserve
    # A version recorded behind B's back (a change behind the mount, found
    # by a check): its notice names another hash than the one B kept.
    (engine.src / "a.txt").write_bytes(b"changed behind the mount\n")
    engine.workspace.check_file(RelPath("a.txt"), force=True)
    assert b.needs_preserve
    b.write(0, b"X")
    b.release()
    hashes = versions(engine, "a.txt")
    assert blake3.blake3(b"changed behind the mount\n").hexdigest() in hashes


def test_a_record_landing_during_a_preserve_is_kept_by_the_write(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preserve kept the old version; a record landed before it
    finished: the session must not believe the new version kept."""
    b = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    real = engine.workspace.preserve

    def preserve_then_record(rel: RelPath) -> str | None:
        kept = real(rel)
        (engine.src / "a.txt").write_bytes(b"recorded meanwhile\n")
        engine.workspace.check_file(RelPath("a.txt"), force=True)
        return kept

    monkeypatch.setattr(engine.workspace, "preserve", preserve_then_record)
    b.preserve()
    assert b.needs_preserve
    monkeypatch.setattr(engine.workspace, "preserve", real)
    b.write(0, b"Z")
    b.release()
    meanwhile = blake3.blake3(b"recorded meanwhile\n").hexdigest()
    assert meanwhile in versions(engine, "a.txt")
    assert engine.workspace.blobs.read_bytes(meanwhile) == b"recorded meanwhile\n"


# -- the close's record, queued off the reply path (flush_later)


def _holding_the_store(engine: Engine) -> tuple[threading.Event, threading.Thread]:
    """A thread in a store write until the returned event is set: a queued
    record waits for it."""
    holding, release = threading.Event(), threading.Event()

    def writer() -> None:
        with engine.workspace.store.write():
            holding.set()
            release.wait(60)

    t = threading.Thread(target=writer)
    t.start()
    assert holding.wait(30)
    return release, t


def test_flush_later_records_the_bytes_written_not_what_the_name_holds_by_then(
    engine: Engine,
) -> None:
    """A close answers at once; its record is made later, in order with the
    changes of names, from the file that was written: here its name holds
    another file by the time the record is made."""
    fd = os.open(engine.src / "new.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    s = engine.workspace.writes.adopt_new("new.txt", fd)  # open for writing only
    s.write(0, b"small and new\n")
    release, t = _holding_the_store(engine)
    try:
        assert s.flush_later()
        assert engine.workspace.writes.busy_paths() == {"new.txt"}  # queued, not made
        assert not s.dirty
        (engine.src / "other.txt").write_bytes(b"another file\n")
        os.rename(engine.src / "other.txt", engine.src / "new.txt")  # behind the mount
    finally:
        release.set()
        t.join(30)
    engine.workspace.writes.drain()
    assert versions(engine, "new.txt")[0] == blake3.blake3(b"small and new\n").hexdigest()
    assert engine.workspace.writes.busy_paths() == set()
    assert s.flush_later()  # nothing written since: nothing to record
    assert s.release_later()
    assert engine.workspace.writes.busy_paths() == set()


def test_a_write_after_a_queued_close_keeps_the_recorded_bytes_first(engine: Engine) -> None:
    """The close's record is queued; the next write waits for it: what it
    keeps first (``preserve``) is the version that record made."""
    s = _written(engine, "a.txt", b"FIRST")
    assert s.flush_later()
    assert s.needs_preserve  # a recorded version from now on
    s.preserve()
    closed = (engine.src / "a.txt").read_bytes()
    assert closed.startswith(b"FIRST")
    assert engine.workspace.recorded_hash(RelPath("a.txt")) == blake3.blake3(closed).hexdigest()
    s.write(0, b"again")
    s.release()
    state = engine.workspace.file_state(RelPath("a.txt"))
    assert state is not None
    assert state.hash == versions(engine, "a.txt")[-1]


def _written(engine: Engine, rel: str, data: bytes) -> WriteSession:
    s = engine.workspace.writes.begin_write(rel, opener(engine, rel), truncate=False)
    s.write(0, data)
    return s


def test_flush_later_leaves_to_a_thread_what_it_cannot_queue(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check behind the mount reading the file, or a queue full of closes'
    records: nothing is done, and ``flush`` records it all the same."""
    from swfs.history import writesession

    before = versions(engine, "a.txt")
    s = _written(engine, "a.txt", b"THE")
    stripe = engine.workspace.writes.stripe("a.txt")
    with stripe:  # what check_behind holds while it reads the file
        assert not s.flush_later()
    assert versions(engine, "a.txt") == before
    assert s.dirty  # still the session's to record
    monkeypatch.setattr(writesession, "MAX_QUEUED_RECORDS", 0)
    assert not s.flush_later()
    assert not s.release_later()
    assert s.dirty
    s.flush()
    assert len(versions(engine, "a.txt")) == len(before) + 1
    s.release()
    assert engine.workspace.writes.busy_paths() == set()


def test_fallocate_is_a_write_only_where_it_changes_what_the_file_reads_as(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swfs.store.fsutil import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE

    calls: list[str] = []
    real = engine.workspace.preserve
    monkeypatch.setattr(engine.workspace, "preserve", lambda rel: (calls.append(rel), real(rel))[1])
    before = versions(engine, "a.txt")
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    # An allocation within the size (or past it, keeping the size): nothing
    # to keep, nothing to record.
    assert not s.fallocate_changes(0, 0, len(OLD))
    s.fallocate(0, 0, len(OLD))
    s.fallocate(FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
    assert (calls, s.dirty) == ([], False)
    # A punched hole changes bytes: kept first, recorded at release.
    assert s.fallocate_changes(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4, 3)
    s.fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4, 3)
    assert calls == ["a.txt"]
    assert s.dirty
    s.release()
    assert (engine.src / "a.txt").read_bytes() == OLD[:4] + bytes(3) + OLD[7:]
    assert len(versions(engine, "a.txt")) == len(before) + 1
    blob = engine.history.version_file(RelPath("a.txt"), 1)
    assert blob is not None
    assert Path(blob).read_bytes() == OLD
    # Growing the file is a write too (one burst with the last: it replaces
    # that version, as a write would: swfs.versioning).
    s = engine.workspace.writes.begin_write("a.txt", opener(engine, "a.txt"), truncate=False)
    assert s.fallocate_changes(0, 0, 4096)
    s.fallocate(0, 0, 4096)
    s.release()
    data = OLD[:4] + bytes(3) + OLD[7:] + bytes(4096 - len(OLD))
    assert versions(engine, "a.txt")[-1] == blake3.blake3(data).hexdigest()


def test_an_unnamed_file_records_nothing_until_it_is_linked_in(engine: Engine) -> None:
    fd = os.open(engine.src, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
    s = engine.workspace.writes.adopt_unnamed(fd)
    assert s.rel is None
    assert not s.needs_preserve
    s.write(0, b"no name yet\n")
    s.sync(False)
    assert engine.workspace.writes.busy_paths() == set()
    libc_link(fd, engine.src / "named.txt")
    engine.workspace.writes.named(s, "named.txt")
    assert engine.workspace.writes.busy_paths() == {"named.txt"}  # the session records it
    s.write(12, b"and a name\n")
    s.release()
    data = b"no name yet\nand a name\n"
    assert versions(engine, "named.txt") == [blake3.blake3(data).hexdigest()]
    # One never linked: nothing recorded, nothing left.
    fd = os.open(engine.src, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o644)
    s = engine.workspace.writes.adopt_unnamed(fd)
    s.write(0, b"gone at close\n")
    s.release()
    assert sorted(p.name for p in engine.src.iterdir()) == ["a.txt", "b.txt", "named.txt"]


def libc_link(fd: int, path: Path) -> None:
    """linkat(fd, "", AT_EMPTY_PATH), else through /proc/self/fd."""
    from mountd.fsutil import link_fd

    dfd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        link_fd(fd, dfd, path.name)
    finally:
        os.close(dfd)


def test_a_batch_of_unlinks_syncs_its_kept_bytes_once_then_drops_the_held_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder keeps the bytes of a batch of unlinked files with no
    fsync in between (each cost about 15 ms), syncs them at the batch's end,
    and only then drops the links that held them: until the kept bytes are
    durable in the store, they are durable in ``held/``."""
    from swfs.history.writesession import RECORD_QUIET_ENV

    monkeypatch.setenv(RECORD_QUIET_ENV, "1")  # both unlinks land in one batch
    src = tmp_path / "src"
    src.mkdir()
    data = {f"f{i}.bin": os.urandom(3000 + i) for i in range(3)}
    for name, b in data.items():
        (src / name).write_bytes(b)
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        ws = eng.workspace
        held = Path(str(ws.held_dir()))
        events: list[str] = []
        real_link_in, real_fsync = ws.blobs.link_in, os.fsync

        def link_in(path: Path, expected: str | None = None) -> object:
            events.append("keep")
            return real_link_in(path, expected=expected)

        def fsync(fd: int) -> None:
            events.append("fsync held" if os.listdir(held) else "fsync")
            real_fsync(fd)

        monkeypatch.setattr(ws.blobs, "link_in", link_in)
        monkeypatch.setattr(os, "fsync", fsync)
        dfd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in data:
                change = ws.writes.unlink(name, target=(dfd, name, os.lstat(src / name)))
                assert not change.needs_prepare()  # held, nothing to keep first
                os.unlink(src / name)
                change.commit_later()
            ws.writes.drain()
        finally:
            os.close(dfd)
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert events.count("keep") == len(data), events
        last_keep = max(i for i, e in enumerate(events) if e == "keep")
        syncs = events[last_keep + 1 :]
        assert syncs, events
        assert set(events[: last_keep + 1]) == {"keep"}, events  # no fsync between keeps
        assert all(e == "fsync held" for e in syncs), events  # held until synced
        assert not os.listdir(held)
        for name, b in data.items():
            (v,) = eng.history.versions(RelPath(name))
            assert blake3.blake3(b).hexdigest() == v.hash
            assert ws.blobs.read_bytes(v.hash) == b


def test_a_file_with_another_name_is_kept_first_not_held(engine: Engine) -> None:
    """An unlink of one name of a file with two keeps the bytes first: a
    held link would show in the other name's link count until recorded."""
    os.link(engine.src / "a.txt", engine.src / "link.txt")
    engine.scan()
    parent = os.open(engine.src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        st = os.stat("a.txt", dir_fd=parent, follow_symlinks=False)
        change = engine.workspace.writes.unlink("a.txt", (parent, "a.txt", st))
        assert change.needs_prepare()
        change.run(lambda: os.unlink("a.txt", dir_fd=parent))
    finally:
        os.close(parent)
    assert os.stat(engine.src / "link.txt").st_nlink == 1
    assert engine.workspace.blobs.read_bytes(blake3.blake3(OLD).hexdigest()) == OLD


def test_a_queued_close_then_a_rename_gets_the_parser_of_the_new_name(engine: Engine) -> None:
    """git's lock file pattern: ``config.lock`` written and closed, renamed
    to ``config``; the close's record is made after the rename (from its
    descriptor, with the file's stat after the rename), and the rename's
    record still picks the parser by the new name."""
    writes = engine.workspace.writes
    fd = os.open(engine.src / "config.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    s = writes.adopt_new("config.lock", fd)
    s.write(0, b"[core]\n\tbare = false\n")
    release, holder = _holding_the_store(engine)
    try:
        assert s.flush_later()
        assert s.release_later()
        change = writes.rename("config.lock", "config", replaces_file=False)
        assert not change.needs_prepare()
        os.rename(engine.src / "config.lock", engine.src / "config")
        change.commit_later()
    finally:
        release.set()
        holder.join(30)
    writes.drain()
    rec = engine.workspace.store.get_file("config")
    assert rec is not None
    head = (engine.src / "config").read_bytes()
    info = FileInfo(name="config", extension="", size=len(head), head=head)
    chosen = registry.select(info)
    assert chosen is not None
    assert rec.parser == chosen.cache_key(info)
    lock = FileInfo(name="config.lock", extension=".lock", size=len(head), head=head)
    picked = registry.select(lock)
    assert picked is None or picked.cache_key(lock) != rec.parser  # the names pick differently
