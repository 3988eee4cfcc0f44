"""Passthrough workloads: the same operations on the native folder and on the mount.

Targets are the ratios a tuned pyfuse3 passthrough reached on the reference
machine (see README.md); a mount "meets" one when its median ratio is no worse.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from pathlib import Path

from bench import gen
from bench.common import Ctx, MiB, paired_rounds, run_tool, throwaway_store, timed
from bench.report import Target, WorkloadResult

log = logging.getLogger(__name__)

BLOCK = MiB
PAGE = 4096


def ref(x: float) -> Target:
    return Target("<=", x, f"<={x:g}x (ref)")


def _read_all(path: Path) -> int:
    buf = bytearray(BLOCK)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            total += n
    return total


def _write_all(path: Path, size: int) -> None:
    block = os.urandom(BLOCK)
    with open(path, "wb", buffering=0) as f:
        left = size
        while left > 0:
            left -= f.write(block[: min(left, BLOCK)])


def seqread(ctx: Ctx, result: WorkloadResult) -> None:
    """Sequential 1 MiB reads of the whole big file: cold (caches dropped) and warm."""
    size = ctx.sizes.big_file
    src = gen.big_file(ctx.data, size)
    result.info.update(file_bytes=size, block=BLOCK)
    cold = result.metric("read_cold", "s", cold=True, target=ref(15))
    result.metric("read_warm", "s", target=ref(1.3))

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        path = root / "big" / "data.bin"
        ctx.drop_caches()
        t_cold = timed(lambda: _read_all(path))
        t_warm = timed(lambda: _read_all(path))
        return {"read_cold": t_cold, "read_warm": t_warm}

    with throwaway_store(src), ctx.mounter.mounted(src, ctx.mountpoint("big")) as m:
        ctx.mounter.settle(m)
        paired_rounds(ctx, result, m, one)
    ctx.cold_note(cold)


def seqwrite(ctx: Ctx, result: WorkloadResult) -> None:
    """Write a new file of the big file's size in 1 MiB blocks and close it (no
    fsync, like plain ``dd``); the file is removed and synced outside the timing.
    The native side writes to a directory beside the data set (see
    Ctx.native_scratch)."""
    size = ctx.sizes.big_file
    src = gen.big_file(ctx.data, size)
    result.info.update(file_bytes=size, block=BLOCK, fsync=False)
    result.metric("write", "s", target=ref(5.3))

    native = ctx.native_scratch("write")
    (native / "big").mkdir()

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        path = root / "big" / f"out-{side}-{r}.bin"
        try:
            t = timed(lambda: _write_all(path, size))
        finally:
            path.unlink(missing_ok=True)
            os.sync()
        return {"write": t}

    with throwaway_store(src), ctx.mounter.mounted(src, ctx.mountpoint("big")) as m:
        ctx.mounter.settle(m)
        paired_rounds(ctx, result, m, one, native_root=native)


def randread(ctx: Ctx, result: WorkloadResult) -> None:
    """Random 4 KiB preads (fixed seed, page aligned) from the big file, warm: the
    same reads were done once on each side before the first round."""
    size = ctx.sizes.big_file
    count = ctx.sizes.rand_reads
    src = gen.big_file(ctx.data, size)
    rng = random.Random(4096)
    offsets = [rng.randrange(size // PAGE) * PAGE for _ in range(count)]
    result.info.update(file_bytes=size, reads=count, io_bytes=PAGE, cache="warm")
    result.metric("rand_4k", "s", target=ref(31))

    def reads(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            for off in offsets:
                os.pread(fd, PAGE, off)
        finally:
            os.close(fd)

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        return {"rand_4k": timed(lambda: reads(root / "big" / "data.bin"))}

    with throwaway_store(src), ctx.mounter.mounted(src, ctx.mountpoint("big")) as m:
        ctx.mounter.settle(m)
        for root in (m.source, m.mountpoint):
            reads(root / "big" / "data.bin")
        paired_rounds(ctx, result, m, one)


def roundtrip(ctx: Ctx, result: WorkloadResult) -> None:
    """The cost of one request the kernel cannot answer from its caches:
    ``getxattr`` of a name the file does not have, N times (the mount's side is
    one FUSE round trip each).  No target: it is the floor under every
    workload above that the kernel does not cache (an open, a flush, a stat
    after a write, an ``ls -l`` xattr probe, a directory read)."""
    calls = ctx.sizes.rand_reads // 4
    src = gen.big_file(ctx.data, ctx.sizes.big_file)
    result.info.update(calls=calls, request="getxattr user.bench.absent")
    result.metric("xattr_miss", "s")

    def probe(path: Path) -> None:
        for _ in range(calls):
            try:  # noqa: SIM105 (contextlib.suppress would add its own cost to each call)
                os.getxattr(path, "user.bench.absent")
            except OSError:
                pass

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        return {"xattr_miss": timed(lambda: probe(root / "big" / "data.bin"))}

    with throwaway_store(src), ctx.mounter.mounted(src, ctx.mountpoint("big")) as m:
        ctx.mounter.settle(m)
        paired_rounds(ctx, result, m, one)


def smallfiles(ctx: Ctx, result: WorkloadResult) -> None:
    """Create (write 100 bytes), stat and remove N small files, 100 per directory.
    The bytes are binary (a NUL among them), so a swfs mount records and hashes
    each file but has nothing to parse: this measures the file path, not parsing.
    The native side works in a directory beside the data set (Ctx.native_scratch)."""
    n = ctx.sizes.small_files
    src = ctx.data / "small"
    src.mkdir(parents=True, exist_ok=True)
    result.info.update(files=n, per_dir=100, file_bytes=100)
    result.metric("create", "s", target=ref(19))
    result.metric("stat", "s", target=ref(6.3))
    result.metric("remove", "s")
    payload = b"\0bench\0" + bytes(range(93))
    native = ctx.native_scratch("small")

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        base = root / f"churn-{side}-{r}"
        dirs = [base / f"d{i:03d}" for i in range((n + 99) // 100)]
        paths = [dirs[i // 100] / f"f{i:05d}" for i in range(n)]

        def create() -> None:
            base.mkdir()
            for d in dirs:
                d.mkdir()
            for p in paths:
                with open(p, "wb") as f:
                    f.write(payload)

        def stat() -> None:
            for p in paths:
                os.stat(p)

        def remove() -> None:
            for p in paths:
                os.unlink(p)
            for d in dirs:
                d.rmdir()
            base.rmdir()

        # Write back what the previous round left dirty (10,000 files and, on
        # the mount's side, the store), so neither side's creates pay for it.
        os.sync()
        try:
            out = {"create": timed(create), "stat": timed(stat), "remove": timed(remove)}
        finally:
            if base.exists():
                shutil.rmtree(base)
        return out

    with throwaway_store(src), ctx.mounter.mounted(src, ctx.mountpoint("small")) as m:
        ctx.mounter.settle(m)
        paired_rounds(ctx, result, m, one, native_root=native)


def tree(ctx: Ctx, result: WorkloadResult) -> None:
    """``find``, ``ls -lR`` and ``grep -r`` over a tree of text files (warm: one
    untimed pass of each on each side first); outputs go to a pipe."""
    n_files, n_dirs = ctx.sizes.tree_files, ctx.sizes.tree_dirs
    src = gen.file_tree(ctx.data, n_files, n_dirs)
    expect = gen.count_needles(n_files)
    result.info.update(files=n_files, dirs=n_dirs, grep_matches_expected=expect)
    result.metric("find", "s", target=ref(21))
    result.metric("ls_lR", "s", target=ref(5.0))
    result.metric("grep_r", "s", target=ref(10.8))
    seen: dict[str, int] = {}

    def tools(root: Path) -> dict[str, float]:
        t_find, out_find = run_tool(["find", root / "tree"])
        t_ls, _ = run_tool(["ls", "-lR", root / "tree"])
        t_grep, out_grep = run_tool(["grep", "-r", gen.NEEDLE, root / "tree"])
        seen["find_lines"] = out_find.count(b"\n")
        seen["grep_lines"] = out_grep.count(b"\n")
        return {"find": t_find, "ls_lR": t_ls, "grep_r": t_grep}

    def one(root: Path, side: str, r: int) -> dict[str, float]:
        out = tools(root)
        if seen["grep_lines"] != expect:
            result.add_note(f"{side} grep found {seen['grep_lines']} lines, expected {expect}")
        return out

    with ctx.mounter.mounted(src, ctx.mountpoint("tree")) as m:
        ctx.mounter.settle(m)
        tools(m.source)
        tools(m.mountpoint)
        paired_rounds(ctx, result, m, one)
    result.info.update(find_lines=seen.get("find_lines"))


WORKLOADS = {
    "seqread": seqread,
    "seqwrite": seqwrite,
    "randread": randread,
    "roundtrip": roundtrip,
    "smallfiles": smallfiles,
    "tree": tree,
}
