"""sqlite connections that store any path: sqlite keeps text as UTF-8, and a
file name need not be (``os.fsdecode`` keeps undecodable bytes as lone
surrogates, which the sqlite3 module refuses to encode).

And statements of a few shapes only (``pow2_chunks``, ``in_list``): the
sqlite3 module keeps the last 128 statements it prepared on each connection,
and one of many rows or many ``?`` is a large program.  A batch insert with
a statement per batch length kept one of every length it met: on a daemon
over a long run of small operations, those statements were most of the
memory sqlite held (``sqlite3_memory_used``), tens of MB.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def pow2_chunks(items: Sequence[T], most: int) -> Iterator[Sequence[T]]:
    """``items`` in order, in chunks whose lengths are powers of two of at
    most ``most`` (itself a power of two): a statement of one row per item
    then comes in ``log2(most) + 1`` shapes, whatever the batch lengths."""
    if most <= 0 or most & (most - 1):
        raise ValueError(f"not a power of two: {most}")
    i, n = 0, len(items)
    while i < n:
        size = min(most, 1 << ((n - i).bit_length() - 1))
        yield items[i : i + size]
        i += size


def in_list(values: Sequence[T]) -> tuple[str, list[T]]:
    """``(?,?,...)`` for an ``IN`` of ``values``, and its parameters, padded
    to a power of two by repeating the last value (which changes nothing an
    ``IN`` matches), so that the statement comes in few shapes."""
    out = list(values)
    if out:
        out += [out[-1]] * ((1 << (len(out) - 1).bit_length()) - len(out))
    return "(" + ",".join("?" * len(out)) + ")", out


def escaped(v: str) -> str:
    """``v`` as UTF-8 text can hold it: a path that is not UTF-8 (a name
    whose bytes ``os.fsdecode`` escaped as lone surrogates) becomes the
    backslash escapes of those bytes (``caf\\xe9.txt``), the form in which
    swfs shows such a name wherever it writes text (the access journal, the tab,
    search hits); any other string comes back as it is."""
    if v.isascii():
        return v
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raw = (
            v.encode("utf-8", "surrogateescape")
            if _escapes_only(v)
            else v.encode("utf-8", "replace")
        )
        return raw.decode("utf-8", "backslashreplace")
    return v


_BYTE_ESCAPE = re.compile(rb"\\x([0-9a-f]{2})")


def unescaped(v: str) -> str:
    """The name ``escaped`` made ``v`` from (``caf\\xe9.txt`` -> the name of
    bytes ``caf\xe9.txt``, as ``os.fsdecode`` gives it).  A name may hold
    such a sequence itself: callers keep ``v`` when no file has the
    unescaped name."""
    if "\\x" not in v:
        return v
    raw = _BYTE_ESCAPE.sub(
        lambda m: bytes([int(m.group(1), 16)]), v.encode("utf-8", "surrogateescape")
    )
    return raw.decode("utf-8", "surrogateescape")


def escaped_json(value: Any) -> Any:
    """``value`` (JSON-ready lists, dicts, strings) with every string
    ``escaped``: what a JSON column holds, so that it stays valid JSON."""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, list | tuple):
        return [escaped_json(v) for v in value]
    if isinstance(value, dict):
        return {escaped(str(k)): escaped_json(v) for k, v in value.items()}
    return value


def _sql_value(v: Any) -> Any:
    """sqlite keeps text as UTF-8: a string it cannot hold is stored
    ``escaped``, the same form on every write and every lookup, so one
    undecodable name never fails a whole batch."""
    return escaped(v) if isinstance(v, str) else v


def _escapes_only(v: str) -> bool:
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in v)


def _sql_params(params: Any) -> Any:
    if isinstance(params, Mapping):
        return {k: _sql_value(v) for k, v in params.items()}
    return [_sql_value(v) for v in params]


class PathSafeConnection(sqlite3.Connection):
    """A connection whose parameters are made storable (``_sql_value``)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        # Nearly every value is storable as it is: bind them so, and escape
        # only when binding refused one (it refuses before the statement
        # runs).  Escaping every value first cost the access journal more
        # than the rest of storing its rows (11 values a row, a Python call
        # each).
        try:
            return super().execute(sql, parameters)
        except UnicodeEncodeError:
            return super().execute(sql, _sql_params(parameters))

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        return super().executemany(sql, (_sql_params(p) for p in parameters))


def path_key(rel: str) -> bytes:
    """The exact bytes of a path, for a column that must give the very name
    back (``escaped`` text may not: two names can share an escaped form)."""
    return rel.encode("utf-8", "surrogateescape")


def path_of(key: bytes) -> str:
    """The path a ``path_key`` column holds."""
    return bytes(key).decode("utf-8", "surrogateescape")
