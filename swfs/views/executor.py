"""Where parse jobs run: the parse executor interface.

The engine hands every parse to one executor (``open_executor``): the
local worker pool (swfs.views.parsework.ParsePool), or a Ray cluster
(swfs.views.rayfarm, ``swfs mount --parse-on ray://HOST:PORT``) that falls
back to that same local pool whenever the cluster cannot take a job.
Either way the outcome is a ``ParseOutcome`` whose hash names the bytes
that were parsed, and the engine stores it through its normal path.

``describe()`` tells the daemon's control socket which executor runs and
how many files went where (``swfs`` op ``executor``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from swfs.views.parsework import Pages, ParseOutcome, ParsePool, WorkerLimits


class ParseExecutor(Protocol):
    """What the engine (and swfs.views.ranged) asks of a place parses run."""

    limits: WorkerLimits

    async def parse(
        self,
        abs_path: str,
        rel: str,
        *,
        pages: Pages | None = None,
        budget: float | None = None,
    ) -> ParseOutcome: ...


class ExecutorError(Exception):
    """``--parse-on`` names no executor this machine can use."""


# What the executor of this process did (one engine per daemon).
_state: dict[str, Any] = {"executor": "local"}


def describe() -> dict[str, Any]:
    """The executor and its counts, for ``swfs status`` and tests."""
    return dict(_state)


def check(parse_on: str | None) -> None:
    """Refuse at once (before a mount) a ``--parse-on`` that cannot work
    here: an unknown scheme, or Ray missing.  Imports nothing heavy."""
    if parse_on is None:
        return
    from swfs.views import rayfarm

    why = rayfarm.problem(parse_on)
    if why is not None:
        raise ExecutorError(why)


@asynccontextmanager
async def open_executor(limits: WorkerLimits) -> AsyncIterator[ParseExecutor]:
    """The executor ``limits.parse_on`` names, for the life of the block."""
    async with ParsePool.open(limits) as pool:
        if limits.parse_on is None:
            _state.clear()
            _state["executor"] = "local"
            yield pool
            return
        from swfs.views import rayfarm

        async with rayfarm.RayExecutor.open(limits, pool, _state) as farm:
            yield farm
