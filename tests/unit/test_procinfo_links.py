"""``procinfo.job_links``: the pipe ends and written files the processes of
a job hold, read from /proc while they run (no mount needed)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from swfs.evidence.lineage import JobReads
from swfs.evidence.procinfo import Link, ProcCache, job_links, read_stat

pytestmark = pytest.mark.timeout(60)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _name(pid: int) -> str:
    p = read_stat(pid)
    return "?" if p is None else p.name


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
        kids = _children(proc.pid)
        proc.kill()
        proc.wait()
        for pid in kids:  # only those this test started, by pid
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


def test_a_pipeline_and_a_command_substitution(
    job: tuple[subprocess.Popen[bytes], Path],
) -> None:
    proc, out = job
    pc = ProcCache(callers=((os.getpid(), 0),))
    names: dict[str, str] = {}

    def sampled() -> list[Link]:
        kids = _children(proc.pid)
        # All forked and exec'd (a child still named bash is about to be).
        if len(kids) < 3 or "bash" in map(_name, kids):
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


def test_a_stage_never_seen_is_bridged_by_the_nearest_unread_pipe_before_it() -> None:
    """`cat a | grep x | sort | tail > out` where sort opened no file of the
    mount and came and went unseen: tail's pipe, written by nobody seen, is
    fed by grep's, the nearest pipe before it that nobody was seen reading;
    not by an earlier `cat b | wc -l` (wc seen), nor the harness's stdin."""
    acc = JobReads("root.1/1")
    links = [
        ("root.1", "pipe:1", False, True),  # the harness's stdin, inherited by all
        ("tail", "pipe:1", False, False),
        ("cat_b", "pipe:5", True, True),
        ("wc", "pipe:5", False, True),
        ("cat_c", "pipe:7", True, True),  # its reader never seen either, but earlier
        ("cat_a", "pipe:10", True, True),
        ("grep", "pipe:10", False, True),
        ("grep", "pipe:11", True, True),
        ("root.1", "pipe:11", False, False),  # the shell, handing it on: both ends
        ("root.1", "pipe:11", True, False),
        ("tail", "pipe:14", False, True),
    ]
    for proc, chan, write, std in links:
        acc.link(Link(proc, chan, write, std))
    assert acc.counted("tail", "out") == {"tail", "grep", "cat_a"}
    assert acc.counted("wc", "n") == {"wc", "cat_b"}
    # `x=$(cat d); echo hi | sort > out2` (echo's subshell unseen): the
    # command substitution's pipe, read by the shell alone, feeds no stage.
    for proc, chan, write, std in [
        ("cat_d", "pipe:20", True, True),
        ("root.1", "pipe:20", False, False),
        ("sort", "pipe:21", False, True),
    ]:
        acc.link(Link(proc, chan, write, std))
    assert acc.counted("sort", "out2") == {"sort"}
