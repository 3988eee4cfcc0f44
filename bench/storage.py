"""What versions cost: the figures of the storage part of issue 16.

- ``fsstress_store_vs_allocated``: several processes doing fsstress-style
  random operations (writes at random offsets, appends, truncates that leave
  holes, creates, unlinks, renames, fsyncs; written buffers filled as
  fsstress fills them) through the mount; the store's allocated size against
  the workspace's allocated size (goal: at most 2x).  Also recorded with
  random (incompressible) data: ``fsstress_random_store_vs_allocated``.
- ``bytes_per_version_1byte_10MiB``: store growth per version for one-byte
  edits of a 10 MiB random file, each its own version (goal: under 1 MiB).
- ``sparse_2g_create_close_s`` / ``sparse_2g_rewrite_close_s`` (workload
  ``sparse_close``): the close of a 2 GiB sparse file written through the
  mount, new and then rewritten in place (which first keeps the old
  version; goal: under 1 s).
- ``edit_1g_1byte_close_s``: the close after a one-byte edit of a 1 GiB
  file (one 1 MiB leaf is rehashed, the rest reused: swfs.treecache).
- ``daemon_rss_mb`` (workload ``daemon_memory``, run on its own with
  ``--only daemon_memory``): the daemon's resident memory after 100,000
  small mixed operations (goal: under 300 MB), with the RSS at the start and
  after 30,000 (``daemon_rss_start_mb``, ``daemon_rss_mid_mb``).  On a
  loaded two-core machine the full run takes about an hour.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import random
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import STORE, Ctx, MiB, swfs_mounter
from bench.mounter import Mount, SwfsMounter, Unsupported, proc_status_kb
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)

# (quick, full) sizes.
FSSTRESS_LOAD = ((2, 400), (8, 1250))  # processes, operations each
# Operations at which the daemon's memory is sampled (the last is the end).
MEMORY_OPS = ((1_500, 5_000), (30_000, 100_000))


def _sw(ctx: Ctx, *options: str) -> SwfsMounter:
    return swfs_mounter(ctx, "mount", "umount", "sync", options=options)


def _allocated(root: Path, *, skip: str | None = None) -> int:
    """Allocated bytes of the files under ``root`` (du), each inode once."""
    total = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if skip is not None and skip in dirnames:
            dirnames.remove(skip)
        for name in filenames:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _store_bytes(src: Path) -> int:
    """The store without its disposable cache of reassembled versions."""
    store = src / STORE
    total = _allocated(store)
    cache = store / "blobs" / "cache"
    if cache.is_dir():
        total -= _allocated(cache)
    reserve = store / "reserve"  # held back for a full disk, not history's cost
    if reserve.exists():
        total -= reserve.stat().st_blocks * 512
    return total


def _blob_bytes(src: Path) -> int:
    blobs = src / STORE / "blobs"
    return sum(_allocated(blobs / d) for d in ("chunks", "manifests") if (blobs / d).is_dir())


@contextlib.contextmanager
def _fresh(ctx: Ctx, name: str, sw: SwfsMounter) -> Iterator[tuple[Path, Mount]]:
    src = ctx.scratch(f"storage-{name}")
    mnt = ctx.mountpoint(f"storage-{name}")
    with sw.mounted(src, mnt) as m:
        sw.settle(m)
        yield src, m
    shutil.rmtree(src, ignore_errors=True)


def _after_gc(ctx: Ctx, sw: SwfsMounter, src: Path, m: Mount) -> int:
    """The store's size once unreferenced blobs and chunks are collected:
    the daemon is stopped, the engine's orphan check repairs, the daemon
    is started again for the caller's unmount."""
    from swfs.check import check_orphans
    from swfs.workspace import Workspace

    sw.unmount(m)
    with Workspace(src) as ws:
        check_orphans(ws, repair=True)
    size = _store_bytes(src)
    m2 = sw.mount(src, m.mountpoint)
    m.pid, m.proc = m2.pid, m2.proc
    return size


# -- fsstress-style load


def _fill(rng: random.Random, n: int, random_data: bool) -> bytes:
    """What fsstress writes: a buffer of one repeated byte (it memsets each
    write's buffer with a per-operation value), here with a random prefix
    so that no two writes are alike; or random bytes throughout."""
    if random_data:
        return rng.randbytes(n)
    return rng.randbytes(min(n, 64)) + bytes([rng.randrange(256)]) * max(0, n - 64)


def _stress_worker(root: str, seed: int, ops: int, random_data: bool) -> None:
    rng = random.Random(seed)
    base = Path(root) / f"p{seed}"
    base.mkdir(exist_ok=True)
    files: list[Path] = []
    for i in range(ops):
        op = rng.random()
        try:
            if op < 0.12 or not files:
                p = base / f"d{rng.randrange(8)}" / f"f{i}"
                p.parent.mkdir(exist_ok=True)
                p.write_bytes(_fill(rng, rng.randrange(1, 64 * 1024), random_data))
                files.append(p)
            elif op < 0.55:  # overwrite a range in place
                p = rng.choice(files)
                with open(p, "r+b") as f:
                    f.seek(rng.randrange(1024 * 1024))
                    f.write(_fill(rng, rng.randrange(1, 32 * 1024), random_data))
            elif op < 0.65:  # append
                with open(rng.choice(files), "ab") as f:
                    f.write(_fill(rng, rng.randrange(1, 16 * 1024), random_data))
            elif op < 0.72:  # truncate: shorter, or longer with a hole
                p = rng.choice(files)
                with open(p, "r+b") as f:
                    f.truncate(rng.randrange(8 * 1024 * 1024))
            elif op < 0.78:  # write and fsync
                p = rng.choice(files)
                fd = os.open(p, os.O_WRONLY)
                try:
                    os.pwrite(fd, _fill(rng, 4096, random_data), rng.randrange(256 * 1024))
                    os.fsync(fd)
                finally:
                    os.close(fd)
            elif op < 0.84:  # rename
                p = rng.choice(files)
                q = p.with_name(f"r{i}")
                p.rename(q)
                files[files.index(p)] = q
            elif op < 0.90:  # unlink
                p = files.pop(rng.randrange(len(files)))
                p.unlink()
            else:  # read
                rng.choice(files).read_bytes()
        except FileNotFoundError:
            continue


def fsstress_figure(ctx: Ctx, result: WorkloadResult) -> None:
    procs, ops = FSSTRESS_LOAD[0 if ctx.quick else 1]
    for name, random_data, target in (
        ("fsstress_store_vs_allocated", False, Target("<=", 2.0, "<=2x")),
        ("fsstress_random_store_vs_allocated", True, None),
    ):
        metric = result.metric(
            name,
            "x",
            kind=ABSOLUTE,
            target=target,
            note=f"{procs} processes x {ops} ops; store (no cache) / workspace allocated"
            + ("; incompressible data" if random_data else ""),
        )
        sw = _sw(ctx)
        with _fresh(ctx, "fsstress", sw) as (src, m):
            mp = multiprocessing.get_context("fork")
            workers = [
                mp.Process(target=_stress_worker, args=(str(m.mountpoint), seed, ops, random_data))
                for seed in range(procs)
            ]
            t0 = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            elapsed = time.perf_counter() - t0
            sw.settle(m)
            ws_bytes = _allocated(src, skip=STORE)
            store = _store_bytes(src)
            blobs = _blob_bytes(src)
            after_gc = _after_gc(ctx, sw, src, m)
        metric.values.append(store / max(ws_bytes, 1))
        result.metric(
            name.replace("_vs_", "_after_gc_vs_"),
            "x",
            kind=ABSOLUTE,
            note="the same, once blobs no version names (replaced in a burst) are collected",
        ).values.append(after_gc / max(ws_bytes, 1))
        result.info[name] = {
            "store_allocated_after_gc": after_gc,
            "processes": procs,
            "ops_each": ops,
            "seconds": round(elapsed, 1),
            "workspace_allocated": ws_bytes,
            "store_allocated": store,
            "blob_allocated": blobs,
            "exit_codes": [w.exitcode for w in workers],
        }


# -- one-byte edits


def one_byte_edits(ctx: Ctx, result: WorkloadResult) -> None:
    metric = result.metric(
        "bytes_per_version_1byte_10MiB",
        "KiB",
        kind=ABSOLUTE,
        target=Target("<", 1024.0, "<1 MiB"),
        note="store growth per version after the first, one-byte edits, one version each",
    )
    edits = 10
    sw = _sw(ctx, "--version-interval", "0")
    with _fresh(ctx, "edits", sw) as (src, m):
        rng = random.Random(16)
        content = bytearray(rng.randbytes(10 * MiB))
        path = m.mountpoint / "big.bin"
        path.write_bytes(content)
        sw.settle(m)
        sizes = []
        for _ in range(edits):
            at = rng.randrange(len(content))
            content[at] ^= 0x5A
            with open(path, "r+b") as f:
                f.seek(at)
                f.write(bytes([content[at]]))
            sw.settle(m)
            sizes.append(_blob_bytes(src))
    # The first edit keeps the original whole (incompressible, 10 MiB);
    # every later one costs what changed.
    metric.values.append((sizes[-1] - sizes[0]) / (edits - 1) / 1024)
    result.info["edits_blob_bytes"] = sizes


# -- a 2 GiB sparse file


def sparse_close(ctx: Ctx, result: WorkloadResult) -> None:
    goal = Target("<", 1.0, "<1 s")
    create = result.metric("sparse_2g_create_close_s", "s", kind=ABSOLUTE, target=goal)
    rewrite = result.metric(
        "sparse_2g_rewrite_close_s",
        "s",
        kind=ABSOLUTE,
        target=goal,
        note="in place: keeps the old version first",
    )
    size = 2 * 1024 * MiB
    sw = _sw(ctx, "--version-interval", "0")
    rounds = 1 if ctx.quick else 3
    with _fresh(ctx, "sparse", sw) as (src, m):
        for r in range(rounds):
            path = m.mountpoint / f"disk{r}.img"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, size)
            os.pwrite(fd, b"boot sector", 0)
            os.pwrite(fd, b"superblock", 1024 * MiB)
            t0 = time.perf_counter()
            os.close(fd)
            create.values.append(time.perf_counter() - t0)
            sw.settle(m)
            fd = os.open(path, os.O_RDWR)
            os.pwrite(fd, b"journal", size - 4096)  # opening to write kept the old bytes
            t0 = time.perf_counter()
            os.close(fd)
            rewrite.values.append(time.perf_counter() - t0)
            sw.settle(m)
        result.info["sparse_store_allocated"] = _store_bytes(src)
    result.info["close_hash"] = _close_hash()


def dense_edit_close(ctx: Ctx, result: WorkloadResult) -> None:
    """close() after a one-byte edit of a 1 GiB file of random bytes (put in
    SRC before the mount): what rehashing on close costs for a big file
    whose change is tiny.  With the blake3 subtree library built
    (swfs.b3tree), the close rehashes the one 1 MiB leaf the write touched
    and joins the cached chaining values of the others (swfs.treecache);
    without it, the whole file."""
    metric = result.metric(
        "edit_1g_1byte_close_s",
        "s",
        kind=ABSOLUTE,
        note="one byte written in place in a 1 GiB random file, then close()",
    )
    sw = _sw(ctx, "--version-interval", "0")
    src = ctx.scratch("storage-dense")
    rng = random.Random(7)
    with open(src / "big.bin", "wb") as f:
        for _ in range(64):
            f.write(rng.randbytes(16 * MiB))
    with sw.mounted(src, ctx.mountpoint("storage-dense")) as m:
        sw.settle(m)
        for r in range(1 if ctx.quick else 3):
            fd = os.open(m.mountpoint / "big.bin", os.O_RDWR)
            os.pwrite(fd, bytes([r]), rng.randrange(1024 * MiB))
            t0 = time.perf_counter()
            os.close(fd)
            metric.values.append(time.perf_counter() - t0)
            sw.settle(m)
    shutil.rmtree(src, ignore_errors=True)
    result.info["close_hash"] = _close_hash()


def _close_hash() -> str:
    """How the daemon (same environment) hashes at close."""
    from swfs.store import b3tree

    why = b3tree.why_not()
    return "by 1 MiB leaves (swfs.b3tree)" if why is None else f"whole files: {why}"


# -- memory over a long run


def _small_ops_worker(root: str, proc: int, phase: int, first: int, ops: int) -> None:
    """Operations ``first`` to ``first + ops`` of process ``proc``, over the
    files its earlier phases left: one live set of at most 2,000 files a
    process over the whole run, so that what the daemon holds for the
    workspace stays the same size and any growth is the daemon's own."""
    rng = random.Random(phase * 100 + proc)
    base = Path(root) / f"m{proc}"
    base.mkdir(exist_ok=True)
    live = sorted(Path(d) / f for d, _, files in os.walk(base) for f in files)
    for i in range(first, first + ops):
        op = rng.random()
        try:
            if op < 0.3 or not live:
                p = base / f"d{i % 50}" / f"f{i}.txt"
                p.parent.mkdir(exist_ok=True)
                p.write_bytes(b"line %d\n" % i * rng.randrange(1, 40))
                live.append(p)
            elif op < 0.5:
                with open(rng.choice(live), "ab") as f:
                    f.write(b"more\n")
            elif op < 0.7:
                os.stat(rng.choice(live))
            elif op < 0.85:
                rng.choice(live).read_bytes()
            elif op < 0.93:
                p = rng.choice(live)
                q = p.with_name(f"r{i}.txt")
                p.rename(q)
                live[live.index(p)] = q
            else:
                live.pop(rng.randrange(len(live))).unlink()
            if len(live) > 2000:
                live.pop(0).unlink()
        except FileNotFoundError:
            continue


def _live(src: Path) -> int:
    return sum(len(files) for d in src.glob("m*") for _, _, files in os.walk(d))


def _rss(pid: int) -> dict[str, float]:
    return {
        key: round((proc_status_kb(pid, key) or 0) / 1024, 1)
        for key in ("VmRSS", "RssAnon", "RssFile", "VmHWM")
    }


def _heap_dump(pid: int, log_file: Path) -> dict[str, float]:
    """Ask the daemon (SIGUSR1) for its dump, heap growth included when it
    runs with ``SWFS_TRACEMALLOC``; the dump lands in its log.  Returns
    its malloc line's figures, MB: ``malloc_in_use``, ``malloc_free`` and
    ``malloc_sqlite`` (empty if the dump gave none within a minute)."""
    before = log_file.stat().st_size if log_file.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if log_file.exists() and log_file.stat().st_size > before:
            with open(log_file, "rb") as f:
                f.seek(before)
                text = f.read().decode("utf-8", "replace")
            if "end of swfs task dump" in text:
                return _malloc_figures(text)
        time.sleep(0.2)
    return {}


def _malloc_figures(dump: str) -> dict[str, float]:
    """``malloc: in use 36.1 MB, free 4.2 MB, sqlite 3.5 MB`` as a dict."""
    for line in dump.splitlines():
        _, sep, rest = line.partition("malloc: ")
        if not sep or "unavailable" in rest:
            continue
        out = {}
        for part in rest.split(", "):
            name, _, mb = part.rpartition(" ")[0].rpartition(" ")
            with contextlib.suppress(ValueError):
                out["malloc_" + name.replace(" ", "_")] = float(mb)
        return out
    return {}


def daemon_memory(ctx: Ctx, result: WorkloadResult) -> None:
    """The daemon's RSS over a long run of small mixed operations through
    the mount (create, append, stat, read, rename, unlink over a few
    thousand live files): at the start, at the checkpoint and at the end.
    Run with ``SWFS_TRACEMALLOC=N`` in the environment to have the daemon
    log, at each checkpoint, the allocation sites that grew."""
    checkpoints = MEMORY_OPS[0 if ctx.quick else 1]
    procs = 2
    total = checkpoints[-1]
    goal = Target("<", 300.0, "<300 MB")
    start = result.metric("daemon_rss_start_mb", "MB", kind=ABSOLUTE, note="VmRSS once mounted")
    mid = result.metric(
        "daemon_rss_mid_mb", "MB", kind=ABSOLUTE, note=f"VmRSS after {checkpoints[0]:,} operations"
    )
    end = result.metric(
        "daemon_rss_mb", "MB", kind=ABSOLUTE, target=goal, note=f"VmRSS after {total:,} operations"
    )
    sw = _sw(ctx)
    with _fresh(ctx, "memory", sw) as (src, m):
        if m.pid is None:
            raise Unsupported("no daemon pid")
        log_file = src / STORE / "daemon.log"
        samples: dict[str, dict[str, float]] = {"0": _rss(m.pid) | _heap_dump(m.pid, log_file)}
        live_by: dict[str, int] = {}
        mp = multiprocessing.get_context("fork")
        done = 0
        t0 = time.perf_counter()
        for phase, upto in enumerate(checkpoints):
            each = (upto - done) // procs
            workers = [
                mp.Process(target=_small_ops_worker, args=(str(m.mountpoint), p, phase, done, each))
                for p in range(procs)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            done = upto
            sw.settle(m)
            samples[str(upto)] = _rss(m.pid) | _heap_dump(m.pid, log_file)
            live_by[str(upto)] = _live(src)
        elapsed = time.perf_counter() - t0
    start.values.append(samples["0"]["VmRSS"])
    mid.values.append(samples[str(checkpoints[0])]["VmRSS"])
    end.values.append(samples[str(total)]["VmRSS"])
    result.info["daemon_rss"] = {
        "by_operations_mb": samples,
        "processes": procs,
        "ops_per_s": round(total / elapsed),
        "live_files_by_operations": live_by,
    }


def storage(ctx: Ctx, result: WorkloadResult) -> None:
    for part in (one_byte_edits, dense_edit_close, fsstress_figure):
        part(ctx, result)


# The sparse close is its own workload so that it can be run alone (the
# rest of ``storage`` takes minutes).
WORKLOADS = {"storage": storage, "sparse_close": sparse_close, "daemon_memory": daemon_memory}
