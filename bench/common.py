"""What every workload shares: sizes, the run context, cache dropping and the
paired native/mount round loop."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.mounter import BenchError, Mount, Mounter, SwfsMounter, Unsupported
from bench.report import Metric, WorkloadResult

log = logging.getLogger(__name__)

GiB = 1024**3
MiB = 1024**2

NATIVE = "native"
MOUNT = "mount"


@dataclass(frozen=True)
class Sizes:
    big_file: int
    rand_reads: int
    small_files: int
    tree_files: int
    tree_dirs: int
    ws_files: int
    ws_dirs: int
    pdf_pages: int
    ws_rounds: int  # each round parses the whole workspace twice (index, first mount)
    fresh_rounds: int
    raw_sample: int  # files of the workspace given to the raw-parser yardstick
    first_mount: bool  # also time a first mount from an empty store (parses everything)
    program_rounds: int = 2  # rounds of bench/programs.py (at most --rounds): minutes each
    sandbox_files: int = 20_000  # the workspace of bench/sandboxes.py (issue 40)

    @classmethod
    def full(cls) -> Sizes:
        return cls(
            big_file=1 * GiB,
            rand_reads=20_000,
            # The issue says 10,000; swfs currently takes ~4 ms per create and
            # ~6 ms per unlink, so 10,000 x 5 rounds alone would take 10 minutes.
            small_files=10_000,
            tree_files=20_000,
            tree_dirs=2_000,
            ws_files=11_000,
            ws_dirs=2_000,
            pdf_pages=40,
            ws_rounds=1,
            fresh_rounds=7,
            raw_sample=800,
            first_mount=False,
        )

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            big_file=64 * MiB,
            rand_reads=2_000,
            small_files=300,
            tree_files=1_000,
            tree_dirs=100,
            ws_files=40,
            ws_dirs=10,
            pdf_pages=40,
            ws_rounds=1,
            fresh_rounds=3,
            raw_sample=100,
            first_mount=True,
            program_rounds=1,
            sandbox_files=300,
        )


@dataclass
class Ctx:
    """One benchmark run: settings, where data and mounts live, the mounter."""

    sizes: Sizes
    rounds: int
    workdir: Path
    mounter: Mounter
    quick: bool = False
    can_drop_caches: bool | None = None  # None: not tried yet
    notes: list[str] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.workdir / "data"

    def mountpoint(self, name: str) -> Path:
        return self.workdir / "mnt" / name

    def scratch(self, name: str) -> Path:
        p = self.workdir / "scratch" / name
        if p.exists():
            shutil.rmtree(p)
        p.mkdir(parents=True)
        return p

    def native_scratch(self, name: str) -> Path:
        """An empty directory beside the data sets (same file system) for the
        native side of write workloads: writing inside a mounted folder behind
        the mount's back would make a swfs daemon rescan and record those files
        while the next measurement runs."""
        p = self.data / f"native-{name}"
        if p.exists():
            shutil.rmtree(p)
        p.mkdir(parents=True)
        return p

    def drop_caches(self) -> bool:
        """sync, then drop the page, dentry and inode caches; False (and remembered)
        if not permitted, in which case 'cold' results are really warm."""
        os.sync()
        if self.can_drop_caches is False:
            return False
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.can_drop_caches = True
        except OSError as exc:
            log.warning("cannot drop caches (%s): cold results are warm-only", exc)
            self.can_drop_caches = False
        return self.can_drop_caches

    def cold_note(self, metric: Metric) -> None:
        if self.can_drop_caches is False and "warm-only" not in metric.note:
            metric.note = "warm-only: could not drop caches"


STORE = ".swfs"  # swfs's default store inside the workspace folder


def swfs_mounter(ctx: Ctx, *commands: str, options: Sequence[str] = ()) -> SwfsMounter:
    """The run's swfs mounter, for a workload that needs swfs itself
    (``Unsupported`` with another mounter, or if the installed ``swfs``
    lacks one of ``commands``); with ``options``, one whose mounts add them
    to ``swfs mount``."""
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    ctx.mounter.require(*commands)
    return ctx.mounter.with_options(*options) if options else ctx.mounter


@contextlib.contextmanager
def throwaway_store(src: Path) -> Iterator[None]:
    """Start without a store and remove it afterwards: for data sets whose store
    only collects preserved bytes of files the benchmark writes and deletes
    (gigabytes per run for seqwrite)."""
    shutil.rmtree(src / STORE, ignore_errors=True)
    try:
        yield
    finally:
        shutil.rmtree(src / STORE, ignore_errors=True)


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_tool(args: Sequence[str | Path], *, cwd: Path | None = None) -> tuple[float, bytes]:
    """Run a real tool with its output going to a pipe (GNU grep stops at the first
    match when its output is /dev/null), return (seconds, output)."""
    argv = [str(a) for a in args]
    t0 = time.perf_counter()
    cp = subprocess.run(argv, capture_output=True, cwd=cwd, stdin=subprocess.DEVNULL, timeout=3600)
    dt = time.perf_counter() - t0
    # grep exits 1 when nothing matched: not an error here.
    if cp.returncode not in (0, 1):
        err = cp.stderr.decode(errors="replace").strip().splitlines()[-2:]
        raise BenchError(f"{' '.join(argv)}: exit {cp.returncode}: {' | '.join(err)}")
    return dt, cp.stdout


Side = str
RoundFn = Callable[[Path, Side, int], dict[str, float]]


def paired_rounds(
    ctx: Ctx,
    result: WorkloadResult,
    m: Mount,
    fn: RoundFn,
    *,
    native_root: Path | None = None,
    mount_root: Path | None = None,
) -> None:
    """Run ``fn(root, side, round)`` on the native folder and on the mount, in
    alternating order (native first on even rounds), ``ctx.rounds`` times.  Each
    call returns {metric name: seconds}; the mount is settled (background work
    done) after every call, outside the timing."""
    roots = {
        NATIVE: native_root if native_root is not None else m.source,
        MOUNT: mount_root if mount_root is not None else m.mountpoint,
    }
    for r in range(ctx.rounds):
        order = (NATIVE, MOUNT) if r % 2 == 0 else (MOUNT, NATIVE)
        for side in order:
            values = fn(roots[side], side, r)
            ctx.mounter.settle(m)
            for name, v in values.items():
                metric = result.metric(name, "s")
                (metric.native if side == NATIVE else metric.mount).append(v)
                log.debug("%s %s round %d %s: %.4f", result.name, name, r, side, v)
        log.info(
            "%s round %d/%d: %s",
            result.name,
            r + 1,
            ctx.rounds,
            ", ".join(f"{mt.name} {mt.ratios()[-1]:.2f}x" for mt in result.metrics if mt.ratios()),
        )
