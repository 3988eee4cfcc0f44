"""What one OPEN + RELEASE of a warm native file costs, per file system.

    python -m bench.opencost                       # 5,000 files, 3 mounts per side
    python -m bench.opencost --files 2000 --mounts 1 --sides swfs hp
    python -m bench.opencost --profile swfs --profile-seconds 20 --out prof.txt

A warm ``grep -r`` of native files sends the daemon one OPEN and one RELEASE
per file and nothing else (tests/mounted/test_grep_requests.py): the kernel
keeps the entries, the attributes and the pages.  This measures exactly that
pair: ``os.open`` + ``os.close`` of every file of a warm tree, in this
process (C-speed system calls, a Python loop of about a microsecond per
file), through each side and on the native folder in the same round:

* ``swfs``: ``swfs mount --store STORE`` (the journal records every open);
* ``swfs_nojournal``: the same with ``--no-journal``;
* ``pyfuse3``: the plain pyfuse3 passthrough (bench/refpassthrough.py);
* ``hp``, ``hp_nopt``: libfuse's C passthrough_hp (bench/peer.sh builds it,
  or ``SWFS_BENCH_PASSTHROUGH_HP`` names it), with and without kernel
  passthrough of file data.

Each side is mounted ``--mounts`` times.  On each fresh mount the first
``stat`` of every file is a LOOKUP each (``lookup_us``: per file); then the
tree is opened and closed twice to warm it, and ``--loops`` timed passes
follow (``pair_us``: per open + close, the mount's wall time; ``cpu_us``:
the daemon's CPU time per pair, all its threads, which moves far less with
other load; ``native_us``: the same loop on the native folder).  The medians
over mounts are printed, and written as JSON with ``--json``.

``--inproc`` measures swfs's handlers alone, without a kernel: the real
engine over a copy of the tree (indexed first), ``Operations`` built as the
daemon builds it, every file looked up, then ``open`` + ``release`` of each
called directly in one trio run (``--journal off`` for the journal's
share); what a pair costs in Python, free of the machine's scheduling noise.
``--cprofile FILE`` adds a cProfile of that loop.

``--profile SIDE`` mounts SIDE once and runs ``py-spy record --native`` on
its daemon while this process opens and closes the tree in a loop, writing
py-spy's collapsed stacks (``--format raw``) to ``--out``
(``SWFS_OPENCOST_SPY`` replaces ``--native -r 1000``: sampling native
frames a thousand times a second slows the daemon tenfold).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import gen
from bench.journalcost import cpu_between, cpu_sample
from bench.mounter import Mounter, SwfsMounter, unmount_all
from bench.reqcost import CmdMounter, StoreSwfsMounter

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SIDES = ("swfs", "swfs_nojournal", "pyfuse3", "hp", "hp_nopt")


def _hp_binary() -> str | None:
    env_bin = os.environ.get("SWFS_BENCH_PASSTHROUGH_HP")
    if env_bin:
        return env_bin if os.access(env_bin, os.X_OK) else None
    cp = subprocess.run(
        ["sh", str(HERE / "peer.sh")],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=1800,
        check=False,
    )
    out = cp.stdout.decode(errors="replace").strip().splitlines()
    if cp.returncode == 0 and out and os.access(out[-1], os.X_OK):
        return out[-1]
    return None


def mounter_for(side: str, workdir: Path, swfs_args: list[str]) -> Mounter | None:
    logdir = workdir / "logs"
    if side in ("swfs", "swfs_nojournal"):
        base = SwfsMounter(sync_timeout=600.0)
        store = workdir / "stores" / f"opencost-{side}"
        sw = StoreSwfsMounter(base, store)
        sw.options = (*swfs_args, *(["--no-journal"] if side == "swfs_nojournal" else []))
        return sw
    if side == "pyfuse3":
        return CmdMounter(side, [sys.executable, "-m", "bench.refpassthrough"], logdir)
    hp = _hp_binary()
    if hp is None:
        log.warning("%s: passthrough_hp unavailable (bench/peer.sh failed)", side)
        return None
    extra = ["--nopassthrough"] if side == "hp_nopt" else []
    return CmdMounter(side, [hp, "--foreground", *extra], logdir)


def open_close(paths: list[str]) -> float:
    """Seconds to open and close every one of ``paths``."""
    o, c, flags = os.open, os.close, os.O_RDONLY
    t0 = time.perf_counter()
    for p in paths:
        c(o(p, flags))
    return time.perf_counter() - t0


def stat_all(paths: list[str]) -> float:
    st = os.stat
    t0 = time.perf_counter()
    for p in paths:
        st(p)
    return time.perf_counter() - t0


def measure(
    mounter: Mounter, src: Path, rels: list[str], mnt: Path, loops: int
) -> dict[str, float]:
    n = len(rels)
    with mounter.mounted(src, mnt) as m:
        mounter.settle(m)
        mpaths = [str(m.mountpoint / r) for r in rels]
        npaths = [str(src / r) for r in rels]
        lookup = stat_all(mpaths) / n  # fresh mount: a LOOKUP per file
        for _ in range(2):
            open_close(mpaths)
        mounter.settle(m)
        pair, cpu, native = [], [], []
        for _ in range(loops):
            native.append(open_close(npaths) / n)
            a = cpu_sample(m.pid) if m.pid else None
            pair.append(open_close(mpaths) / n)
            if a is not None and m.pid:
                cpu.append(cpu_between(a, cpu_sample(m.pid)) / n)
        mounter.settle(m)
    return {
        "lookup_us": lookup * 1e6,
        "pair_us": statistics.median(pair) * 1e6,
        "cpu_us": statistics.median(cpu) * 1e6 if cpu else float("nan"),
        "native_us": statistics.median(native) * 1e6,
    }


def profile(
    mounter: Mounter, src: Path, rels: list[str], mnt: Path, seconds: float, out: Path
) -> None:
    spy = Path(sys.executable).parent / "py-spy"
    with mounter.mounted(src, mnt) as m:
        mounter.settle(m)
        mpaths = [str(m.mountpoint / r) for r in rels]
        for _ in range(2):
            open_close(mpaths)
        mounter.settle(m)
        how = os.environ.get("SWFS_OPENCOST_SPY", "--native -r 1000").split()  # py-spy's options
        argv = [str(spy), "record", *how, "-f", "raw", "-o", str(out)]
        argv += ["-d", str(int(seconds)), "-p", str(m.pid)]
        rec = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        try:
            time.sleep(1.0)  # py-spy attaches
            pairs = 0
            t0 = time.perf_counter()
            while rec.poll() is None:
                open_close(mpaths)
                pairs += len(mpaths)
            dt = time.perf_counter() - t0
            print(f"{pairs} pairs in {dt:.1f} s: {dt / pairs * 1e6:.1f} us each (profiled)")
        finally:
            rec.wait(timeout=60)


@dataclasses.dataclass
class _Ctx:
    """What handlers read of a request's context."""

    uid: int
    gid: int
    pid: int
    umask: int = 0o022


def inproc(
    src: Path, workdir: Path, loops: int, journal: bool, cprofile: Path | None, nowait: bool
) -> float:
    """Microseconds of Python per ``open`` + ``release`` of a native file
    through swfs's handlers, called directly (no kernel)."""
    import pyfuse3
    import trio

    from mountd.operations import Operations
    from mountd.options import MountOptions
    from mountd.reply import awaited, pending
    from swfs.engine import Engine
    from swfs.workspace import Config

    copy = workdir / "opencost-inproc"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(src, copy)
    rels = sorted(str(p.relative_to(copy)) for p in gen.iter_files(copy))
    ctx: Any = _Ctx(os.getuid(), os.getgid(), os.getpid())
    options = MountOptions(journal=journal, poll_window=0.0)
    try:
        with Engine.open(copy, config=Config(rescan_interval=0)) as engine:
            trio.run(engine.drain)

            async def main() -> float:
                ops = Operations(engine, str(copy), str(engine.store_dir), options)
                try:
                    inos = []
                    for rel in rels:
                        ino = pyfuse3.ROOT_INODE
                        for name in rel.split("/"):
                            ino = (await awaited(ops.lookup(ino, os.fsencode(name), ctx))).st_ino
                        inos.append(ino)
                    best = float("inf")
                    prof = None
                    if cprofile is not None:
                        import cProfile

                        prof = cProfile.Profile()
                    for i in range(loops):
                        if prof is not None and i == loops - 1:
                            prof.enable()
                        t0 = time.thread_time()  # this thread's CPU: less of the machine's noise
                        if nowait:  # as our pyfuse3 calls them (mountd.reply)
                            for ino in inos:
                                got = ops.open(ino, os.O_RDONLY, ctx)
                                assert isinstance(got, pyfuse3.FileInfo), "an open that must wait"
                                assert not pending(ops.release(got.fh)), "a release that must wait"
                        else:  # as stock pyfuse3 calls them (mountd.binding.adapt)
                            for ino in inos:
                                fi = await awaited(ops.open(ino, os.O_RDONLY, ctx))
                                await awaited(ops.release(fi.fh))
                        best = min(best, time.thread_time() - t0)
                        if prof is not None and i == loops - 1:
                            prof.disable()
                    if prof is not None and cprofile is not None:
                        prof.dump_stats(str(cprofile))
                    return best / len(inos) * 1e6
                finally:
                    ops.close()

            return trio.run(main)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").split("\n")[0]
    ap = argparse.ArgumentParser(prog="python -m bench.opencost", description=doc)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--dirs", type=int, default=50)
    ap.add_argument("--mounts", type=int, default=3, help="fresh mounts per side")
    ap.add_argument("--loops", type=int, default=5, help="timed passes per mount")
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    ap.add_argument("--swfs-args", default="", help="extra `swfs mount` options")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "swfs-bench")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--inproc", action="store_true", help="the handlers alone, no kernel")
    ap.add_argument("--journal", choices=("on", "off"), default="on", help="with --inproc")
    ap.add_argument(
        "--calls",
        choices=("async", "nowait"),
        default="async",
        help="with --inproc: each handler awaited (as stock pyfuse3 calls it) or answered at once",
    )
    ap.add_argument("--cprofile", type=Path, help="with --inproc: cProfile stats to this file")
    ap.add_argument("--profile", choices=SIDES, help="profile this side's daemon instead")
    ap.add_argument("--profile-seconds", type=float, default=15.0)
    ap.add_argument("--out", type=Path, default=Path("opencost-profile.txt"))
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    src = gen.file_tree(args.workdir / "data", args.files, args.dirs) / "tree"
    rels = sorted(str(p.relative_to(src)) for p in gen.iter_files(src))
    if args.inproc:
        nowait = args.calls == "nowait"
        us = inproc(src, args.workdir, args.loops, args.journal == "on", args.cprofile, nowait)
        print(f"in-process open+release: {us:.2f} us CPU per pair (best of {args.loops} passes)")
        return 0
    swfs_args = args.swfs_args.split()
    results: dict[str, dict[str, float]] = {}
    try:
        for side in [args.profile] if args.profile else args.sides:
            mounter = mounter_for(side, args.workdir, swfs_args)
            if mounter is None:
                continue
            mnt = args.workdir / "mnt" / f"opencost-{side}"
            if args.profile:
                profile(mounter, src, rels, mnt, args.profile_seconds, args.out)
                return 0
            runs = [measure(mounter, src, rels, mnt, args.loops) for _ in range(args.mounts)]
            results[side] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            r = results[side]
            print(
                f"{side:15s} open+close {r['pair_us']:7.1f} us  (native {r['native_us']:.1f} us, "
                f"{r['pair_us'] / r['native_us']:5.1f}x)  daemon CPU {r['cpu_us']:6.1f} us  "
                f"lookup {r['lookup_us']:6.1f} us",
                flush=True,
            )
    finally:
        unmount_all()
        shutil.rmtree(args.workdir / "stores" / "opencost-swfs", ignore_errors=True)
        shutil.rmtree(args.workdir / "stores" / "opencost-swfs_nojournal", ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"files": len(rels), "sides": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
