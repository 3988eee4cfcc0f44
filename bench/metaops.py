"""Per-operation cost of writes and changes of names (issue 38): medians in
ms on a plain folder and on a swfs mount of another plain folder, side by
side in the same minutes.

    python -m bench.metaops [--n 200] [--big 16M] [--big-n 8] [-- MOUNT OPTIONS]

Operations, each ``--n`` times on 100-byte files: ``create`` (open
O_CREAT, write, close), ``rename`` (to a new name), ``rename_over`` (onto
a file recorded earlier), ``unlink`` (of a recorded file), ``link``,
``chmod``, ``mkdir``; ``first_write_<size>`` is the first 4 KiB write
(open, pwrite, close) into a recorded file of each ``--big`` size (4K, 4M,
16M, 256M; repeatable), ``--big-n`` times.  The mount has
``--version-interval 0`` so every close is a version whose bytes a later
change must keep.  Not part of ``python -m bench``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SWFS = str(Path(sys.executable).with_name("swfs"))
PAYLOAD = b"\0bench\0" + bytes(range(93))


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1:].upper() in units else int(text)


def _ops(
    d: Path, n: int, bigs: list[str], big_n: int, settle: Callable[[], None]
) -> dict[str, float]:
    times: dict[str, list[float]] = {}
    clock = time.perf_counter

    def each(op: str, fn: Callable[[int], object], count: int = n) -> None:
        xs = times.setdefault(op, [])
        for i in range(count):
            t0 = clock()
            fn(i)
            xs.append((clock() - t0) * 1e3)

    def create(p: Path) -> None:
        with open(p, "wb") as f:
            f.write(PAYLOAD)

    each("create", lambda i: create(d / f"c{i}"))
    each("chmod", lambda i: os.chmod(d / f"c{i}", 0o600))
    each("link", lambda i: os.link(d / f"c{i}", d / f"l{i}"))
    for i in range(n):
        os.unlink(d / f"l{i}")
    each("rename", lambda i: os.rename(d / f"c{i}", d / f"r{i}"))
    for i in range(n):
        create(d / f"t{i}")  # recorded files to rename over and unlink
    settle()
    each("rename_over", lambda i: os.rename(d / f"r{i}", d / f"t{i}"))
    settle()
    each("unlink", lambda i: os.unlink(d / f"t{i}"))
    each("mkdir", lambda i: os.mkdir(d / f"m{i}"))
    for big in bigs:
        size = _size(big)
        for i in range(big_n):
            with open(d / f"big{big}-{i}", "wb") as f:
                left = size
                while left:  # no chunk in common: nothing deduplicated
                    left -= f.write(os.urandom(min(left, 1 << 20)))
        settle()

        def first_write(i: int, big: str = big, size: int = size) -> None:
            # open, one 4 KiB write, close: the kernel may send the write only
            # at the close (writeback cache), where the old bytes are kept.
            fd = os.open(d / f"big{big}-{i}", os.O_WRONLY)
            try:
                os.pwrite(fd, b"x" * 4096, min(1 << 20, size - 4096))
            finally:
                os.close(fd)

        each(f"first_write_{big}", first_write, big_n)
        for i in range(big_n):
            os.unlink(d / f"big{big}-{i}")
    return {op: statistics.median(xs) for op, xs in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--big", action="append", default=None, help="file size, e.g. 16M")
    ap.add_argument("--big-n", type=int, default=8)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("mount_options", nargs="*")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="swfs-metaops-", dir=args.workdir))
    plain, src, mnt, store = (work / n for n in ("plain", "src", "mnt", "store"))
    for p in (plain, src, mnt):
        p.mkdir()
    try:
        subprocess.run(
            [SWFS, "mount", "--store", str(store), "--version-interval", "0",
             *args.mount_options, str(src), str(mnt)],
            check=True, timeout=120,
        )  # fmt: skip
        try:

            def sync() -> None:
                subprocess.run([SWFS, "sync", str(mnt)], check=True, timeout=600)

            bigs = args.big or ["16M"]
            native = _ops(plain, args.n, bigs, args.big_n, lambda: None)
            mounted = _ops(mnt, args.n, bigs, args.big_n, sync)
        finally:
            subprocess.run([SWFS, "umount", str(mnt)], timeout=120, check=False)
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False,
                           stderr=subprocess.DEVNULL)  # fmt: skip
        print(f"{'op':<18}{'plain ms':>10}{'swfs ms':>10}{'ratio':>10}")
        for op, t in native.items():
            m = mounted[op]
            print(f"{op:<18}{t:>10.3f}{m:>10.3f}{m / t if t else float('nan'):>9.1f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
