"""Who is calling: a process's name, command line, parents and job, from /proc.

The daemon learns a request's pid from the kernel; what that process is has
to be read from ``/proc`` while it still runs.  Reads of ``/proc`` touch no
disk; a process seen in the last second is not read again (its pid cannot be
reused that fast: the kernel hands pids out in order up to ``pid_max``).

**The job rule** (which processes' reads count as inputs of a write, see
``swfs.evidence.lineage``).  A process's ancestors are followed up to, not
including, the first of: the process that ran ``swfs mount`` or one of its
ancestors (the mount's callers, e.g. an agent's harness), a session leader
(a terminal's login shell, a harness started with ``setsid``), or pid 1.
The outermost process reached is the *job root*: the ``bash -c`` a harness
runs per command, or a command a terminal shell started.  Two processes are
in the same job when they have the same job root and the same process
group: every process of a ``bash -c "..."`` (its pipelines, its subshells,
the scripts it runs) is in one job; in an interactive shell, which gives
each pipeline its own process group, each pipeline is a job of its own.

**Channels** (how data passes between the processes of a job without a
file of the mount).  ``job_links`` reads, from ``/proc/PID/fd``, the pipes
each live process of a job holds and in which direction, and the files it
holds open for writing: a pipeline's ``cat`` writes the pipe ``sort``
reads; a ``for`` loop's children write the file its redirection opened.
Read when a process first opens a file of the mount, while it runs: a
short-lived ``head`` is seen at its open, whatever it has become when its
reads are stored.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

TRUST_SECONDS = 1.0  # a process read this recently is not read again
MAX_DEPTH = 32  # ancestors followed at most (a fork bomb must not stall a request)
MAX_CMDLINE = 4096  # bytes of a command line kept
MAX_JOB_PROCS = 48  # processes of a job whose descriptors are read at once
MAX_FDS = 256  # descriptors read per process


@dataclass(frozen=True)
class Proc:
    """One process as /proc showed it.  ``start`` (clock ticks after boot)
    tells two processes that had the same pid apart."""

    pid: int
    start: int
    name: str
    ppid: int
    pgid: int
    sid: int
    uid: int = -1
    # "PID.START": made once (the journal names the process by it per event)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.pid}.{self.start}")


@dataclass(frozen=True)
class Caller:
    """A request's process: itself, its parents up to the job root (nearest
    first, ``chain[0]`` is the process), and its job."""

    proc: Proc
    chain: tuple[Proc, ...]
    job: str
    cmdline: tuple[str, ...] = field(default=())


def read_stat(pid: int, proc_root: str = "/proc") -> Proc | None:
    """``/proc/PID/stat`` parsed; None when the process is gone."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The name is in parentheses and may itself hold ') ': split at the last.
    lpar, rpar = raw.find(b"("), raw.rfind(b")")
    if lpar < 0 or rpar < lpar:
        return None
    name = raw[lpar + 1 : rpar].decode("utf-8", "replace")
    rest = raw[rpar + 2 :].split()
    try:
        # fields after the name: state ppid pgrp session tty_nr tpgid flags
        # minflt cminflt majflt cmajflt utime stime cutime cstime priority
        # nice num_threads itrealvalue starttime
        ppid, pgid, sid, start = int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19])
    except (IndexError, ValueError):
        return None
    return Proc(pid, start, name, ppid, pgid, sid)


def read_cmdline(pid: int, proc_root: str = "/proc") -> tuple[str, ...]:
    try:
        with open(f"{proc_root}/{pid}/cmdline", "rb") as f:
            raw = f.read(MAX_CMDLINE)
    except OSError:
        return ()
    return tuple(a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0") if a)


def read_uid(pid: int, proc_root: str = "/proc") -> int:
    try:
        return os.stat(f"{proc_root}/{pid}").st_uid
    except OSError:
        return -1


class ProcCache:
    """Process lookups for the daemon's request handlers, cached for a second.

    ``callers``: (pid, start) of the process that ran ``swfs mount`` and its
    ancestors; ancestry stops below them (see the module's job rule)."""

    def __init__(self, callers: tuple[tuple[int, int], ...] = (), proc_root: str = "/proc") -> None:
        self.callers = dict(callers)
        self.proc_root = proc_root
        self._procs: dict[int, tuple[float, Proc]] = {}
        self._callers: dict[int, tuple[float, Caller]] = {}

    def proc(self, pid: int, now: float | None = None) -> Proc | None:
        now = time.monotonic() if now is None else now
        hit = self._procs.get(pid)
        if hit is not None and now - hit[0] < TRUST_SECONDS:
            return hit[1]
        p = read_stat(pid, self.proc_root)
        if p is None:
            # Gone: what was seen of it last is still the best answer.
            return None if hit is None else hit[1]
        if hit is not None and hit[1].start == p.start and hit[1].uid >= 0:
            p = Proc(p.pid, p.start, p.name, p.ppid, p.pgid, p.sid, hit[1].uid)
        else:
            p = Proc(p.pid, p.start, p.name, p.ppid, p.pgid, p.sid, read_uid(pid, self.proc_root))
        if len(self._procs) > 4096:
            self._prune(now)
        self._procs[pid] = (now, p)
        return p

    def _prune(self, now: float) -> None:
        for cache in (self._procs, self._callers):
            for k in [k for k, (t, _) in cache.items() if now - t > 10 * TRUST_SECONDS]:
                del cache[k]

    def caller_of(self, pid: int) -> Caller:
        """The process ``pid`` with its parents and job.  Never raises: a
        process gone before it could be read is known by its pid only."""
        now = time.monotonic()
        hit = self._callers.get(pid)
        if hit is not None and now - hit[0] < TRUST_SECONDS:
            return hit[1]
        p = self.proc(pid, now)
        if p is None:
            p = Proc(pid, 0, "?", 0, pid, pid)
        chain = [p]
        cur = p
        while len(chain) < MAX_DEPTH and not self._stops_above(cur):
            parent = self.proc(cur.ppid, now)
            if parent is None or parent.pid in {c.pid for c in chain}:
                break
            chain.append(parent)
            cur = parent
        root = chain[-1]
        cmdline = read_cmdline(pid, self.proc_root)
        c = Caller(p, tuple(chain), f"{root.pid}.{root.start}/{p.pgid}", cmdline)
        self._callers[pid] = (now, c)
        return c

    def _stops_above(self, p: Proc) -> bool:
        """Is ``p`` a job root: its parent one of the mount's callers, or p
        one itself, a session leader, or a child of pid 1?"""
        if p.ppid in (0, 1) or p.pid == p.sid or self._is_caller(p.pid, p.start):
            return True
        if p.ppid in self.callers:
            parent = self.proc(p.ppid)
            return parent is None or self._is_caller(parent.pid, parent.start)
        return False

    def _is_caller(self, pid: int, start: int) -> bool:
        return self.callers.get(pid, -1) in (start, 0)


@dataclass(frozen=True)
class Link:
    """Process ``proc`` (its key) holds channel ``chan`` ("pipe:INODE", or
    "file:/ABSOLUTE/PATH" open for writing), ``write``: its write end;
    ``std``: on descriptor 0 (a read end) or 1 or 2 (a write end), as a
    pipeline's stages hold theirs; a shell holds the ends it hands its
    children on higher descriptors while it sets them up."""

    proc: str
    chan: str
    write: bool
    std: bool


def fd_links(pid: int, proc_root: str = "/proc") -> list[tuple[int, str, bool]]:
    """(descriptor, channel, write end?) of the pipes ``pid`` holds and the
    regular files it holds open for writing; [] when it is gone."""
    base = f"{proc_root}/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out: list[tuple[int, str, bool]] = []
    for name in names[:MAX_FDS]:
        link = f"{base}/{name}"
        try:
            target = os.readlink(link)
            # The link's mode is the descriptor's access mode.
            mode = os.lstat(link).st_mode
        except OSError:
            continue
        write = bool(mode & 0o200)
        if target.startswith("pipe:["):
            chan = "pipe:" + target[6:-1]
            if mode & 0o400:
                out.append((int(name), chan, False))
            if write:
                out.append((int(name), chan, True))
        elif write and target.startswith("/") and not target.startswith(("/dev/", "/proc/")):
            out.append((int(name), "file:" + target, True))
    return out


def children(pid: int, proc_root: str = "/proc") -> list[int]:
    try:
        with open(f"{proc_root}/{pid}/task/{pid}/children", "rb") as f:
            return [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []


def job_links(caches: ProcCache, caller: Caller) -> list[Link]:
    """The channels the live processes of ``caller``'s job hold: those of
    its job root and the root's descendants in the caller's process group
    (at most ``MAX_JOB_PROCS``)."""
    root = caller.chain[-1]
    pgid = caller.proc.pgid
    out: list[Link] = []
    now = caches.proc(root.pid)
    if now is None or now.start != root.start:
        return out  # gone, or its pid is another process's now
    todo = [root.pid]
    seen: set[int] = set()
    while todo and len(seen) < MAX_JOB_PROCS:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        p = root if pid == root.pid else caches.proc(pid)
        if p is None:
            continue
        todo.extend(children(pid, caches.proc_root))
        if p.pgid != pgid and p is not root:
            continue
        for fd, chan, write in fd_links(pid, caches.proc_root):
            std = fd in (1, 2) if write else fd == 0
            out.append(Link(p.key, chan, write, std))
    return out


def ancestry(pid: int, proc_root: str = "/proc") -> tuple[tuple[int, int], ...]:
    """(pid, start) of ``pid`` and its ancestors, nearest first (``swfs mount``
    records its own so the daemon knows where jobs end)."""
    out: list[tuple[int, int]] = []
    while pid > 1 and len(out) < MAX_DEPTH:
        p = read_stat(pid, proc_root)
        if p is None:
            break
        out.append((p.pid, p.start))
        pid = p.ppid
    return tuple(out)
