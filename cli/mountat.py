"""``swfs mount --at SNAPSHOT``: a read-only world, and how ``status`` shows one."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swfs.api import world_of

if TYPE_CHECKING:
    from swfs.history.world import World
    from swfs.workspace import Config

from .base import CLIError, Target


def world_factory(
    src: Path, store: Path, name: str, config: Config, options: Any
) -> tuple[Callable[[], AbstractContextManager[World]], Any]:
    """The engine factory and mount options of a world of ``name``; the name
    is checked here, so a bad one fails before anything is mounted."""
    from swfs.history.world import open_world
    from swfs.store.records import Store
    from swfs.workspace import WorkspaceError

    if not Store.exists(store):
        raise CLIError(f"{src}: not an swfs workspace (no store at {store}): nothing to go back to")
    try:
        with open_world(src, store, name, config=config):
            pass
    except WorkspaceError as exc:
        raise CLIError(str(exc)) from None
    # A world records nothing: its reads are not the live workspace's evidence.
    options = dataclasses.replace(options, journal=False)

    def factory() -> AbstractContextManager[World]:
        return open_world(src, store, name, config=config)

    return factory, options


def world_status(args: argparse.Namespace, name: str, src: Path, store: Path) -> int:
    """``swfs status MNT`` on a world: which state it shows, and how much of it."""
    from swfs.history.world import open_world

    with open_world(src, store, name) as world:
        info = world.info
        counts: dict[str, int] = {}
        for rel in world.records:
            f = world.freshness(rel)  # type: ignore[arg-type]
            key = "unsupported" if f is None else f.value
            counts[key] = counts.get(key, 0) + 1
    out = {
        "world": info.name,
        "kind": info.kind,
        "at": info.at,
        "files": info.files,
        "baseline": info.baseline,
        "read_only": True,
        "source": str(src),
        "store": str(store),
        "mount_point": str(Path(args.target).absolute()),
        "freshness": counts,
    }
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    taken = (
        ""
        if info.at is None
        else f", taken {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(info.at))}"
    )
    print(f"world of {info.name} ({info.kind}{taken}): read-only mount of workspace {src}")
    print(f"{info.files} files; .review compares with {info.baseline}")
    print("views: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    print(f"unmount with `swfs umount {args.target}`; the live workspace is unaffected")
    return 0


def status_of_world(args: argparse.Namespace, src: Path, store: Path) -> int | None:
    """``status`` for a world's mount point, None for anything else."""
    name = world_of(args.target)
    return None if name is None else world_status(args, name, src, store)


def refuse_world(t: Target) -> None:
    """Commands that change a workspace refuse a world's mount point: it
    names the workspace, but it is not the place to change it."""
    name = None if t.mount_point is None else world_of(t.mount_point)
    if name is not None:
        raise CLIError(
            f"{t.mount_point}: a read-only world of {name}; "
            f"run this on the workspace {t.src} or its live mount"
        )
