"""SIGUSR1: the live daemon writes what it is doing to its log.

``kill -USR1 <daemon pid>`` logs the trio task tree (every task with the
frames it is suspended in, the way ``py-spy dump`` shows threads), the
requests answered so far by kind (``mountd.reqcount``), what malloc and
sqlite hold (``mountd.malloc.heap_line``) and the engine's parse queue,
so a hung or slow mount can be diagnosed without stopping it.  The dump
is built on the trio thread from a signal receiver, never inside the
signal handler.

With ``SWFS_TRACEMALLOC=N`` in its environment the daemon traces its Python
allocations (N frames each) from the start, and every dump adds the
allocation sites that grew most since the previous dump (or the start):
what holds the memory of a daemon whose RSS climbs over a long run.
"""

from __future__ import annotations

import logging
import os
import signal
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import trio

from mountd import malloc, reqcount

log = logging.getLogger(__name__)

MARK = "swfs task dump"  # the first line of every dump: tests and users look for it
TRACE_ENV = "SWFS_TRACEMALLOC"
TRACE_TOP = 25


class HeapTrace:
    """tracemalloc from the daemon's start, when ``SWFS_TRACEMALLOC`` asks."""

    def __init__(self) -> None:
        self.frames = _trace_frames(os.environ.get(TRACE_ENV, ""))
        self._last: tracemalloc.Snapshot | None = None
        if self.frames and not tracemalloc.is_tracing():
            tracemalloc.start(self.frames)
        if self.frames:
            self._last = self._snapshot()

    @staticmethod
    def _snapshot() -> tracemalloc.Snapshot:
        return tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )

    def lines(self) -> list[str]:
        if not self.frames or self._last is None:
            return []
        now = self._snapshot()
        current, peak = tracemalloc.get_traced_memory()
        out = [f"python heap: {current / 1e6:.1f} MB traced now, {peak / 1e6:.1f} MB peak"]
        key = "traceback" if self.frames > 1 else "lineno"
        for stat in now.compare_to(self._last, key)[:TRACE_TOP]:
            out.append(f"  {stat.size_diff / 1e6:+.2f} MB ({stat.count_diff:+d} blocks)")
            out.extend(
                f"      {line.strip()}" for line in stat.traceback.format()[-2 * self.frames :]
            )
        self._last = now
        return out


def _trace_frames(value: str) -> int:
    try:
        return max(0, min(int(value), 50))
    except ValueError:
        return 1 if value else 0


def _frames(task: trio.lowlevel.Task) -> Iterator[str]:
    for frame, lineno in task.iter_await_frames():
        code = frame.f_code
        yield f"{code.co_filename}:{lineno} in {code.co_name}"


def task_tree(root: trio.lowlevel.Task | None = None) -> list[str]:
    """One line per task (indented by depth), then one per frame it waits in."""
    lines: list[str] = []

    def walk(task: trio.lowlevel.Task, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}task {task.name}")
        lines.extend(f"{pad}    at {f}" for f in _frames(task))
        for nursery in task.child_nurseries:
            for child in sorted(nursery.child_tasks, key=lambda t: t.name):
                walk(child, depth + 1)

    top = root or trio.lowlevel.current_root_task()
    if top is not None:
        walk(top, 0)
    return lines


def dump_text(
    queue_lines: Callable[[], list[str]] | None = None, heap: HeapTrace | None = None
) -> str:
    lines = [MARK]
    lines += task_tree()
    lines.append(reqcount.line())
    try:
        lines.append(malloc.heap_line())
    except Exception as exc:  # a diagnostic must never take the daemon down
        lines.append(f"malloc: unavailable ({exc})")
    if queue_lines is not None:
        try:
            lines += queue_lines()
        except Exception as exc:  # a diagnostic must never take the daemon down
            lines.append(f"parse queue: unavailable ({exc})")
    if heap is not None:
        try:
            lines += heap.lines()
        except Exception as exc:
            lines.append(f"python heap: unavailable ({exc})")
    lines.append(f"end of {MARK}")
    return "\n".join(lines)


class DumpOnSignal:
    """Background work: dump on every SIGUSR1 until stopped."""

    def __init__(self, queue_lines: Callable[[], list[str]] | None = None) -> None:
        self.queue_lines = queue_lines
        self.heap = HeapTrace()
        self._cancel = trio.CancelScope()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with self._cancel, trio.open_signal_receiver(signal.SIGUSR1) as signals:
            task_status.started()
            async for _ in signals:
                log.warning("%s", dump_text(self.queue_lines, self.heap))

    def stop(self) -> None:
        self._cancel.cancel()
