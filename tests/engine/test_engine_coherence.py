"""The engine's coherence without FUSE: parse workers run in parallel, a
write never goes ahead without its history, hard links share freshness,
and ``swfs check`` finds views that claim to be current when they are not."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from swfs.api import Cause, Freshness, RelPath
from swfs.check import run_checks
from swfs.engine import Engine, ParseQueue
from swfs.store import treecache
from swfs.store.blobs import HashMismatch
from swfs.store.fsutil import hash_file
from swfs.views.parsework import ParseOutcome, ParsePool, WorkerLimits
from swfs.workspace import Config


async def poll_until(cond: Callable[[], bool], bound: float) -> None:
    """Until ``cond()`` holds, at most ``bound`` seconds (the caller asserts)."""
    with trio.move_on_after(bound):
        while True:
            if cond():
                return
            await trio.sleep(0.01)


# -- the parse queue wakes every idle worker -----------------------------------------


def test_a_burst_of_jobs_after_idle_runs_on_every_worker() -> None:
    """Workers that went idle must all wake for a burst of jobs: 4 workers and
    8 jobs run 4 at a time, not one at a time."""
    queue = ParseQueue()
    active = 0
    peak = 0
    done: list[str] = []
    gate = [trio.Event()]

    async def worker() -> None:
        nonlocal active, peak
        while True:
            rel = await queue.take()
            active += 1
            peak = max(peak, active)
            await gate[0].wait()
            active -= 1
            done.append(rel)
            queue.finish(rel, again=False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(worker)
            await trio.testing.wait_all_tasks_blocked()  # every worker idle
            for i in range(8):
                queue.submit(f"f{i}.txt")
            await trio.testing.wait_all_tasks_blocked()
            assert active == 4, f"{active} of 4 workers took a job"
            gate[0].set()
            gate[0] = trio.Event()
            await trio.testing.wait_all_tasks_blocked()
            assert active == 4  # the second half runs side by side too
            gate[0].set()
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(done) == sorted(f"f{i}.txt" for i in range(8))
            assert queue.idle()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert peak == 4


def test_the_queue_keeps_coalescing_and_its_front_lane() -> None:
    queue = ParseQueue()
    for rel in ("a", "b", "c", "a", "b"):
        queue.submit(rel)
    queue.submit("c", front=True)

    async def main() -> list[str]:
        return [await queue.take() for _ in range(3)]

    assert trio.run(main) == ["c", "a", "b"]
    progress = queue.progress("c")
    assert progress is not None
    assert progress[0] == "parsing"
    queue.submit("a")  # written while being parsed: parsed again afterwards
    queue.finish("a", again=False)
    assert queue.progress("a") == ("queued", 0.0)
    assert queue.progress("zzz") is None


def test_engine_reparses_in_parallel_once_workers_went_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    config = Config(limits=WorkerLimits(workers=4), rescan_interval=0)
    active = 0
    peak = 0
    gate = trio.Event()
    real = ParsePool.parse

    async def counting(self: ParsePool, abs_path: str, rel: str, **kw: Any) -> ParseOutcome:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        try:
            await gate.wait()
            return await real(self, abs_path, rel, **kw)
        finally:
            active -= 1

    with Engine.open(src, tmp_path / "store", config=config) as eng:
        eng.scan()
        monkeypatch.setattr(ParsePool, "parse", counting)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(eng.run_background)
                queue = eng.queue
                assert queue is not None
                await poll_until(queue.idle, 30)  # the workers go idle first
                for i in range(8):
                    (src / f"f{i}.txt").write_text(f"file {i}\n")
                await trio.to_thread.run_sync(eng.scan)  # requests 8 parses
                await poll_until(lambda: active >= 4, 30)
                assert active == 4
                gate.set()
                await poll_until(queue.idle, 60)
                nursery.cancel_scope.cancel()

        trio.run(main)
        assert peak == 4
        assert eng.views.counts()["current"] == 8


# -- no silent loss ---------------------------------------------------------------------


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "ws"
    (src / "notes").mkdir(parents=True)
    (src / "notes" / "readme.md").write_text("# Readme\nthe first line\n")
    (src / "other.txt").write_text("other\n")
    with Engine.open(src, tmp_path / "store", config=Config(rescan_interval=0)) as eng:
        eng.scan()
        trio.run(eng.drain)
        yield eng


def test_preserve_that_never_gets_a_stable_version_fails_with_eio(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that changes under every try is not written over: EIO, never a
    write that goes ahead without its bytes kept."""
    rel = RelPath("notes/readme.md")
    path = engine.src / rel
    tries = 0

    def always_changed(fd: int, *, expected: str | None = None) -> str:
        nonlocal tries
        tries += 1
        raise HashMismatch(expected=expected or "", actual="0" * 64, source=f"fd {fd}")

    monkeypatch.setattr(engine.workspace.blobs, "put_fd", always_changed)
    with pytest.raises(OSError, match="kept changing") as info:
        engine.workspace.preserve(rel)
    assert info.value.errno == errno.EIO
    assert tries >= 3
    assert not engine.workspace.blobs.has(hash_file(path))
    # The failed preserve does not shield the path from the next rescan.
    assert rel not in engine.workspace.writes.busy_paths()


def test_preserve_of_a_file_rewritten_while_hashed_fails_with_eio(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written behind our back during every hash: no version is known, and
    the write through the mount must not go ahead."""
    rel = RelPath("notes/readme.md")
    path = engine.src / rel
    real_hash = treecache.hash_fd
    n = 0

    def hash_while_written(fd: int) -> str:
        nonlocal n
        n += 1
        h = real_hash(fd)
        path.write_text(f"# Readme\nrewritten {'again ' * n}\n")  # after the hash, before its check
        return h

    path.write_text("# Readme\nchanged behind the engine\n")
    monkeypatch.setattr(treecache, "hash_fd", hash_while_written)
    with pytest.raises(OSError, match="kept changing") as info:
        engine.workspace.preserve(rel)
    assert info.value.errno == errno.EIO


def test_preserve_still_keeps_a_file_that_changed_once_behind_our_back(engine: Engine) -> None:
    rel = RelPath("notes/readme.md")
    path = engine.src / rel
    path.write_text("# Readme\nchanged behind the engine\n")
    engine.workspace.preserve(rel)
    h = hash_file(path)
    assert engine.workspace.blobs.has(h)
    assert engine.history.versions(rel)[-1].hash == h
    assert run_checks(engine.workspace) == []


# -- hard links -------------------------------------------------------------------------


def _header(engine: Engine, rel: str) -> str:
    view = engine.views.parsed_view(RelPath(rel))
    assert view is not None
    return view.units[0].content.decode().partition("\n")[0]


def test_a_write_through_one_hard_link_makes_every_name_stale_at_once(engine: Engine) -> None:
    src = engine.src
    os.link(src / "notes" / "readme.md", src / "notes" / "hardlink.md")
    engine.scan()
    trio.run(engine.drain)
    a, b = RelPath("notes/readme.md"), RelPath("notes/hardlink.md")
    old = hash_file(src / a)
    assert engine.workspace.freshness(a) is Freshness.CURRENT
    a_versions = len(engine.history.versions(a))
    b_versions = len(engine.history.versions(b))

    # What the daemon does for `echo x >> notes/hardlink.md` through the mount.
    engine.workspace.preserve(b)
    with open(src / b, "a") as f:
        f.write("x\n")
    engine.workspace.record_write(b)

    new = hash_file(src / a)
    assert new != old
    for rel in (a, b):
        assert engine.workspace.freshness(rel) is Freshness.STALE, rel
        state = engine.workspace.file_state(rel)
        assert state is not None
        assert state.hash == new, rel
        head = _header(engine, rel)
        assert 'freshness="stale"' in head
        assert f'current="b3:{new[:16]}"' in head
        assert f'current="b3:{old[:16]}"' not in head
    summary = engine.reviews.review_summary().decode()
    assert new[:16] in summary
    # Each name keeps its own history: one new version each, caused by the write.
    va, vb = engine.history.versions(a), engine.history.versions(b)
    assert len(va) == a_versions + 1
    assert len(vb) == b_versions + 1
    assert va[-1].hash == vb[-1].hash == new
    assert va[-1].cause is Cause.WRITE
    # The old bytes are kept for both histories.
    assert engine.history.version_file(a, va[-2].number) is not None
    assert run_checks(engine.workspace) == []
    trio.run(engine.drain)
    for rel in (a, b):
        assert engine.workspace.freshness(rel) is Freshness.CURRENT
        view = engine.views.parsed_view(rel)
        assert view is not None
        assert view.units[0].content.decode().endswith("x\n")


def test_a_hard_link_that_went_away_is_not_recorded_again(engine: Engine) -> None:
    src = engine.src
    os.link(src / "notes" / "readme.md", src / "notes" / "hardlink.md")
    engine.scan()
    os.unlink(src / "notes" / "hardlink.md")
    os.link(src / "other.txt", src / "other-link.txt")  # another inode with two names
    engine.workspace.preserve(RelPath("notes/readme.md"))
    with open(src / "notes" / "readme.md", "a") as f:
        f.write("x\n")
    engine.workspace.record_write(RelPath("notes/readme.md"))
    assert engine.workspace.get_record("notes/hardlink.md") is not None  # the rescan removes it
    assert (
        engine.workspace.other_names("notes/readme.md", os.lstat(src / "notes" / "readme.md")) == []
    )


# -- swfs check: no view claims current for other bytes -------------------------------


def test_check_finds_every_view_the_hard_link_trial_left_claiming_current(
    engine: Engine,
) -> None:
    src = engine.src
    # Behind the engine's back: the hard-link trial of the issue.
    os.link(src / "notes" / "readme.md", src / "notes" / "hardlink.md")
    (src / "gone.txt").write_text("soon gone\n")
    engine.scan()
    trio.run(engine.drain)
    old = hash_file(src / "notes" / "readme.md")
    with open(src / "notes" / "hardlink.md", "a") as f:
        f.write("x\n")
    new = hash_file(src / "notes" / "readme.md")
    # And one rewritten in place with its size and mtime put back.
    other = src / "other.txt"
    st = os.stat(other)
    other.write_text("OTHER\n")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    # And one deleted.
    os.unlink(src / "gone.txt")

    problems = [p for p in run_checks(engine.workspace) if p.check == "views"]
    messages = "\n".join(p.message for p in problems)
    assert len(problems) == 4, messages
    for rel in ("notes/readme.md", "notes/hardlink.md"):
        assert (
            f"{rel}: its view claims current for b3:{old[:16]} but the file holds b3:{new[:16]}"
            in messages
        )
    assert "other.txt: its view claims current" in messages
    assert "gone.txt: its view claims current but the file is gone" in messages

    repaired = run_checks(engine.workspace, repair=True)
    assert all(p.repaired for p in repaired if p.check == "views")
    assert run_checks(engine.workspace) == []
    assert engine.workspace.freshness(RelPath("notes/readme.md")) is Freshness.STALE
    assert engine.workspace.get_record("gone.txt") is None


def test_check_accepts_a_touched_file_and_a_stale_view(engine: Engine) -> None:
    os.utime(engine.src / "other.txt", (1, 1))  # new signature, same bytes
    (engine.src / "notes" / "readme.md").write_text("# Readme\nnew\n")
    engine.workspace.check_file(RelPath("notes/readme.md"))  # stale: claims nothing current
    assert engine.workspace.freshness(RelPath("notes/readme.md")) is Freshness.STALE
    assert run_checks(engine.workspace) == []


def test_check_views_handles_paths_longer_than_a_store_key(engine: Engine) -> None:
    deep = engine.src / ("d" * 200) / ("e" * 200)
    deep.mkdir(parents=True)
    (deep / "long.txt").write_text("long\n")
    engine.scan()
    trio.run(engine.drain)
    assert run_checks(engine.workspace) == []
    (deep / "long.txt").write_text("longer now\n")
    problems = run_checks(engine.workspace)
    assert [p.check for p in problems] == ["views"]
    assert "long.txt: its view claims current" in problems[0].message
