"""What the access journal costs: the same reads on a mount that records
them and on one started with ``--no-journal``.

Ratios are journal-on over journal-off (the "native" column is the mount
without the journal); the goal is under 1.10.  The two mounts alternate
(off, on, on, off, ...), both warmed before anything is timed.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

from bench import gen
from bench.common import Ctx, run_tool
from bench.mounter import BenchError, Mount, SwfsMounter, Unsupported, fuse_daemon_pid
from bench.report import Target, WorkloadResult

log = logging.getLogger(__name__)

WORD = "covenant"
REPEAT = 5


def _mount(sw: SwfsMounter, src: Path, mnt: Path, store: Path, journal: bool) -> Mount:
    mnt.mkdir(parents=True, exist_ok=True)
    m = Mount(src, mnt)
    flags = ("--store", str(store), *(() if journal else ("--no-journal",)))
    sw.cmd("mount", *flags, src, mnt, timeout=120)
    m.pid = fuse_daemon_pid(mnt)
    sw.cmd("sync", mnt, timeout=sw.sync_timeout)
    return m


def _loads(mnt: Path) -> dict[str, list[str]]:
    return {
        # grep -r over every unit of every parsed file
        "grep_parsed": ["grep", "-rn", WORD, str(mnt / ".parsed")],
        # every native file opened and read to the end
        "read_native": [
            "bash",
            "-c",
            'find "$0" -path "$0/.*" -prune -o -type f -print0 | xargs -0 cat | wc -c',
            str(mnt),
        ],
    }


def journal(ctx: Ctx, result: WorkloadResult) -> None:
    """The same folder mounted twice at once, with its own store each: one
    mount records, the other runs ``--no-journal``; each load runs on both,
    in alternating order, ``REPEAT`` times per round (the medians count)."""
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync")
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    scratch = ctx.scratch("journal")
    off_mnt, on_mnt = ctx.mountpoint("journal-off"), ctx.mountpoint("journal-on")
    names = list(_loads(off_mnt))
    metrics = {
        name: result.metric(
            name, "s", target=Target("<", 1.10, "<10%"), note="journal on / --no-journal"
        )
        for name in names
    }
    off = _mount(sw, src, off_mnt, scratch / "store-off", False)
    try:
        on = _mount(sw, src, on_mnt, scratch / "store-on", True)
        try:
            loads = {False: _loads(off_mnt), True: _loads(on_mnt)}
            for side in (False, True):  # warm both: the kernel's and the daemons' caches
                for argv in loads[side].values():
                    run_tool(argv)
            for r in range(ctx.rounds):
                for name in names:
                    times: dict[bool, list[float]] = {False: [], True: []}
                    for k in range(REPEAT):
                        order = (False, True) if (r + k) % 2 == 0 else (True, False)
                        for side in order:
                            t, out = run_tool(loads[side][name])
                            if not out:
                                raise BenchError(f"{name}: no output")
                            times[side].append(t)
                    metrics[name].native.append(statistics.median(times[False]))
                    metrics[name].mount.append(statistics.median(times[True]))
        finally:
            sw.unmount(on)
    finally:
        sw.unmount(off)
    result.info.update(files=ctx.sizes.ws_files, rounds=ctx.rounds, repeat=REPEAT)


WORKLOADS = {"journal": journal}
