"""What the access journal costs: the same reads on a mount that records
them and on one started with ``--no-journal``.

Ratios are journal-on over journal-off (the "native" column is the mount
without the journal); the goal is under 1.10.

Wall time on a shared machine moves with whatever else runs, so the two
mounts are measured in adjacent pairs (off-on, on-off, ... alternating which
goes first), each pair gives one ratio, and the median of the pairs counts
(min and max show the spread).  Beside each wall time the daemon's own CPU
time (``utime + stime`` of ``/proc/PID/stat``, every thread of it, including
the journal's thread storing the batch of that run; in ns from the threads'
``schedstat`` when no thread ended meanwhile) is measured per run: it moves
far less with other load than wall time does, so its ratio says where
recording stands when the wall ratio wavers.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

from bench import gen
from bench.common import Ctx, run_tool
from bench.mounter import BenchError, Mount, SwfsMounter, Unsupported, fuse_daemon_pid
from bench.report import ABSOLUTE, Target, WorkloadResult
from swfs.evidence.access import Journal, hash_lookup, request_flush
from swfs.store.records import FileRecord, Store

log = logging.getLogger(__name__)

WORD = "covenant"
REPEAT = 5  # pairs per round
RECORDED = 20_000  # opens recorded per round by the in-process measurement
# The in-process checkout: a job reads READ_FIRST files, then replaces
# REWRITTEN files (unlink, open for writing, the recorded write, close), a
# batch stored every BATCH files (the thread's pace in a burst).
READ_FIRST = 200
REWRITTEN = 5_000
BATCH = 500
TICK = os.sysconf("SC_CLK_TCK")


# Both mounts alike but for the journal.  ``--passthrough=off``: with
# ``auto`` the --no-journal mount passes every big file's reads through to
# the kernel, the recording one only binary files', and the daemon never
# sees those reads.  ``--poll-us 0``: after each request the loop
# otherwise spins up to 500 us waiting for the next one, CPU that measures
# the client's pace between requests (what else runs on the machine), not
# the daemon's work.
SAME = ("--passthrough=off", "--poll-us", "0")


def _mount(sw: SwfsMounter, src: Path, mnt: Path, store: Path, journal: bool) -> Mount:
    mnt.mkdir(parents=True, exist_ok=True)
    m = Mount(src, mnt)
    flags = ("--store", str(store), *SAME, *(() if journal else ("--no-journal",)))
    sw.cmd("mount", *flags, src, mnt, timeout=120)
    m.pid = fuse_daemon_pid(mnt)
    if m.pid is None:
        raise BenchError(f"{mnt}: no daemon found serving it")
    sw.cmd("sync", mnt, timeout=sw.sync_timeout)
    return m


def _loads(mnt: Path) -> dict[str, list[str]]:
    return {
        # grep -r over every unit of every parsed file
        "grep_parsed": ["grep", "-rn", WORD, str(mnt / ".parsed")],
        # grep -r over the native tree (the text files' lines, the documents' bytes)
        "grep_native": ["grep", "-rn", "--exclude-dir=.*", WORD, str(mnt)],
        # every native file opened and read to the end: cat of many small files
        "read_native": [
            "bash",
            "-c",
            'find "$0" -path "$0/.*" -prune -o -type f -print0 | xargs -0 cat | wc -c',
            str(mnt),
        ],
    }


def _files(mnt: Path) -> dict[str, int]:
    """Files each load opens (what one request-heavy unit of work is)."""
    parsed = sum(len(f) for _, _, f in os.walk(mnt / ".parsed"))
    native = sum(1 for _ in gen.iter_files(mnt))
    return {"grep_parsed": parsed, "grep_native": native, "read_native": native}


def cpu_sample(pid: int) -> tuple[float, dict[str, int]]:
    """(utime + stime of process ``pid`` in seconds, every thread of it living
    or ended; each living thread's run time in ns from its schedstat)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    rest = raw[raw.rfind(b")") + 2 :].split()
    ticks = (int(rest[11]) + int(rest[12])) / TICK
    threads: dict[str, int] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                threads[task] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return ticks, threads


def cpu_between(a: tuple[float, dict[str, int]], b: tuple[float, dict[str, int]]) -> float:
    """CPU seconds between two samples: the threads' ns counts when no thread
    ended in between (clock ticks are 10 ms, a run's CPU a few hundred), else
    utime + stime, which keeps what ended threads ran."""
    if a[1].keys() <= b[1].keys():
        return sum(ns - a[1].get(t, 0) for t, ns in b[1].items()) / 1e9
    return b[0] - a[0]


def _output(out: bytes, root: Path) -> list[bytes]:
    """A load's output lines with ``root`` taken out of the paths, sorted
    (a mount may list a folder in another order than the native one)."""
    prefix = os.fsencode(root)
    return sorted(line.replace(prefix, b"ROOT") for line in out.splitlines())


def expected(src: Path) -> dict[str, list[bytes]]:
    """What each load over the native tree prints on the native folder itself
    (``grep_parsed`` has no native twin): the mounts must print the same.  At
    ``--quick`` sizes no native text file holds WORD, and grep's empty output
    is then the right one."""
    return {
        name: _output(run_tool(argv)[1], src)
        for name, argv in _loads(src).items()
        if name != "grep_parsed"
    }


def _run(
    m: Mount, store: Path | None, argv: list[str], want: list[bytes] | None
) -> tuple[float, float]:
    """(wall seconds, daemon CPU seconds) of one run; with a journal, the CPU
    includes storing what the run recorded (its thread is asked to flush).
    The output must be ``want`` (see `expected`), or not empty without one."""
    assert m.pid is not None
    c0 = cpu_sample(m.pid)
    t, out = run_tool(argv)
    if want is None and not out:
        raise BenchError(f"{argv}: no output")
    if want is not None and (got := _output(out, m.mountpoint)) != want:
        raise BenchError(f"{argv}: {len(got)} lines of output, {len(want)} on the native folder")
    if store is not None and not request_flush(store, timeout=60):
        raise BenchError(f"{store}: the journal did not store its events")
    return t, cpu_between(c0, cpu_sample(m.pid))


def recording_cpu_us(scratch: Path, src: Path) -> tuple[float, float]:
    """CPU microseconds one recorded open costs, in this process, without
    FUSE: (the loop's part: ``on_open`` + ``on_close`` with the hash lookup
    in a store holding the workspace's files; the journal thread's part:
    storing the event).  Thread CPU time: what else runs hardly moves it."""
    rels = [str(p.relative_to(src)) for p in gen.iter_files(src)]
    store = Store(scratch / "rec-store")
    try:
        with store.write() as txn:
            for i, rel in enumerate(rels):
                rec = FileRecord(f"{i:064x}", 1, 1, 1, i, 0o100644, 0, 0, None)
                store.put_file(txn, rel, rec)
        (scratch / "rec-journal").mkdir(exist_ok=True)
        j = Journal(  # not started: stored by hand below
            scratch / "rec-journal", file_hash=hash_lookup(SimpleNamespace(store=store)), src=src
        )
        try:
            pid = os.getpid()
            t0 = time.thread_time()
            for i in range(RECORDED):
                j.on_open(i, pid, rels[i % len(rels)])
                j.on_close(i)
            t1 = time.thread_time()
            j.flush()
            t2 = time.thread_time()
        finally:
            j.close()
    finally:
        store.close()
    return (t1 - t0) / RECORDED * 1e6, (t2 - t1) / RECORDED * 1e6


def rewrite_cpu_us(scratch: Path) -> tuple[float, float]:
    """CPU microseconds one file a checkout replaces costs the journal, in
    this process, without FUSE: (the loop's part: ``on_unlink``, ``on_open``,
    ``on_wrote``, ``on_close``; the journal thread's part: storing the two
    events and the write's lineage).  The job read ``READ_FIRST`` files
    first, so every write has that many inputs (a checkout reads the index,
    the packs and the files it compares)."""
    root = scratch / "rewrite-journal"
    shutil.rmtree(root, ignore_errors=True)
    (root / "src").mkdir(parents=True)
    j = Journal(root, file_hash=lambda rel: "a" * 64, src=root / "src")  # not started
    try:
        pid = os.getpid()
        for i in range(READ_FIRST):
            j.on_open(i, pid, f"old/r{i}.txt", known_hash=f"{i:064x}")
            j.on_read(i, 0, 100)
            j.on_close(i)
        j.flush()
        loop = thread = 0.0
        for i in range(REWRITTEN):
            t0 = time.thread_time()
            rel = f"d{i % 50}/f{i}.txt"
            j.on_unlink(pid, rel)
            j.on_open(READ_FIRST + i, pid, rel, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            j.on_wrote(READ_FIRST + i, rel)
            j.on_close(READ_FIRST + i)
            t1 = time.thread_time()
            loop += t1 - t0
            if i % BATCH == BATCH - 1 or i == REWRITTEN - 1:
                j.flush()
                thread += time.thread_time() - t1
    finally:
        j.close()
    return loop / REWRITTEN * 1e6, thread / REWRITTEN * 1e6


def _loadavg() -> float:
    return os.getloadavg()[0]


def journal(ctx: Ctx, result: WorkloadResult) -> None:
    """The same folder mounted twice at once, with its own store each: one
    mount records, the other runs ``--no-journal``; each load runs on both in
    adjacent pairs, ``REPEAT`` pairs a round, alternating which goes first."""
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync")
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    scratch = ctx.scratch("journal")
    off_mnt, on_mnt = ctx.mountpoint("journal-off"), ctx.mountpoint("journal-on")
    on_store = scratch / "store-on"
    names = list(_loads(off_mnt))
    target = Target("<", 1.10, "<10%")
    wall = {
        n: result.metric(n, "s", target=target, note="wall, journal on / --no-journal")
        for n in names
    }
    cpu = {
        n: result.metric(
            f"{n}_cpu", "s", target=target, note="daemon CPU, journal on / --no-journal"
        )
        for n in names
    }
    per_file = {
        (n, side): result.metric(
            f"{n}_cpu_us_per_file_{side}",
            "us",
            kind=ABSOLUTE,
            note="daemon CPU per file the load opens (median of the round)",
        )
        for n in names
        for side in ("off", "on")
    }
    rec_loop = result.metric(
        "record_loop_us_per_open", "us", kind=ABSOLUTE, note="in-process: on_open+on_close"
    )
    rec_thread = result.metric(
        "record_thread_us_per_open", "us", kind=ABSOLUTE, note="in-process: storing one event"
    )
    rew_loop = result.metric(
        "record_loop_us_per_rewrite",
        "us",
        kind=ABSOLUTE,
        note="in-process: on_unlink+on_open+on_wrote+on_close of a replaced file",
    )
    rew_thread = result.metric(
        "record_thread_us_per_rewrite",
        "us",
        kind=ABSOLUTE,
        note=f"in-process: storing a replaced file's events, its job having read {READ_FIRST}",
    )
    load = [_loadavg()]
    off = _mount(sw, src, off_mnt, scratch / "store-off", False)
    try:
        on = _mount(sw, src, on_mnt, on_store, True)
        try:
            mounts = {False: off, True: on}
            stores = {False: None, True: on_store}
            loads = {False: _loads(off_mnt), True: _loads(on_mnt)}
            files = _files(off_mnt)
            want = expected(src)
            for side in (False, True):  # warm both: the kernel's and the daemons' caches
                for name, argv in loads[side].items():
                    _run(mounts[side], stores[side], argv, want.get(name))
            for r in range(ctx.rounds):
                for name in names:
                    cpus: dict[bool, list[float]] = {False: [], True: []}
                    for k in range(REPEAT):
                        order = (False, True) if (r + k) % 2 == 0 else (True, False)
                        got = {}
                        for side in order:
                            got[side] = _run(
                                mounts[side], stores[side], loads[side][name], want.get(name)
                            )
                        wall[name].native.append(got[False][0])
                        wall[name].mount.append(got[True][0])
                        cpu[name].native.append(got[False][1])
                        cpu[name].mount.append(got[True][1])
                        for side in (False, True):
                            cpus[side].append(got[side][1])
                    for side, label in ((False, "off"), (True, "on")):
                        us = statistics.median(cpus[side]) / max(1, files[name]) * 1e6
                        per_file[name, label].values.append(us)
                    load.append(_loadavg())
                    log.info(
                        "journal round %d %s: wall %.2fx cpu %.2fx (load %.1f)",
                        r + 1,
                        name,
                        statistics.median(wall[name].ratios()[-REPEAT:]),
                        statistics.median(cpu[name].ratios()[-REPEAT:]),
                        load[-1],
                    )
                loop_us, thread_us = recording_cpu_us(scratch, src)
                rec_loop.values.append(loop_us)
                rec_thread.values.append(thread_us)
                loop_us, thread_us = rewrite_cpu_us(scratch)
                rew_loop.values.append(loop_us)
                rew_thread.values.append(thread_us)
        finally:
            sw.unmount(on)
    finally:
        sw.unmount(off)
    result.info.update(
        files=ctx.sizes.ws_files,
        files_per_load=files,
        rounds=ctx.rounds,
        pairs_per_round=REPEAT,
        loadavg_1min={"min": min(load), "median": statistics.median(load), "max": max(load)},
    )
    result.add_note(f"load average {min(load):.1f}-{max(load):.1f}")


WORKLOADS = {"journal": journal}
