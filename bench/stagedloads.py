"""``swfs mount --staged``: what the staged layer costs.  On a tree of
``files`` small files, the first write to a file (a copy-up: its bytes,
mode, owner and times into the store) against a second write to the same
file (no copy-up), then ``swfs commit`` and ``swfs discard`` of ``n``
staged files (commit: temp file, fsync, rename over, per file)."""

from __future__ import annotations

import json
import random
import shutil
import statistics
import time
from pathlib import Path

from bench.common import STORE, Ctx
from bench.mounter import BenchError, Mount, SwfsMounter, Unsupported, fuse_daemon_pid
from bench.report import ABSOLUTE, WorkloadResult


def _tree(root: Path, files: int) -> list[str]:
    rng = random.Random(files)
    shutil.rmtree(root, ignore_errors=True)
    rels = [f"d{i % 20:02d}/f{i:05d}.bin" for i in range(files)]
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(rng.randint(4096, 65536)))
    return rels


def _append(path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "ab") as f:
        f.write(b"staged\n")
    return time.perf_counter() - t0


def staged(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync", "commit", "discard")
    files = 200 if ctx.quick else 2000
    n = 50 if ctx.quick else 500
    src = ctx.data / f"staged-{files}"
    mnt = ctx.mountpoint("staged")
    mnt.mkdir(parents=True, exist_ok=True)
    result.info.update(files=files, staged=n)
    first = result.metric("first_write_ms", "ms", kind=ABSOLUTE, note="append with copy-up")
    again = result.metric("second_write_ms", "ms", kind=ABSOLUTE, note="append, no copy-up")
    commit = result.metric(f"commit_{n}_files_s", "s", kind=ABSOLUTE, note="swfs commit")
    discard = result.metric(f"discard_{n}_files_s", "s", kind=ABSOLUTE, note="swfs discard")
    for r in range(ctx.rounds):
        rels = _tree(src, files)
        shutil.rmtree(src / STORE, ignore_errors=True)
        m = Mount(src, mnt)
        sw.cmd("mount", "--staged", src, mnt, timeout=120)
        try:
            m.pid = fuse_daemon_pid(mnt)
            sw.cmd("sync", mnt, timeout=sw.sync_timeout)
            picked = random.Random(r).sample(rels, n)
            first.values.append(1000 * statistics.median(_append(mnt / p) for p in picked))
            again.values.append(1000 * statistics.median(_append(mnt / p) for p in picked))
            t0 = time.perf_counter()
            doc = json.loads(sw.cmd("commit", mnt, "--json", timeout=600).stdout)
            commit.values.append(time.perf_counter() - t0)
            if len(doc["committed"]) != n:
                raise BenchError(f"commit wrote {len(doc['committed'])} files, {n} were staged")
            for p in picked:
                _append(mnt / p)
            t0 = time.perf_counter()
            doc = json.loads(sw.cmd("discard", mnt, "--json", timeout=600).stdout)
            discard.values.append(time.perf_counter() - t0)
            if len(doc["discarded"]) != n:
                raise BenchError(f"discard dropped {len(doc['discarded'])} files, not {n}")
        finally:
            sw.unmount(m)


WORKLOADS = {"staged": staged}
