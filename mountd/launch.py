"""Mounting and unmounting: the daemon's lifecycle.

``mount`` forks (when not in the foreground) *before* the engine is opened or
trio started, since neither an LMDB environment nor a trio run survives a
fork.  The daemon reports readiness, or the reason it could not mount, through
a pipe, so ``swfs mount`` returns only once the mount answers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import pyfuse3
import trio

from mountd import binding, fusectl, malloc
from mountd.dump import DumpOnSignal
from mountd.fsutil import raise_fd_limit
from mountd.operations import Operations
from mountd.options import MountOptions
from mountd.worldnative import is_world
from swfs.api import EngineAPI
from swfs.changefeed import ChangeFeed

log = logging.getLogger(__name__)

EngineFactory = Callable[[], AbstractContextManager[EngineAPI]]

FSTYPE = "fuse.swfs"


class MountError(Exception):
    """The mount could not be made (or unmade); the message is one line."""


def fuse_options(src: Path, options: MountOptions) -> set[str]:
    opts = {
        f"fsname=swfs:{src}".replace(",", "_"),  # ',' separates mount options
        "subtype=swfs",
        "default_permissions",  # the kernel checks our modes: synthetic trees rely on it
    }
    if options.resolved_allow_other:
        opts.add("allow_other")
    if options.debug:
        opts.add("debug")
    return opts


def mounted_swfs(mountpoint: Path) -> bool:
    """True when ``mountpoint`` is an swfs mount (as /proc/mounts lists it)."""
    target = os.fsencode(mountpoint)
    try:
        lines = Path("/proc/self/mounts").read_bytes().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == FSTYPE.encode() and _unescape(fields[1]) == target:
            return True
    return False


def _unescape(field: bytes) -> bytes:
    # /proc/mounts writes ' ', '\t', '\n' and '\\' as octal escapes.
    out, i = bytearray(), 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def _check(src: Path, mountpoint: Path) -> None:
    if not src.is_dir():
        raise MountError(f"{src}: not a directory")
    if not mountpoint.is_dir():
        raise MountError(f"{mountpoint}: mount point is not a directory")
    if mounted_swfs(mountpoint):
        raise MountError(f"{mountpoint}: already an swfs mount")
    if mountpoint == src or src in mountpoint.parents:
        raise MountError(f"{mountpoint}: mount point must not be inside the workspace {src}")


def mount(
    engine_factory: EngineFactory,
    src: Path,
    mountpoint: Path,
    options: MountOptions,
    *,
    foreground: bool,
    log_file: Path | None,
) -> None:
    """Mount ``src`` at ``mountpoint``.  In the foreground, serve until
    unmounted (or SIGTERM/SIGINT); else return once a daemon serves it."""
    src, mountpoint = Path(src).resolve(), Path(mountpoint).resolve()
    _check(src, mountpoint)
    malloc.limit_arenas()  # before any thread starts (mountd.malloc)
    malloc.fix_mmap_threshold()
    if foreground:
        if log_file is not None:
            _log_to(log_file, options.debug)
        try:
            trio.run(_serve, engine_factory, src, mountpoint, options, lambda: None)
        except Exception as exc:  # the caller gets one line; the log has the traceback
            raise MountError(f"{mountpoint}: {_one_line(exc)}") from exc
        return
    _daemonize(engine_factory, src, mountpoint, options, log_file)


def _daemonize(
    engine_factory: EngineFactory,
    src: Path,
    mountpoint: Path,
    options: MountOptions,
    log_file: Path | None,
) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a new session, then the daemon in a grandchild
        code = 1
        try:
            os.close(r)
            os.setsid()
            if os.fork() == 0:
                code = _daemon_main(engine_factory, src, mountpoint, options, log_file, w)
            else:
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as pipe:
        # One line, not EOF: a worker process forked before "ok" may hold the pipe.
        reply = pipe.readline().decode("utf-8", "replace").strip()
    if reply != "ok":
        raise MountError(reply.removeprefix("error: ") or "the daemon exited before mounting")


def _daemon_main(
    engine_factory: EngineFactory,
    src: Path,
    mountpoint: Path,
    options: MountOptions,
    log_file: Path | None,
    status_fd: int,
) -> int:
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    out = null
    if log_file is not None:
        with contextlib.suppress(OSError):
            out = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    root = logging.getLogger()
    for h in root.handlers[:]:  # the caller's handlers now write into our log file too
        root.removeHandler(h)
    if log_file is not None:
        _log_to(log_file, options.debug)

    def ready() -> None:
        nonlocal status_fd
        os.write(status_fd, b"ok\n")
        os.close(status_fd)
        status_fd = -1

    try:
        trio.run(_serve, engine_factory, src, mountpoint, options, ready)
    except BaseException as exc:
        if status_fd >= 0:
            os.write(status_fd, f"error: {_one_line(exc)}\n".encode())
        else:
            log.critical("daemon crashed: %s", _one_line(exc), exc_info=exc)
        return 1
    return 0


def _one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _log_to(log_file: Path, debug: bool) -> None:
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)


class _FuseSession:
    """Closes the FUSE session on exit; unmounts only after a clean stop.
    After a crash the mount stays (answering ENOTCONN once we are gone): an
    empty-looking mount point makes rsync-style tools delete data."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        crashed = exc is not None
        if crashed:
            log.critical(
                "daemon crashed; leaving %s mounted: run `fusermount3 -u %s`",
                self.mountpoint,
                self.mountpoint,
                exc_info=exc,
            )
        pyfuse3.close(unmount=not crashed)


async def _watch_signals(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        task_status.started()
        async for signum in signals:
            log.info("%s: unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
            return


async def _serve(
    engine_factory: EngineFactory,
    src: Path,
    mountpoint: Path,
    options: MountOptions,
    ready: Callable[[], None],
) -> None:
    # Whatever the daemon makes (the store, caches, logs, its workers' files)
    # is its own alone unless it says otherwise.  A file or folder made
    # through the mount still gets exactly the mode the request asks for:
    # passthrough sets it explicitly after creating it.
    os.umask(0o077)
    raise_fd_limit()  # every file open through the mount holds a descriptor here
    async with AsyncExitStack() as stack:
        engine = stack.enter_context(engine_factory())
        ops = Operations(engine, str(src), str(engine.store_dir), options)
        stack.callback(ops.close)
        nursery = await stack.enter_async_context(trio.open_nursery())
        stack.callback(nursery.cancel_scope.cancel)
        await nursery.start(engine.run_background)
        stack.callback(ops.invalidator.stop)
        await nursery.start(ops.invalidator.run)
        if not is_world(engine):  # a world is one fixed state (mountd.worldnative)
            # The socket the CLI talks to (swfs.control), once the engine's work runs.
            control = engine.control_server()
            stack.callback(control.stop)
            await nursery.start(control.run)
            # Changes behind the mount, seen within a fraction of a second (the
            # engine's periodic rescan is the backstop).
            feed = ChangeFeed(
                engine.workspace,
                changed=ops.changed_behind,
                skip=ops.writing,
                touched=ops.touched_behind,
            )
            stack.callback(feed.stop)
            ops.feed = feed
            await nursery.start(feed.run)
        await nursery.start(ops.poller.run)
        await nursery.start(_watch_signals)
        await nursery.start(malloc.trim_periodically)  # freed heap back to the kernel
        # SIGUSR1: the task tree, the parse queue and the write sessions to the log.
        dump = DumpOnSignal(lambda: engine.queue_report() + engine.workspace.writes.report())
        stack.callback(dump.stop)
        await nursery.start(dump.run)
        # A world is mounted read-only: the kernel refuses changes itself and
        # reads cost no atime invalidation (a GETATTR on the next stat).
        ro = {"ro"} if is_world(engine) else set()
        pyfuse3.init(binding.adapt(ops), str(mountpoint), fuse_options(src, options) | ro)
        ops.mounted = True
        stack.push(_FuseSession(mountpoint).__exit__)
        _start_watchdog(stack, mountpoint)
        log.info("serving %s at %s", src, mountpoint)
        ready()
        await pyfuse3.main(max_tasks=options.max_tasks)
        log.info("unmounted %s", mountpoint)


def _start_watchdog(stack: AsyncExitStack, mountpoint: Path) -> None:
    """A killed daemon's connection is aborted by its watchdog (mountd.fusectl);
    a clean stop stands it down before the unmount."""
    conn = fusectl.connection(mountpoint)
    if conn is None:
        log.warning("%s: no FUSE connection in mountinfo: no watchdog", mountpoint)
        return
    if not fusectl.can_abort():
        log.warning(
            "%s: fusectl is not mounted at %s and only root can mount it: a killed daemon "
            "may leave this mount hung (docs/operations.md, A killed daemon)",
            mountpoint,
            fusectl.CONNECTIONS,
        )
    try:
        watchdog = fusectl.Watchdog(mountpoint, conn)
    except OSError as exc:
        log.warning("%s: no watchdog: %s", mountpoint, exc)
        return

    def stand_down(typ: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            watchdog.stand_down()

    stack.push(stand_down)


def unmount(mountpoint: Path, *, lazy: bool = False) -> None:
    """Unmount an swfs mount (``lazy``: detach now, finish when no longer busy)."""
    cmd = ["fusermount3", "-u", *(["-z"] if lazy else []), str(mountpoint)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise MountError(lines[-1] if lines else f"fusermount3 exited with {proc.returncode}")
