"""swfs.history.recorder: records queued off the reply path run in order,
``drain`` waits for them, and links a dead daemon held are kept."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from swfs.history.recorder import Held, Recorder


def test_jobs_run_in_order_and_drain_waits_for_them() -> None:
    rec = Recorder(quiet=0.05, max_delay=5.0)  # waits for a pause: drain must not
    done: list[int] = []
    gate = threading.Event()

    def first() -> None:
        gate.wait(30)
        done.append(0)

    rec.submit(first)
    for i in range(1, 50):
        rec.submit(lambda i=i: done.append(i))
    assert rec.pending
    gate.set()
    rec.drain()
    assert done == list(range(50))
    assert not rec.pending
    rec.close()


def test_a_failing_job_does_not_stop_the_queue() -> None:
    rec = Recorder(quiet=0.0)
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("injected")

    rec.submit(boom)
    rec.submit(lambda: done.append("after"))
    rec.drain()
    assert done == ["after"]
    rec.close()


def test_drain_inside_a_job_does_not_wait_for_itself() -> None:
    rec = Recorder(quiet=0.0)
    done: list[str] = []

    def job() -> None:
        rec.drain()
        done.append("job")

    rec.submit(job)
    rec.drain()
    assert done == ["job"]
    rec.close()


def test_after_close_a_job_runs_at_once() -> None:
    rec = Recorder()
    rec.close()
    done: list[int] = []
    rec.submit(lambda: done.append(1))
    assert done == [1]


def test_recover_keeps_a_dead_daemons_links_not_a_live_ones(tmp_path: Path) -> None:
    held = Held(str(tmp_path / "held"))
    (tmp_path / "f").write_bytes(b"x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        mine = held.hold("f", fd)
    finally:
        os.close(fd)
    assert mine is not None
    assert os.path.samefile(mine, tmp_path / "f")
    # A daemon that is gone: no process has this pid now.
    dead = tmp_path / "held" / "999999999-1-0"
    os.link(tmp_path / "f", dead)
    # A live one's link (our parent's pid stands for a running daemon).
    live = tmp_path / "held" / f"{os.getppid()}-1-0"
    os.link(tmp_path / "f", live)
    kept: list[str] = []
    assert held.recover(kept.append) == 2  # ours (this pid is the recovering one) and the dead's
    assert sorted(kept) == sorted([mine, str(dead)])
    assert os.listdir(tmp_path / "held") == [live.name]
