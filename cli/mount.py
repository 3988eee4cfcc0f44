"""``swfs mount`` / ``swfs umount``: the command line's bridge to the daemon in mountd."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from swfs.api import STORE_NAME, XATTR_PREFIX, EngineAPI, world_of
from swfs.evidence.procinfo import ancestry
from swfs.history import versioning

from .base import Commands, check_name, config_from
from .sandbox import refuse_plain_mount, sandbox_paths
from .staged import prepare_mount

if TYPE_CHECKING:
    from swfs.workspace import Config


class MountError(Exception):
    """Mounting or unmounting failed; names the path and the cause."""


def mount_workspace(args: argparse.Namespace, config: Config) -> int:
    # Imported here: pyfuse3 is not needed by the other commands.
    from mountd import launch
    from mountd.launch import mount
    from mountd.options import MountOptions
    from swfs.engine import Engine

    _refuse_dead_mount(args.mountpoint)
    mnt = Path(args.mountpoint).resolve()
    if not mnt.is_dir():
        raise MountError(f"{args.mountpoint}: not a directory")
    if args.from_base is not None:  # a task sandbox over BASE (cli.sandbox)
        src, store = sandbox_paths(
            Path(args.src), Path(args.from_base), staged=args.staged, store=args.store
        )
    else:
        src = Path(args.src).resolve()
        if not src.is_dir():
            raise MountError(f"{args.src}: not a directory")
        store = Path(args.store).resolve() if args.store else src / STORE_NAME
        refuse_plain_mount(src, store)
    if mnt == src or src in mnt.parents:
        raise MountError(f"{args.mountpoint}: the mount point must not be inside {src}")
    if args.reserve is not None and args.reserve < 0:
        raise MountError(f"--reserve {args.reserve:g}: must be 0 or more MiB")
    config = dataclasses.replace(
        config,
        rescan_interval=args.rescan_interval,
        embed_model=args.embed_model,
        temp_lifetime=args.temp_lifetime,
        version_interval=args.version_interval,
        reserve_bytes=None if args.reserve is None else int(args.reserve * (1 << 20)),
    )
    timeouts = {}
    if args.cache_timeout is not None:
        timeouts = dict.fromkeys(
            ("entry_timeout", "attr_timeout", "synthetic_timeout"), args.cache_timeout
        )
    try:
        options = MountOptions(
            stale=args.stale,
            stale_wait=args.stale_wait,
            pending_wait=args.wait_timeout,
            versions=args.versions,
            allow_other=False if args.no_allow_other else None,
            poll_window=max(0.0, args.poll_us) / 1e6,
            debug=args.debug,
            journal=not args.no_journal,
            every_listing=args.every_listing,
            share_tab=args.share_tab,
            callers=ancestry(os.getppid()),
            render_dpi=args.render_dpi,
            passthrough=args.passthrough,
            **timeouts,
        )
    except ValueError as exc:
        raise MountError(f"bad mount option: {exc}") from None

    factory: Callable[[], AbstractContextManager[EngineAPI]]
    if args.at is not None:  # a read-only world beside the live mount (cli.mountat)
        from .mountat import world_factory

        check_name(args.at, "world")
        factory, options = world_factory(src, store, args.at, config, options)
    else:
        factory = partial(Engine.open, src, store, config=config)
        store.mkdir(mode=0o700, parents=True, exist_ok=True)
        prepare_mount(src, store, staged=args.staged)
    log_file = None if args.foreground else store / "daemon.log"
    try:
        mount(factory, src, mnt, options, foreground=args.foreground, log_file=log_file)
    except launch.MountError as exc:
        raise MountError(str(exc)) from None
    return 0


def unmount_workspace(args: argparse.Namespace) -> int:
    from mountd import fusectl, launch

    mnt = fusectl.canonical(args.mountpoint)
    conn = fusectl.connection(mnt, fstype=None)
    if conn is None and not os.path.ismount(mnt):
        raise MountError(f"{args.mountpoint}: not mounted")
    if conn is not None:
        state = fusectl.probe(mnt, PROBE_WAIT)
        if state != "live":
            return _unmount_dead(args.mountpoint, mnt, conn, state)
    pid = None if args.lazy else _daemon_pid(mnt)
    try:
        launch.unmount(mnt, lazy=args.lazy)
    except launch.MountError as exc:
        raise MountError(str(exc)) from None
    if pid is not None and not _wait_exit(pid, UMOUNT_WAIT):
        print(
            f"swfs: {args.mountpoint}: unmounted; the daemon (pid {pid}) is still "
            f"closing its store after {UMOUNT_WAIT:g} s",
            file=sys.stderr,
        )
        return 1
    return 0


PROBE_WAIT = 10.0  # seconds a mount's daemon has to answer before it counts as hung


def _unmount_dead(name: str, mnt: Path, conn: int, state: str) -> int:
    """A mount whose daemon is gone (``dead``) or does not answer (``hung``):
    its FUSE connection is aborted (mountd.fusectl), then it is unmounted
    lazily.  Nothing waits on the mount point."""
    from mountd import fusectl, launch

    why = "is gone" if state == "dead" else f"did not answer within {PROBE_WAIT:g} s"
    try:
        fusectl.abort(conn)
        done = f"aborted its FUSE connection {conn}"
    except fusectl.FusectlError as exc:
        if state == "hung":
            raise MountError(
                f"{name}: the daemon {why} and its FUSE connection could not be aborted: {exc}"
            ) from None
        done = "its FUSE connection had ended"
    try:
        launch.unmount(mnt, lazy=True)
    except launch.MountError as exc:
        raise MountError(f"{name}: the daemon {why}; {done}; the unmount failed: {exc}") from None
    print(f"swfs: {name}: the daemon {why}; {done} and unmounted it lazily", file=sys.stderr)
    return 0


def _refuse_dead_mount(mountpoint: str) -> None:
    """A mount point left by a daemon that is gone or hung is not mounted
    over (nor stat'ed: that would wait for good): ``swfs umount`` first."""
    from mountd import fusectl

    mnt = fusectl.canonical(mountpoint)
    if fusectl.connection(mnt, fstype=None) is None:
        return
    state = fusectl.probe(mnt, PROBE_WAIT)
    if state == "dead":
        why = "a daemon that is gone"
    elif state == "hung":
        why = f"a daemon that did not answer within {PROBE_WAIT:g} s"
    else:
        return  # a live mount: launch says what it is
    raise MountError(f"{mountpoint}: still mounted by {why}; run `swfs umount {mountpoint}` first")


UMOUNT_WAIT = 120.0  # seconds `swfs umount` waits for the daemon to close its store


def _daemon_pid(mnt: Path) -> int | None:
    """The pid of the daemon serving the live mount ``mnt`` (from its store's
    lock file), or None (a world, or not ours to know)."""
    if world_of(mnt) is not None:
        return None  # a world holds no store lock
    try:
        store = os.getxattr(mnt, XATTR_PREFIX + "store").decode("utf-8", "surrogateescape")
        with open(os.path.join(store, "daemon.lock"), "rb") as f:
            pid = int(f.read(32).decode().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 0 else None


def _wait_exit(pid: int, limit: float) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b") ", 1)[-1].startswith(b"Z"):
                    return True
        except FileNotFoundError:
            return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def cmd_mount(args: argparse.Namespace) -> int:
    # The command line dies quietly of SIGPIPE (`swfs log | head`); the
    # daemon must not: a worker process that retires or a control client
    # that hangs up early must be an EPIPE, not the end of the mount.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return mount_workspace(args, config_from(args))


def cmd_umount(args: argparse.Namespace) -> int:
    return unmount_workspace(args)


def register(c: Commands) -> None:
    sp = c.add("mount", cmd_mount, "mount SRC at MNT (daemonizes once ready)", target="src")
    sp.add_argument("mountpoint", metavar="MNT")
    sp.add_argument("-f", "--foreground", action="store_true", help="stay in front, log to stderr")
    sp.add_argument(
        "--at",
        metavar="SNAPSHOT",
        help="mount a read-only world: the workspace as it was at a snapshot, a submission "
        "or `baseline`, with its .parsed and .review as of then (beside the live mount)",
    )
    sp.add_argument(
        "--stale",
        choices=("serve", "wait"),
        default="wait",
        help="stale reads: wait (up to --stale-wait) for the re-parse, or serve the "
        "prior view marked stale at once",
    )
    sp.add_argument(
        "--stale-wait",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="seconds a read of a stale view waits for its re-parse before it is "
        "served marked stale (default 2)",
    )
    sp.add_argument(
        "--wait-timeout",
        type=float,
        default=10.0,
        help="seconds a read of a pending unit waits for its first parse",
    )
    sp.add_argument(
        "--versions",
        choices=("hidden", "visible"),
        default="hidden",
        help="whether the mount root lists .versions (it works by path either way)",
    )
    sp.add_argument(
        "--render-dpi",
        type=float,
        default=110.0,
        metavar="DPI",
        help="resolution of the page images under .render (default 110)",
    )
    sp.add_argument("--no-allow-other", action="store_true", help="do not mount with allow_other")
    sp.add_argument(
        "--rescan-interval",
        type=float,
        default=30.0,
        help="seconds between scans for changes made behind the mount (a backstop for "
        "the change feed; at least 50 times the last scan's length)",
    )
    sp.add_argument(
        "--temp-lifetime",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a new file deleted or renamed over another within this time keeps no "
        "history of its own (an editor's temp file; default 60)",
    )
    sp.add_argument(
        "--reserve",
        type=float,
        default=None,
        metavar="MIB",
        help="space the store holds back so that deletes, truncates and gc work on a "
        "full disk (default 1/32 of the file system, 1 to 64 MiB; 0: none)",
    )
    sp.add_argument(
        "--version-interval",
        type=float,
        default=versioning.DEFAULT_INTERVAL,
        help="rewrites of a file within this many seconds of a burst's first version "
        "replace its last version instead of adding one, whether closed or "
        "fsynced; a version a snapshot names is kept "
        f"(default {versioning.DEFAULT_INTERVAL:g}; 0: every close)",
    )
    sp.add_argument(
        "--passthrough",
        choices=("auto", "on", "off"),
        default="auto",
        help="on: the kernel reads native files opened read-only itself (FUSE passthrough; "
        "needs libfuse 3.17 and root; the journal then records those reads without their "
        "byte ranges); auto: while the journal records, binary files only (a text file's reads "
        "keep their line ranges), every file with --no-journal; off: every read goes through "
        "the daemon",
    )
    sp.add_argument(
        "--poll-us",
        type=float,
        default=500.0,
        help="microseconds the daemon keeps polling for the next request after one "
        "(saves a wake-up per request in tree walks; 0: always sleep)",
    )
    sp.add_argument(
        "--cache-timeout",
        type=float,
        metavar="SECONDS",
        help="how long the kernel keeps names and attributes without asking again "
        "(every change is invalidated explicitly; default 86400)",
    )
    sp.add_argument(
        "--share-tab",
        action="store_true",
        help="let every user read .tab/ (by default only the mounting user and root); "
        "excerpts still come only from files the reader may read",
    )
    sp.add_argument(
        "--no-journal",
        action="store_true",
        help="record no opens, reads, listings or writes in the access journal (no lineage; "
        "swfs log shows the state log only)",
    )
    sp.add_argument(
        "--every-listing",
        action="store_true",
        help="journal every directory listing, each process's (each directory open then "
        "reaches the daemon: two requests per listing); by default the kernel keeps "
        "listings and the journal records the first of each directory per tab and the "
        "first after each change",
    )
    sp.add_argument(
        "--embed-model",
        metavar="DIR",
        help="a local static-embedding model (model2vec layout) for hybrid .search/ "
        "ranking; nothing is downloaded",
    )
    sp.add_argument("--debug", action="store_true", help="log every request")
    sp.add_argument(
        "--staged",
        action="store_true",
        help="hold writes in the store until `swfs commit` (SRC untouched until then)",
    )
    sp.add_argument(
        "--from",
        dest="from_base",
        metavar="BASE",
        help="with --staged: a task sandbox; SRC is then TASKDIR, the task's own store and "
        "writable layer (made if missing, from BASE's store: BASE's parsed views and search "
        "index are ready at once); the mount shows BASE, which is never written; "
        "`swfs reset MNT` drops the task's changes",
    )
    c.parse_opts(sp)
    sp = c.sub.add_parser("umount", help="unmount MNT", description="unmount MNT")
    sp.add_argument("mountpoint", metavar="MNT")
    sp.add_argument("-z", "--lazy", action="store_true", help="lazy unmount")
    sp.set_defaults(fn=cmd_umount)
