"""``swfs reset`` against the number of changes: on a workspace of
``ws_files`` files (11,000 in the full run), make 10, 100 and 1,000 changes
through the mount (edits, new files in new directories, deletions, renames),
then time ``swfs reset MNT`` back to the baseline.  The figure should grow
with the changes, not with the tree."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from pathlib import Path

from bench.common import STORE, Ctx
from bench.mounter import BenchError, SwfsMounter, Unsupported
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)


def _tree(root: Path, files: int, dirs: int) -> list[str]:
    """``files`` small files of random bytes (no parser wants them: the
    figure is the reset's, not the parsers') over ``dirs`` directories."""
    marker = root.with_name(root.name + ".complete")  # outside the workspace
    rng = random.Random(files * 7919 + dirs)
    rels = [f"d{i % dirs:04d}/f{i:06d}.bin" for i in range(files)]
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        for rel in rels:
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(rng.randbytes(rng.randint(512, 4096)))
        marker.write_text("")
    return rels


def _change(mnt: Path, rels: list[str], n: int, seed: int) -> None:
    """``n`` changes through the mount: 40% edits, 20% new files (half in new
    directories), 20% deletions, 20% renames."""
    rng = random.Random(seed)
    picked = rng.sample(rels, n)
    edits, adds, dels = n * 4 // 10, n * 2 // 10, n * 2 // 10
    for rel in picked[:edits]:
        with open(mnt / rel, "r+b") as f:
            f.write(rng.randbytes(64))
    for i in range(adds):
        sub = f"new-{seed}-{i // 10}/deep" if i % 2 else rels[i].rpartition("/")[0]
        p = mnt / sub / f"added-{seed}-{i}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(1024))
    for rel in picked[edits : edits + dels]:
        os.unlink(mnt / rel)
    for i, rel in enumerate(picked[edits + dels : n - adds]):
        os.rename(mnt / rel, mnt / f"{rel}.renamed-{i}")


def reset(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync", "reset")
    files = 1000 if ctx.quick else ctx.sizes.ws_files
    dirs = max(10, files // 20)
    src = ctx.data / f"reset-{files}"
    rels = _tree(src, files, dirs)
    shutil.rmtree(src / STORE, ignore_errors=True)
    marker = src.with_name(src.name + ".complete")
    marker.unlink(missing_ok=True)  # written back once the tree is clean again
    result.info.update(files=files, dirs=dirs)
    counts = (10, 100) if ctx.quick else (10, 100, 1000)
    metrics = {}
    for n in counts:
        metrics[n] = (
            result.metric(
                f"reset_{n}_changes_s",
                "s",
                kind=ABSOLUTE,
                target=Target("<", 1.0, "<1 s") if n <= 20 else None,
                note="in the daemon (--json secs)",
            ),
            result.metric(
                f"reset_{n}_changes_cli_s", "s", kind=ABSOLUTE, note="swfs reset, start to exit"
            ),
        )
    mnt = ctx.mountpoint("reset")
    mnt.mkdir(parents=True, exist_ok=True)
    with sw.mounted(src, mnt) as m:
        sw.settle(m)
        for r in range(ctx.rounds):
            for n in counts:
                _change(mnt, rels, n, seed=r * 10_000 + n)
                t0 = time.perf_counter()
                cp = sw.cmd("reset", mnt, "--json", timeout=600)
                wall = time.perf_counter() - t0
                doc = json.loads(cp.stdout)
                undone = doc["removed"] + doc["restored"] + doc["renamed"]
                if undone != n:
                    raise BenchError(f"reset undid {undone} changes, {n} were made")
                summary = (mnt / ".review" / "SUMMARY.md").read_text()
                if "0 changed path(s)" not in summary:
                    raise BenchError(f"after reset the review still shows changes: {summary}")
                metrics[n][0].values.append(float(doc["secs"]))
                metrics[n][1].values.append(wall)
    marker.write_text("")


WORKLOADS = {"reset": reset}
