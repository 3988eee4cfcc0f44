"""Requests answered at once, without a coroutine (``mountd.reply``): the one
handler of each request called directly as our pyfuse3 calls it, against
the real engine.  What it answers at once is what its awaited path answers;
it journals the same events, counts each request once, leaves nothing open
where it hands back an awaitable, and hands back one for what must wait."""

from __future__ import annotations

import errno
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import pyfuse3
import pytest
import trio

from mountd import binding, reqcount
from mountd.nodes import Tree
from mountd.operations import Operations
from mountd.options import MountOptions
from mountd.provider import NativeOpen
from mountd.reply import awaited, pending
from swfs.engine import Engine
from swfs.evidence.access import iter_events, open_readonly
from swfs.workspace import Config
from tests.enginewrap import Watched


@dataclass
class Ctx:
    uid: int = 0
    gid: int = 0
    pid: int = os.getpid()
    umask: int = 0o022


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Any]:
    src = tmp_path / "src"
    (src / "d" / "e").mkdir(parents=True)
    (src / "d" / "e" / "a.txt").write_text("alpha\nbeta\n")
    (src / "d" / "b.txt").write_text("bee\n")
    (src / "top.bin").write_bytes(b"\0\1\2")
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        yield Watched(e)


@pytest.fixture
def ops(engine: Any) -> Iterator[Operations]:
    o = Operations(engine, str(engine.src), str(engine.store_dir), MountOptions(passthrough="off"))
    try:
        yield o
    finally:
        o.close()


def _close(got: Any) -> None:
    """Close an awaitable unrun, and the coroutines it holds (the handler's
    wrapper, ``mountd.operations.handler``, holds the provider's)."""
    while got is not None:
        frame = getattr(got, "cr_frame", None)
        inner = frame.f_locals.get("got") if frame is not None else None
        got.close()
        got = inner if pending(inner) else None


def at_once(got: Any) -> Any:
    """The reply where the handler answered at once; None where it handed
    back an awaitable (closed here, unrun: the async path's to serve)."""
    if pending(got):
        _close(got)
        return None
    return got


async def call(fn: Any, *args: Any) -> Any:
    """A handler called and its reply awaited, as stock pyfuse3 calls it."""
    return await awaited(fn(*args))


def answered(got: Any) -> bool:
    """A release or flush was answered at once (see ``at_once``)."""
    if pending(got):
        _close(got)
        return False
    return True


def _fds_on(path: Path) -> list[int]:
    """This process's descriptors open on ``path``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                out.append(int(fd))
        except OSError:
            continue
    return out


def _ino(ops: Operations, rel: str) -> int:
    ino = pyfuse3.ROOT_INODE
    for name in rel.split("/"):
        attr = at_once(ops.lookup(ino, os.fsencode(name), Ctx()))
        assert attr is not None, name
        ino = attr.st_ino
    return ino


def _b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def _reads(ops: Operations, engine: Any) -> list[dict[str, Any]]:
    ops.journal.flush()
    con = open_readonly(engine.store_dir)
    try:
        events = list(iter_events(con, kind="read"))
    finally:
        con.close()
    for e in events:  # what differs between any two opens of one file
        for key in ("seq", "t", "process"):
            e.pop(key)
    return events


def test_lookup_and_getattr_answer_as_the_async_handlers(ops: Operations) -> None:
    ctx: Any = Ctx()
    before = reqcount.COUNTS.copy()
    d = at_once(ops.lookup(pyfuse3.ROOT_INODE, b"d", ctx))
    assert d is not None
    a = at_once(ops.lookup(_ino(ops, "d/e"), b"a.txt", ctx))
    assert a is not None
    assert a.st_size == len("alpha\nbeta\n")
    same = trio.run(call, ops.lookup, _ino(ops, "d/e"), b"a.txt", ctx)
    for field in ("st_ino", "st_size", "st_mode", "st_mtime_ns", "entry_timeout"):
        assert getattr(a, field) == getattr(same, field), field
    got = at_once(ops.getattr(a.st_ino, ctx))
    assert got is not None
    assert (got.st_ino, got.st_size) == (a.st_ino, a.st_size)
    # Generated trees are left to the async handlers.
    assert at_once(ops.lookup(pyfuse3.ROOT_INODE, b".parsed", ctx)) is None
    parsed = trio.run(call, ops.lookup, pyfuse3.ROOT_INODE, b".parsed", ctx)
    assert at_once(ops.getattr(parsed.st_ino, ctx)) is None
    assert at_once(ops.lookup(parsed.st_ino, b"d", ctx)) is None
    # A missing name is an error answered here, counted like any lookup.
    with pytest.raises(pyfuse3.FUSEError) as exc:
        at_once(ops.lookup(d.st_ino, b"absent.txt", ctx))
    assert exc.value.errno == errno.ENOENT
    after = reqcount.COUNTS
    # Every call counts once, answered at once or handed on: d, d/e twice (d
    # and e each), a.txt twice, absent.txt (an error is an answer), .parsed
    # twice, d in .parsed.  Answered at once: all but the three of .parsed.
    assert after["lookup"] - before["lookup"] == 11
    assert after["nowait_lookup"] - before["nowait_lookup"] == 8
    assert after["getattr"] - before["getattr"] == 2  # a.txt at once, .parsed handed on
    assert after["nowait_getattr"] - before["nowait_getattr"] == 1


def test_open_and_release_of_a_reader(ops: Operations, engine: Any) -> None:
    ctx: Any = Ctx()
    ino = _ino(ops, "d/e/a.txt")
    path = engine.src / "d" / "e" / "a.txt"
    before = reqcount.COUNTS.copy()
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    assert not binding.NOFLUSH or fi.noflush  # no FLUSH round trip for a close that cannot write
    h = ops.handles[fi.fh]
    assert isinstance(h, NativeOpen)
    assert h.fh.hash is not None
    assert _fds_on(path) == [h.fh.fd]
    assert trio.run(ops.read, fi.fh, 0, 100) == b"alpha\nbeta\n"
    node = ops.table.get(ino)
    assert node is not None
    assert node.opens == 1
    assert answered(ops.release(fi.fh)) is True
    assert _fds_on(path) == []
    assert fi.fh not in ops.handles
    assert node.opens == 0
    counts = reqcount.COUNTS
    assert counts["open"] - before["open"] == counts["release"] - before["release"] == 1
    # A release of a handle already gone: nothing to do, answered at once.
    assert answered(ops.release(fi.fh)) is True


def test_the_journal_records_what_the_async_path_records(ops: Operations, engine: Any) -> None:
    ctx: Any = Ctx()
    ino = _ino(ops, "d/e/a.txt")

    async def via_async() -> None:
        fi = await awaited(ops.open(ino, os.O_RDONLY, ctx))
        await ops.read(fi.fh, 0, 100)
        await awaited(ops.release(fi.fh))

    trio.run(via_async)
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    trio.run(ops.read, fi.fh, 0, 100)
    assert answered(ops.release(fi.fh))
    first, second = _reads(ops, engine)
    assert first == second
    assert first["path"] == "d/e/a.txt"
    assert first["hash"]
    assert first["lines"] == [1, 2], first


def test_writers_and_changed_files_are_left_to_open(ops: Operations, engine: Any) -> None:
    ctx: Any = Ctx()
    ino = _ino(ops, "d/b.txt")
    path = engine.src / "d" / "b.txt"
    handles = dict(ops.handles)
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC):
        assert at_once(ops.open(ino, flags, ctx)) is None
    assert ops.handles == handles
    assert _fds_on(path) == []

    # A writer with writes to record: its release is answered at once, the
    # record queued; until it is made the path is busy.
    fi = trio.run(call, ops.open, ino, os.O_RDWR, ctx)
    trio.run(call, ops.write, fi.fh, 0, b"BEE")
    assert answered(ops.release(fi.fh)) is True
    assert fi.fh not in ops.handles
    assert path.read_bytes() == b"BEE\n"
    assert engine.workspace.file_state("d/b.txt").hash == _b3(b"BEE\n")  # waits for it

    # One whose close (FLUSH) queued their record, or that wrote nothing:
    # its session ends here.
    for write in (b"BEA", None):
        fi = trio.run(call, ops.open, ino, os.O_RDWR, ctx)
        if write is not None:
            trio.run(call, ops.write, fi.fh, 0, write)
            assert answered(ops.flush(fi.fh)) is True
        assert answered(ops.release(fi.fh)) is True
        assert fi.fh not in ops.handles
        engine.workspace.writes.drain()  # a queued record holds the file until made
        assert _fds_on(path) == []
    assert not engine.workspace.writes.busy(["d/b.txt"])
    assert engine.workspace.file_state("d/b.txt").hash == _b3(b"BEA\n")
    assert engine.history.versions("d/b.txt")[-1].hash == _b3(b"BEA\n")  # recorded at the close

    # Changed behind the mount: the engine must look first (a thread).
    path.write_text("changed behind\n")
    assert at_once(ops.open(ino, os.O_RDONLY, ctx)) is None
    assert _fds_on(path) == []
    fi = trio.run(call, ops.open, ino, os.O_RDONLY, ctx)
    assert trio.run(ops.read, fi.fh, 0, 100) == b"changed behind\n"
    assert answered(ops.release(fi.fh)) is True
    # Looked at once: the next open needs no waiting again.
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    assert answered(ops.release(fi.fh))

    # Gone behind the mount: the error the async open gives.
    path.unlink()
    with pytest.raises(pyfuse3.FUSEError) as exc:
        at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert exc.value.errno == errno.ENOENT


def test_with_kernel_passthrough_on_a_small_file_stays_in_the_page_cache(
    ops: Operations,
) -> None:
    ctx: Any = Ctx()
    fast = ops.fastpath
    fast.wanted, fast._checked = True, True  # as after an INIT that granted passthrough
    ino = _ino(ops, "top.bin")
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    assert not fast.passed_through(fi.fh)
    assert fast._cached[ino] == 1  # a passthrough open of it must now wait for this one
    assert answered(ops.release(fi.fh))
    assert ino not in fast._cached


def _unit_ino(ops: Operations, rel: str) -> tuple[int, str]:
    """The inode of the first unit of ``rel`` under .parsed, looked up by the
    async handlers (a generated tree's names are theirs), and its name."""
    ctx: Any = Ctx()
    ino = trio.run(call, ops.lookup, pyfuse3.ROOT_INODE, b".parsed", ctx).st_ino
    for name in rel.split("/"):
        ino = trio.run(call, ops.lookup, ino, os.fsencode(name), ctx).st_ino
    names, _ = trio.run(ops.listing, ops._node(ino))
    unit = names[2]
    return trio.run(call, ops.lookup, ino, os.fsencode(unit), ctx).st_ino, unit


def test_open_and_release_of_a_unit(ops: Operations, engine: Any) -> None:
    """A unit of a current view opens here with the bytes and the journal
    event the async open gives; its release closes the event."""
    ctx: Any = Ctx()
    ino, unit = _unit_ino(ops, "d/e/a.txt")

    async def via_async() -> bytes:
        fi = await awaited(ops.open(ino, os.O_RDONLY, ctx))
        data = await ops.read(fi.fh, 0, 1 << 16)
        await awaited(ops.release(fi.fh))
        return data

    data = trio.run(via_async)
    assert b"alpha" in data
    before = reqcount.COUNTS.copy()
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    assert fi.keep_cache  # the same bytes as the async open's: the kernel keeps its pages
    assert trio.run(ops.read, fi.fh, 0, 1 << 16) == data
    node = ops.table.get(ino)
    assert node is not None
    assert node.opens == 1
    assert answered(ops.release(fi.fh)) is True
    assert fi.fh not in ops.handles
    assert node.opens == 0
    counts = reqcount.COUNTS
    assert counts["open"] - before["open"] == counts["release"] - before["release"] == 1
    first, second = _reads(ops, engine)
    assert first == second
    assert first["path"] == f".parsed/d/e/a.txt/{unit}"
    # A write to a unit is the async handler's to refuse.
    assert at_once(ops.open(ino, os.O_WRONLY, ctx)) is None


def test_a_unit_of_a_stale_view_is_left_to_open(ops: Operations, engine: Any) -> None:
    """A view that must be waited for (stale, the mount waits) is handed on
    to the awaited open: nothing is answered or opened at once; it counts
    as one open."""
    ctx: Any = Ctx()
    ino, unit = _unit_ino(ops, "d/b.txt")
    (engine.src / "d" / "b.txt").write_text("changed behind\n")
    engine.workspace.check_file("d/b.txt")
    handles = dict(ops.handles)
    before = reqcount.COUNTS.copy()
    assert at_once(ops.open(ino, os.O_RDONLY, ctx)) is None
    assert ops.handles == handles
    assert reqcount.COUNTS["open"] == before["open"] + 1
    assert reqcount.COUNTS["nowait_open"] == before["nowait_open"]
    trio.run(engine.drain)
    # The change dropped the kernel's entry: its next lookup (async: a
    # generated tree's) brings the index up to date, and opens answer here
    # again.  Polled: an index older than its TTL is rebuilt first.
    parent = ops.table.find_synthetic(Tree.PARSED, "d/b.txt")
    assert parent is not None
    for _ in range(50):
        trio.run(call, ops.lookup, parent.ino, os.fsencode(unit), ctx)
        fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
        if fi is not None:
            break
    assert fi is not None
    assert b"changed behind" in trio.run(ops.read, fi.fh, 0, 1 << 16)
    assert answered(ops.release(fi.fh))


def test_a_unit_opened_again_is_answered_from_its_last_open(
    ops: Operations, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `grep -r` opens every unit on each pass: a unit opened again while
    its view's kept state holds (no change event, the file still holding
    the recorded bytes) is answered from its last open, without asking its
    freshness or reading it again; a change behind the mount is seen at the
    next open all the same (the view is stale: left to the awaited open)."""
    ctx: Any = Ctx()
    ino, _ = _unit_ino(ops, "d/b.txt")
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    data = trio.run(ops.read, fi.fh, 0, 1 << 16)
    assert answered(ops.release(fi.fh))
    asked: list[str] = []
    for part, name in ((engine.workspace, "freshness"), (engine.views, "view_unit")):
        real = getattr(part, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            asked.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(part, name, counted)
    fi = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert fi is not None
    assert trio.run(ops.read, fi.fh, 0, 1 << 16) == data
    assert answered(ops.release(fi.fh))
    assert asked == []
    (engine.src / "d" / "b.txt").write_text("changed behind the mount, no event yet\n")
    assert at_once(ops.open(ino, os.O_RDONLY, ctx)) is None
    assert "freshness" in asked


def test_getxattr_of_a_native_file_answers_its_own_names(ops: Operations, engine: Any) -> None:
    """A file's own attribute, or the errno of an absent one, is answered
    here as the async handler answers it; the engine's names (``user.sw.*``)
    and generated nodes are left to the async handler."""
    ctx: Any = Ctx()
    os.setxattr(engine.src / "d" / "b.txt", "user.colour", b"teal")
    ino = _ino(ops, "d/b.txt")
    before = reqcount.COUNTS.copy()
    assert at_once(ops.getxattr(ino, b"user.colour", ctx)) == b"teal"
    assert trio.run(call, ops.getxattr, ino, b"user.colour", ctx) == b"teal"
    for name in (b"user.absent", b"security.capability"):
        with pytest.raises(pyfuse3.FUSEError) as now:
            at_once(ops.getxattr(ino, name, ctx))
        with pytest.raises(pyfuse3.FUSEError) as later:
            trio.run(call, ops.getxattr, ino, name, ctx)
        assert now.value.errno == later.value.errno, name
    assert reqcount.COUNTS["getxattr"] - before["getxattr"] == 6
    assert at_once(ops.getxattr(ino, b"user.sw.hash", ctx)) is None
    parsed = trio.run(call, ops.lookup, pyfuse3.ROOT_INODE, b".parsed", ctx).st_ino
    assert at_once(ops.getxattr(parsed, b"user.absent", ctx)) is None
    # Those two are handed on: counted, not answered at once.
    assert reqcount.COUNTS["getxattr"] - before["getxattr"] == 8
    assert reqcount.COUNTS["nowait_getxattr"] - before["nowait_getxattr"] == 6


class _Watching:
    """Stands for a change feed that watches the whole tree (its events are
    tested in tests/engine/test_changefeed.py and through a mount)."""

    watching = True


def _count_xattr_calls(ops: Operations, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"getxattr": 0, "listxattr": 0}
    source = ops.native_provider.source
    for name in calls:
        real = getattr(source, name)

        def counted(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(source, name, counted)
    return calls


def test_absent_xattr_names_are_answered_from_the_names_listed(
    ops: Operations, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the change feed watches the tree, a file's absent names cost one
    listing, then no system call; a present name is read each time; a
    change through the mount, or one the feed reports behind it (by either
    name of a hard link), makes the next question list the names again."""
    ctx: Any = Ctx()
    ops.feed = _Watching()  # type: ignore[assignment]
    b = engine.src / "d" / "b.txt"
    os.setxattr(b, "user.colour", b"teal")
    ino = _ino(ops, "d/b.txt")
    calls = _count_xattr_calls(ops, monkeypatch)

    def absent(name: bytes = b"user.absent") -> int:
        with pytest.raises(pyfuse3.FUSEError) as exc:
            at_once(ops.getxattr(ino, name, ctx))
        return exc.value.errno

    assert absent() == errno.ENODATA
    assert calls == {"getxattr": 0, "listxattr": 1}
    for _ in range(5):
        assert absent() == errno.ENODATA
        assert absent(b"security.capability") == errno.EOPNOTSUPP
    assert calls == {"getxattr": 0, "listxattr": 1}
    assert at_once(ops.getxattr(ino, b"user.colour", ctx)) == b"teal"
    assert at_once(ops.getxattr(ino, b"user.colour", ctx)) == b"teal"
    assert calls == {"getxattr": 2, "listxattr": 1}

    # Through the mount: seen by the next question.
    trio.run(ops.setxattr, ino, b"user.absent", b"here", ctx)
    assert at_once(ops.getxattr(ino, b"user.absent", ctx)) == b"here"
    trio.run(ops.removexattr, ino, b"user.absent", ctx)
    assert absent() == errno.ENODATA

    # Behind the mount, through a hard link the mount has not looked up: the
    # inode's node forgets its names when the feed reports the other name.
    os.link(b, engine.src / "d" / "e" / "link.txt")
    assert absent() == errno.ENODATA
    os.setxattr(engine.src / "d" / "e" / "link.txt", "user.absent", b"behind")
    ops.touched_behind(["d/e/link.txt"])
    assert at_once(ops.getxattr(ino, b"user.absent", ctx)) == b"behind"
    os.removexattr(b, "user.absent")
    ops.touched_behind(None)  # events lost: every node forgets
    assert absent() == errno.ENODATA
    assert trio.run(ops.listxattr, ino, ctx)  # a listing refreshes the names too
    n = calls["listxattr"]
    assert absent() == errno.ENODATA
    assert calls["listxattr"] == n

    # No feed watching the whole tree: every question asks the file.
    ops.feed = None
    before = dict(calls)
    for _ in range(3):
        assert absent() == errno.ENODATA
    assert calls["getxattr"] - before["getxattr"] == 3
    assert calls["listxattr"] == before["listxattr"]


def test_write_nowait_writes_unless_bytes_must_be_kept_first(ops: Operations, engine: Any) -> None:
    """A write that needs nothing kept first (the bytes of the last record
    are kept already, or there are none: a new file) is made here; one that
    must keep them first is the async handler's (a worker thread), and
    nothing is written here then.  A read-only handle gets the async
    handler's errno."""
    ctx: Any = Ctx()
    path = engine.src / "d" / "b.txt"
    ino = _ino(ops, "d/b.txt")
    before = reqcount.COUNTS.copy()
    fi = trio.run(call, ops.open, ino, os.O_RDWR, ctx)
    assert at_once(ops.write(fi.fh, 0, b"X")) is None  # "bee" must be kept first
    assert path.read_bytes() == b"bee\n"
    assert trio.run(call, ops.write, fi.fh, 0, b"S") == 1  # keeps it, then writes
    assert at_once(ops.write(fi.fh, 1, b"EE")) == 2  # kept: no waiting now
    trio.run(call, ops.flush, fi.fh)
    assert answered(ops.release(fi.fh))
    assert path.read_bytes() == b"SEE\n"
    assert reqcount.COUNTS["write"] - before["write"] == 3  # two handed on, one at once
    assert reqcount.COUNTS["nowait_write"] - before["nowait_write"] == 1
    old = engine.history.versions("d/b.txt")[0]
    assert old.available  # "bee" was kept before the first write

    parent = _ino(ops, "d")
    fi, attr = trio.run(call, ops.create, parent, b"new.txt", 0o644, os.O_WRONLY, ctx)
    assert at_once(ops.write(fi.fh, 0, b"fresh\n")) == 6  # nothing to keep
    trio.run(call, ops.flush, fi.fh)
    assert answered(ops.release(fi.fh))
    assert engine.workspace.file_state("d/new.txt").hash == _b3(b"fresh\n")

    ro = at_once(ops.open(ino, os.O_RDONLY, ctx))
    assert ro is not None
    with pytest.raises(pyfuse3.FUSEError) as now:
        at_once(ops.write(ro.fh, 0, b"no"))
    with pytest.raises(pyfuse3.FUSEError) as later:
        trio.run(call, ops.write, ro.fh, 0, b"no")
    assert now.value.errno == later.value.errno == errno.EBADF
    assert answered(ops.release(ro.fh))


def _journal(ops: Operations, engine: Any, kind: str) -> list[dict[str, Any]]:
    ops.journal.flush()
    con = open_readonly(engine.store_dir)
    try:
        events = list(iter_events(con, kind=kind))
    finally:
        con.close()
    for e in events:  # what differs between any two events of one kind
        for key in ("seq", "t", "process"):
            e.pop(key, None)
    return events


def test_create_and_flush_answer_as_the_async_handlers(ops: Operations, engine: Any) -> None:
    """A new file created here has what the async handler gives it (owner,
    mode under the caller's umask, the reply's attributes), its small write
    is recorded at the close answered here, and the journal holds the same
    write event as for a file made through the async handlers."""
    ctx: Any = Ctx(uid=1234, gid=4321, umask=0o027)
    parent = _ino(ops, "d")
    before = reqcount.COUNTS.copy()

    async def via_async() -> None:
        fi, _ = await awaited(ops.create(parent, b"slow.txt", 0o666, os.O_WRONLY, ctx))
        await awaited(ops.write(fi.fh, 0, b"same bytes\n"))
        await awaited(ops.flush(fi.fh))
        await awaited(ops.release(fi.fh))

    trio.run(via_async)
    got = at_once(ops.create(parent, b"quick.txt", 0o666, os.O_WRONLY, ctx))
    assert got is not None
    fi, attr = got
    path = engine.src / "d" / "quick.txt"
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 4321, 0o640)
    assert (attr.st_ino, attr.st_size, attr.st_mode) == (st.st_ino, 0, st.st_mode)
    h = ops.handles[fi.fh]
    assert isinstance(h, NativeOpen)
    assert _fds_on(path) == [h.fh.fd]
    assert at_once(ops.write(fi.fh, 0, b"same bytes\n")) == 11
    assert answered(ops.flush(fi.fh)) is True
    assert engine.workspace.file_state("d/quick.txt").hash == _b3(
        b"same bytes\n"
    )  # recorded at close
    assert answered(ops.release(fi.fh))
    assert _fds_on(path) == []
    assert engine.workspace.file_state("d/slow.txt").hash == _b3(b"same bytes\n")
    slow, quick = _journal(ops, engine, "write")
    assert quick.pop("path") == "d/quick.txt"
    assert slow.pop("path") == "d/slow.txt"
    assert quick == slow
    counts = reqcount.COUNTS
    for op in ("create", "flush"):  # awaited or not, one handler answers at once
        assert counts[op] - before[op] == 2, op
        assert counts[f"nowait_{op}"] - before[f"nowait_{op}"] == 2, op


def test_create_nowait_declines_what_must_wait(ops: Operations, engine: Any) -> None:
    """An existing name opened by a create (no O_EXCL) is handed on (the
    open may wait), and nothing is done at once; with O_EXCL it is EEXIST
    at once, as is a generated tree's name at the root."""
    ctx: Any = Ctx()
    parent = _ino(ops, "d")
    handles = dict(ops.handles)
    assert at_once(ops.create(parent, b"b.txt", 0o644, os.O_WRONLY, ctx)) is None
    assert ops.handles == handles
    assert (engine.src / "d" / "b.txt").read_text() == "bee\n"
    with pytest.raises(pyfuse3.FUSEError) as exc:
        at_once(ops.create(parent, b"b.txt", 0o644, os.O_WRONLY | os.O_EXCL, ctx))
    assert exc.value.errno == errno.EEXIST
    with pytest.raises(pyfuse3.FUSEError) as exc:
        at_once(ops.create(pyfuse3.ROOT_INODE, b".parsed", 0o644, os.O_WRONLY, ctx))
    assert exc.value.errno == errno.EEXIST
    fi, _ = trio.run(call, ops.create, parent, b"b.txt", 0o644, os.O_WRONLY, ctx)  # opens it
    assert answered(ops.release(fi.fh))
    assert (engine.src / "d" / "b.txt").read_text() == "bee\n"


def test_flush_answers_at_once_and_queues_the_record(ops: Operations, engine: Any) -> None:
    """A close answers at once whatever the file's size; its record is
    made off the reply path, and a look at the file's state waits for it."""
    ctx: Any = Ctx()
    parent = _ino(ops, "d")
    got = at_once(ops.create(parent, b"big.bin", 0o644, os.O_WRONLY, ctx))
    assert got is not None
    fi = got[0]
    data = os.urandom(1 << 20)
    assert at_once(ops.write(fi.fh, 0, data)) == len(data)
    assert answered(ops.flush(fi.fh))
    assert engine.workspace.file_state("d/big.bin").hash == _b3(data)
    assert answered(ops.release(fi.fh))


def test_stock_pyfuse3_gets_coroutines_of_the_same_handlers(
    ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stock pyfuse3 (which awaits every handler) the binding wraps the
    handlers that may answer at once in coroutines: the same answers, awaited."""
    ctx: Any = Ctx()
    ino = _ino(ops, "d/e/a.txt")
    direct = at_once(ops.getattr(ino, ctx))
    monkeypatch.setattr(binding, "FORK", False)
    assert binding.adapt(ops) is ops
    for name in binding.IMMEDIATE:
        assert inspect.iscoroutinefunction(getattr(ops, name)), name
    got = trio.run(ops.getattr, ino, ctx)
    assert (got.st_ino, got.st_size) == (direct.st_ino, direct.st_size)
    fi = trio.run(ops.open, ino, os.O_RDONLY, ctx)
    assert trio.run(ops.read, fi.fh, 0, 100) == b"alpha\nbeta\n"
    trio.run(ops.release, fi.fh)
    assert fi.fh not in ops.handles
