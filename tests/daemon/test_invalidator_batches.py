"""What changes behind the mount cost the daemon's loop.  One pass of the
invalidator (``mountd.invalidator``): a burst of changes in one folder
compares that folder with what the kernel was told once, not once per path,
and a pass with no inode to drop starts no worker thread (pyfuse3's
notifications stubbed: no mount).  The change feed's touched paths: each
looked at once per read."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio
import trio.testing

from mountd import invalidator
from mountd.operations import Operations
from mountd.options import MountOptions
from mountd.reply import awaited
from swfs.engine import Engine
from swfs.workspace import Config


@dataclass
class Ctx:
    uid: int = 0
    gid: int = 0
    pid: int = os.getpid()
    umask: int = 0o022


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Operations]:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "b.txt").write_text("bee\n")
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        o = Operations(e, str(src), str(e.store_dir), MountOptions(passthrough="off"))
        try:
            yield o
        finally:
            o.close()


def test_a_burst_behind_the_mount_costs_one_look_at_its_folder(
    ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[str] = []
    lstat = ops.native.lstat

    def counted(rel: str) -> os.stat_result:
        looked.append(rel)
        return lstat(rel)

    hops: list[object] = []
    run_sync = invalidator.hop.run_sync

    async def counted_hop(fn: Any, *args: Any, **kw: Any) -> Any:
        hops.append(fn)
        return await run_sync(fn, *args, **kw)

    dropped: list[int] = []
    monkeypatch.setattr(ops.native, "lstat", counted)
    monkeypatch.setattr(invalidator.hop, "run_sync", counted_hop)
    monkeypatch.setattr(
        invalidator.pyfuse3, "invalidate_inode", lambda ino, attr_only=False: dropped.append(ino)
    )
    monkeypatch.setattr(invalidator.pyfuse3, "invalidate_entry", lambda *a: None, raising=False)

    async def main() -> None:
        d = await awaited(ops.lookup(pyfuse3.ROOT_INODE, b"d", Ctx()))
        ops.table.remember(ops.table.get(d.st_ino))  # type: ignore[arg-type]
        ops.mounted = True
        looked.clear()
        async with trio.open_nursery() as nursery:
            await nursery.start(ops.invalidator.run)
            # Names the kernel never looked up, gone again: the folder as the
            # kernel was told of it still holds.
            ops.changed_behind([f"d/tmp{i}" for i in range(20)])
            with trio.fail_after(60):
                while ops.invalidator.passes < 1:  # until the batch has gone through
                    await trio.testing.wait_all_tasks_blocked(0.01)
            ops.invalidator.stop()

    trio.run(main)
    assert looked.count("d") == 1, looked
    assert dropped == []
    assert hops == []


def test_a_path_touched_twice_in_one_read_is_looked_at_once(
    ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file made behind the mount comes as IN_CREATE and IN_ATTRIB in one
    read of the change feed: its inode is looked up once."""
    looked: list[str] = []
    lstat = ops.native.lstat

    def counted(rel: str) -> os.stat_result:
        looked.append(rel)
        return lstat(rel)

    monkeypatch.setattr(ops.native, "lstat", counted)
    ops.touched_behind(["d/b.txt", "d/b.txt", "d", "d/b.txt"])
    assert sorted(looked) == ["d", "d/b.txt"]
