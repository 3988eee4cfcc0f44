"""``swfs mount`` / ``swfs umount``: the CLI's bridge to the daemon in mountd."""

from __future__ import annotations

import argparse
import dataclasses
import os
from contextlib import AbstractContextManager
from pathlib import Path

from .workspace import STORE_NAME, Config


class MountError(Exception):
    """Mounting or unmounting failed; names the path and the cause."""


def mount_workspace(args: argparse.Namespace, config: Config) -> int:
    # Imported here: pyfuse3 is not needed by the other commands.
    from mountd import launch
    from mountd.launch import mount
    from mountd.options import MountOptions

    from .engine import Engine

    src = Path(args.src).resolve()
    mnt = Path(args.mountpoint).resolve()
    if not src.is_dir():
        raise MountError(f"{args.src}: not a directory")
    if not mnt.is_dir():
        raise MountError(f"{args.mountpoint}: not a directory")
    if mnt == src or src in mnt.parents:
        raise MountError(f"{args.mountpoint}: the mount point must not be inside {src}")
    store = Path(args.store).resolve() if args.store else src / STORE_NAME
    config = dataclasses.replace(config, rescan_interval=args.rescan_interval)
    try:
        options = MountOptions(
            stale=args.stale,
            stale_wait=args.stale_wait,
            pending_wait=args.wait_timeout,
            versions=args.versions,
            allow_other=False if args.no_allow_other else None,
            poll_window=max(0.0, args.poll_us) / 1e6,
            debug=args.debug,
        )
    except ValueError as exc:
        raise MountError(f"bad mount option: {exc}") from None

    def factory() -> AbstractContextManager[Engine]:
        return Engine.open(src, store, config=config)

    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_file = None if args.foreground else store / "daemon.log"
    try:
        mount(factory, src, mnt, options, foreground=args.foreground, log_file=log_file)
    except launch.MountError as exc:
        raise MountError(str(exc)) from None
    return 0


def unmount_workspace(args: argparse.Namespace) -> int:
    from mountd import launch

    mnt = Path(args.mountpoint)
    if not os.path.ismount(mnt):
        raise MountError(f"{args.mountpoint}: not mounted")
    try:
        launch.unmount(mnt, lazy=args.lazy)
    except launch.MountError as exc:
        raise MountError(str(exc)) from None
    return 0
