"""``swfs mount --staged --from BASE TASKDIR MNT``: a task sandbox.

BASE is a baseline folder, already indexed with its own store
(``BASE/.swfs``).  TASKDIR holds the task's store (``TASKDIR/.swfs``), made
from BASE's on first use (swfs.store.seed) so that BASE's parsed views and
search index are ready at once; the mount shows BASE's files read-write
through the staged layer in that store, and BASE is never written.
``swfs reset MNT`` drops the task's changes for the next task.
"""

from __future__ import annotations

import time
from pathlib import Path

from swfs.api import STORE_NAME

from .base import CLIError


def sandbox_paths(
    taskdir: Path, base: Path, *, staged: bool, store: str | None
) -> tuple[Path, Path]:
    """(SRC, store) of a sandbox mount: BASE, and the task's store, seeded
    from BASE's if new."""
    from swfs.store import seed

    if not staged:
        raise CLIError(
            "--from BASE makes a task sandbox: it needs --staged (BASE is never written)"
        )
    if store is not None:
        raise CLIError("--from BASE keeps the task's store in TASKDIR: no --store")
    base = base.resolve()
    if not base.is_dir():
        raise CLIError(f"{base}: not a directory")
    taskdir = taskdir.absolute()
    if taskdir == base or base in taskdir.resolve().parents:
        raise CLIError(f"{taskdir}: TASKDIR must not be inside BASE ({base})")
    try:
        taskdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise CLIError(f"{taskdir}: cannot make it: {exc.strerror}") from None
    taskdir = taskdir.resolve()
    task_store = taskdir / STORE_NAME
    t0 = time.monotonic()
    try:
        if seed.seed(base, base / STORE_NAME, task_store):
            import logging

            logging.getLogger(__name__).info(
                "%s: seeded from %s in %.2f s", task_store, base, time.monotonic() - t0
            )
    except seed.SeedError as exc:
        raise CLIError(str(exc)) from None
    return base, task_store


def refuse_commit(store: Path) -> None:
    """A sandbox's changes never go into BASE (``swfs commit``)."""
    from swfs.store import seed

    base = seed.seeded_from(store)
    if base is not None:
        raise CLIError(
            f"{store}: a task sandbox over {base}: its changes are never written into BASE "
            "(`swfs reset` or `swfs discard` drops them; copy out what you keep)"
        )


def refuse_plain_mount(src: Path, store: Path) -> None:
    """A TASKDIR mounted as if it were a workspace would show the store's
    own folder, its records all gone: say how to mount it."""
    from swfs.store import seed

    base = seed.seeded_from(store)
    if base is not None:
        raise CLIError(
            f"{src}: a task sandbox over {base}: mount it with `swfs mount --staged "
            f"--from {base} {src} MNT`"
        )
