"""What the access journal costs: the same reads on a mount that records
them and on one started with ``--no-journal``.

Ratios are journal-on over journal-off (the "native" column is the mount
without the journal); the goal is under 1.10.  The two mounts alternate
(off, on, off, on, ...), each warmed before it is timed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bench import gen
from bench.common import Ctx, run_tool
from bench.mounter import BenchError, Mount, SwfsMounter, Unsupported, fuse_daemon_pid
from bench.report import Target, WorkloadResult

log = logging.getLogger(__name__)

WORD = "covenant"


def _mount(sw: SwfsMounter, src: Path, mnt: Path, journal: bool) -> Mount:
    mnt.mkdir(parents=True, exist_ok=True)
    m = Mount(src, mnt)
    sw.cmd("mount", *(() if journal else ("--no-journal",)), src, mnt, timeout=120)
    m.pid = fuse_daemon_pid(mnt)
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
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync")
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    mnt = ctx.mountpoint("journal")
    metrics = {
        name: result.metric(
            name, "s", target=Target("<", 1.10, "<10%"), note="journal on / --no-journal"
        )
        for name in _loads(mnt)
    }
    for r in range(ctx.rounds * 2):
        on = r % 2 == 1
        m = _mount(sw, src, mnt, on)
        try:
            sw.settle(m)
            for name, argv in _loads(mnt).items():
                run_tool(argv)  # warm: the kernel's and the daemon's caches
                t, out = run_tool(argv)
                if not out:
                    raise BenchError(f"{' '.join(argv)}: no output")
                (metrics[name].mount if on else metrics[name].native).append(t)
        finally:
            sw.unmount(m)
    result.info.update(files=ctx.sizes.ws_files, rounds=ctx.rounds)


WORKLOADS = {"journal": journal}
