"""``procinfo.job_links``: the pipe ends and written files the processes of
a job hold, read from /proc while they run (no mount needed)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swfs.lineage import JobReads
from swfs.procinfo import Link, ProcCache, job_links, read_stat

pytestmark = pytest.mark.timeout(60)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _wait_for(pred: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    out = tmp_path / "out.txt"
    # `sleep | cat > out` beside `x=$(sleep)`: two pipes, one of them read by
    # the shell itself.
    script = f"sleep 30 | cat > {out} & x=$(sleep 30); wait"
    proc = subprocess.Popen(["bash", "-c", script])
    try:
        yield proc, out
    finally:
        proc.kill()
        proc.wait()
        for pid in _children(proc.pid):
            os.kill(pid, 9)


def test_a_pipeline_and_a_command_substitution(
    job: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, out = job
    pc = ProcCache(callers=((os.getpid(), 0),))
    names: dict[str, str] = {}

    def sampled() -> list[Link]:
        kids = _children(proc.pid)
        if len(kids) < 3:
            return []
        links = job_links(pc, pc.caller_of(kids[0]))
        for pid in [proc.pid, *kids, *(k for kid in kids for k in _children(kid))]:
            p = read_stat(pid)
            if p is not None:
                names[p.key] = p.name
        pipes = {lk.chan for lk in links if lk.chan.startswith("pipe:")}
        return links if len(pipes) >= 2 and any(out.name in lk.chan for lk in links) else []

    _wait_for(sampled)
    links = sampled()
    acc = JobReads("J")
    for lk in links:
        acc.link(lk)
    holders = {lk.proc for lk in links if lk.chan == f"file:{out}"}
    (cat,) = holders
    counted = acc.counted(cat, "out.txt")
    # cat counts the sleep that writes its pipe, and nothing else: not the
    # shell, not the other sleep.
    assert sorted(names.get(k, "?") for k in counted) == ["cat", "sleep"]
    me = read_stat(proc.pid)
    assert me is not None
    shell = me.key
    # The shell reads the other sleep's output ($(...)).
    assert sorted(names.get(k, "?") for k in acc.counted(shell, "x")) == ["bash", "sleep"]
