"""Who sent the request being handled: for the trees whose content depends
on the caller (``.search``).

The adapter sets ``REQUEST`` around every handler (None for requests that
carry no context, such as read and readdir), so a provider never sees the
context of an earlier request served by the same task.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from swfs.find.search import Caller

REQUEST: ContextVar[Any] = ContextVar("swfs_request", default=None)


def _groups(pid: int) -> frozenset[int]:
    """The supplementary groups of ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return frozenset(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset()


def current_caller() -> Caller:
    """The caller of the request being handled; nobody (only what everyone
    may read) when the request carries no context."""
    ctx = REQUEST.get()
    if ctx is None:
        return Caller.nobody()
    return Caller(int(ctx.uid), frozenset({int(ctx.gid)}) | _groups(int(ctx.pid)))
