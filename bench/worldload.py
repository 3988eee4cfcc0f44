"""``swfs mount --at``: how long a read-only world of a snapshot of
``ws_files`` files (11,000 in the full run) takes to mount beside the live
mount, to walk, and to read every file of (then again: a world never
changes, so the second reading should cost only the opens), while the live
mount serves."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from bench.common import Ctx
from bench.historyloads import _tree
from bench.mounter import MOUNT_TIMEOUT, UMOUNT_TIMEOUT, BenchError, SwfsMounter, Unsupported
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)


def _walk(root: Path) -> list[Path]:
    """Every native file below ``root`` (the generated trees left out)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        out += [Path(dirpath, f) for f in filenames]
    return out


def world(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync", "snapshot")
    files = 1000 if ctx.quick else ctx.sizes.ws_files
    dirs = max(10, files // 20)
    src = ctx.data / f"reset-{files}"  # the reset workload's tree, shared
    rels = _tree(src, files, dirs)
    result.info.update(files=files, dirs=dirs)
    mount_s = result.metric(
        "world_mount_s",
        "s",
        kind=ABSOLUTE,
        target=Target("<", 10.0, "seconds, not minutes"),
        note="swfs mount --at, start to ready",
    )
    walk_s = result.metric("world_walk_s", "s", kind=ABSOLUTE, note="os.walk of the native tree")
    read_s = result.metric("world_read_all_s", "s", kind=ABSOLUTE, note="every file read once")
    reread_s = result.metric(
        "world_reread_all_s", "s", kind=ABSOLUTE, note="every file read again, same mount"
    )
    mnt, wmnt = ctx.mountpoint("world-live"), ctx.mountpoint("world-at")
    for d in (mnt, wmnt):
        d.mkdir(parents=True, exist_ok=True)
    with sw.mounted(src, mnt) as m:
        sw.settle(m)
        name = f"bench-{int(time.time())}"
        sw.cmd("snapshot", mnt, name, timeout=3600)
        try:
            for _ in range(ctx.rounds):
                t0 = time.perf_counter()
                sw.cmd("mount", "--at", name, src, wmnt, timeout=MOUNT_TIMEOUT)
                mount_s.values.append(time.perf_counter() - t0)
                try:
                    t0 = time.perf_counter()
                    seen = _walk(wmnt)
                    walk_s.values.append(time.perf_counter() - t0)
                    if len(seen) != len(rels):
                        raise BenchError(f"the world shows {len(seen)} files, not {len(rels)}")
                    t0 = time.perf_counter()
                    for p in seen:
                        p.read_bytes()
                    read_s.values.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    for p in seen:
                        p.read_bytes()
                    reread_s.values.append(time.perf_counter() - t0)
                finally:
                    sw.cmd("umount", wmnt, timeout=UMOUNT_TIMEOUT)
        finally:
            sw.cmd("snapshot", mnt, "--delete", name, timeout=600)


WORKLOADS = {"world": world}
