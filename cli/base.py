"""What every command shares: the target, the error type, progress, paths."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swfs.api import STORE_NAME, XATTR_PREFIX, RelPath
from swfs.store import hashform

# The engine's modules (trio, the store, the parsers) are imported where a
# command needs them: `swfs --version`, `swfs search` and `swfs status` of a
# mounted workspace only talk to the daemon, and an agent calls them in a loop.
if TYPE_CHECKING:
    from swfs.engine import Engine
    from swfs.workspace import Config


class CLIError(Exception):
    """An error for the user: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def check_name(name: str, what: str) -> str:
    """``name`` as a new or looked-up ``what`` name (snapshot, submission,
    world, tab): an empty one or one with a control character is refused
    in one line (``swfs.history.names``)."""
    from swfs.history import names

    bad = names.problem(name, what)
    if bad is not None:
        raise CLIError(bad, 2)
    return name


@dataclass(frozen=True)
class Target:
    src: Path
    store: Path
    mounted: bool
    mount_point: Path | None = None  # when TARGET was given as the mount point


def resolve_target(target: str, store: str | None = None) -> Target:
    """TARGET is a workspace folder or its mount point.  Nothing is created."""
    path = Path(target)
    if not path.exists():
        raise CLIError(f"{target}: no such file or directory")
    if not path.is_dir():
        raise CLIError(f"{target}: not a directory")
    try:
        src = os.getxattr(path, XATTR_PREFIX + "source").decode("utf-8", "surrogateescape")
        store_dir = os.getxattr(path, XATTR_PREFIX + "store").decode("utf-8", "surrogateescape")
        return Target(Path(src), Path(store_dir), True, path.absolute())
    except OSError:
        pass
    from swfs import control
    from swfs.control import ControlError, ControlUnavailable

    src_path = path.resolve()
    store_path = Path(store).resolve() if store else src_path / STORE_NAME
    from swfs.store.seed import seeded_from

    base = seeded_from(store_path)  # a task sandbox's TASKDIR: its SRC is BASE
    if base is not None:
        src_path = base
    mounted = False
    if (store_path / control.SOCKET_NAME).exists():
        try:
            control.request(store_path, "ping", io_timeout=5)
            mounted = True
        except (ControlUnavailable, ControlError, OSError):
            mounted = False
    return Target(src_path, store_path, mounted)


def config_from(args: argparse.Namespace) -> Config:
    from swfs.views.parsework import WorkerLimits
    from swfs.workspace import Config

    limits = WorkerLimits(
        timeout=getattr(args, "parse_timeout", None) or WorkerLimits.timeout,
        memory_mb=getattr(args, "parse_memory", None) or WorkerLimits.memory_mb,
        workers=getattr(args, "workers", None) or WorkerLimits().workers,
    )
    range_pages = getattr(args, "range_pages", None)
    if range_pages is not None:
        if range_pages < 0:
            raise CLIError("--range-pages: a number of pages, 0 or more")
        limits = dataclasses.replace(limits, range_threshold=range_pages)
    parse_on = getattr(args, "parse_on", None)
    if parse_on:
        from swfs.views.executor import ExecutorError, check

        try:
            check(parse_on)
        except ExecutorError as exc:
            raise CLIError(str(exc), 2) from None
        limits = dataclasses.replace(limits, parse_on=parse_on)
    return Config(limits=limits, cache_dir=getattr(args, "cache", None))


def require_workspace(t: Target) -> None:
    """Refuse a folder that is not a workspace yet: only ``index`` and
    ``mount`` make one, so no other command leaves a store behind."""
    from swfs.store.records import Store

    if t.mounted or Store.exists(t.store):
        return
    raise CLIError(
        f"{t.src}: not an swfs workspace (no store at {t.store}); "
        f"`swfs index {t.src}` or `swfs mount {t.src} MNT` makes one"
    )


def open_engine(
    t: Target, args: argparse.Namespace, *, create: bool = False
) -> AbstractContextManager[Engine]:
    """The engine of ``t``; unless ``create``, only if its store exists."""
    from swfs.engine import Engine

    if not create:
        require_workspace(t)
    if t.mounted:
        # What the daemon has queued to record (closes, changes of names) is
        # in the store before this process reads it.
        from swfs import control
        from swfs.control import ControlError, ControlUnavailable

        with contextlib.suppress(ControlUnavailable, ControlError, OSError):
            control.request(t.store, "drain", io_timeout=120)
    return Engine.open(t.src, t.store, config=config_from(args))


def workspace_rel(t: Target, path: str) -> RelPath:
    """PATH as given (relative to TARGET, or absolute under it) -> workspace rel."""
    p = Path(path)
    if p.is_absolute():
        for root in (t.src, t.mount_point):
            if root is not None and p.is_relative_to(root):
                return RelPath(p.relative_to(root).as_posix())
        raise CLIError(f"{path}: not inside the workspace {t.src}")
    parts = [x for x in p.as_posix().split("/") if x not in ("", ".")]
    if ".." in parts:
        raise CLIError(f"{path}: '..' is not allowed in workspace paths")
    return RelPath("/".join(parts))


def when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress:
    """A one-line progress bar on a terminal; silent otherwise."""

    def __init__(self, label: str, stream: Any = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        width = 30
        filled = width * done // total if total else width
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()


Command = Callable[[argparse.Namespace], int]


class Commands:
    """Adds subcommands; each command module has ``register(commands)``."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub

    def add(
        self, name: str, fn: Command, help_: str, target: str | None = "target"
    ) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = self.sub.add_parser(name, help=help_, description=help_)
        if target:
            sp.add_argument(
                target, metavar=target.upper(), help="workspace folder or its mount point"
            )
            sp.add_argument("--store", help="store directory (default: SRC/.swfs)")
        sp.set_defaults(fn=fn)
        return sp

    @staticmethod
    def parse_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--workers", type=int, help="parse worker processes (default: cores)")
        sp.add_argument("--parse-timeout", type=float, help="seconds per file (default 120)")
        sp.add_argument("--parse-memory", type=int, help="MiB per parse worker (default 3072)")
        sp.add_argument(
            "--range-pages",
            type=int,
            help="PDFs of more pages are parsed range by range, their pages readable as "
            "they come (default 100; 0: always whole)",
        )
        sp.add_argument(
            "--cache",
            metavar="DIR",
            help="a shared parse cache, a folder (made 0700 if missing) or s3://BUCKET/PREFIX "
            "(pip install 'swfs[s3]'): parses and renders another workspace put there are "
            "used, not made again, and this one's are added; the store remembers it",
        )
        sp.add_argument(
            "--parse-on",
            metavar="ray://HOST:PORT",
            help="run parse jobs on a Ray cluster (its client port; 'ray': the RAY_ADDRESS "
            "environment variable), each in the same sandbox; needs pip install 'swfs[ray]' "
            "(docs/scale.md)",
        )


def log_field(value: Any) -> Any:
    """A log event's field as text: hashes in the short form (--json keeps them whole)."""
    if isinstance(value, str) and hashform.is_full(value):
        return hashform.label(value)
    return value
