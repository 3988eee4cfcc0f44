"""A handler's answer: its reply now, or an awaitable of it.

The handlers of LOOKUP, GETATTR, OPEN, CREATE, GETXATTR, WRITE, FLUSH,
RELEASE and LSEEK (``mountd.operations``) are plain methods: where the
answer needs no waiting (a system call or two, an LMDB read, memory) they
return it, and where it must wait (a worker thread, a parse) they return
the coroutine that will.  Whether a request is answered at once or awaited
is then decided in one place, the binding (``mountd.binding``): our pyfuse3
fork replies at once to a value and awaits an awaitable; stock pyfuse3
awaits every handler, so the binding wraps these in coroutines there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import CoroutineType
from typing import Any, TypeAlias, TypeVar, Union

import pyfuse3

T = TypeVar("T")

#: A reply now, or an awaitable of it.
Reply: TypeAlias = Union[T, Awaitable[T]]  # noqa: UP007 (a generic alias)


# What replies are made of: answered at once without asking the Awaitable ABC.
REPLIES = frozenset({pyfuse3.EntryAttributes, pyfuse3.FileInfo, bytes, int, tuple, type(None)})


def pending(got: object) -> bool:
    """``got`` is an awaitable: the reply comes later."""
    kind = type(got)
    if kind is CoroutineType:
        return True
    return kind not in REPLIES and isinstance(got, Awaitable)


async def awaited(got: Reply[T]) -> T:
    """The reply, awaited where it is not at hand (for callers that are
    coroutines themselves)."""
    if pending(got):
        return await got  # type: ignore[misc]
    return got  # type: ignore[return-value]


def as_coroutine(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """``fn`` as an ``async def`` (for a pyfuse3 that awaits every handler)."""

    async def call(*args: Any) -> Any:
        return await awaited(fn(*args))

    call.__name__ = getattr(fn, "__name__", "call")
    call.__doc__ = fn.__doc__
    return call
