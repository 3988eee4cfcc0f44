"""Small helpers every format module shares: one-line reasons, text budgets, quiet libraries."""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator

from parsers._base import ParseFailed

_WS = re.compile(r"\s+")
_REASON_LIMIT = 200


def one_line(text: str, limit: int = _REASON_LIMIT) -> str:
    """Collapse whitespace and cut to ``limit`` characters: a reason users read in one line."""
    flat = _WS.sub(" ", text).strip()
    if len(flat) > limit:
        flat = flat[: limit - 1].rstrip() + "…"
    return flat


# Exceptions whose text means little without their type ("'xl/workbook.xml'").
_BARE = (LookupError, TypeError, AttributeError, AssertionError)


def describe(exc: BaseException) -> str:
    """A one-line description of a library exception, with its type when the text is bare."""
    name = type(exc).__name__
    try:
        text = one_line(str(exc))
    except Exception:  # an exception whose message raises: its name is all there is
        return f"{name} (its message could not be read)"
    if not text:
        return name
    if isinstance(exc, _BARE) or len(text) <= 12:
        return f"{name}: {text}"
    return text


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence Python warnings raised by third-party libraries during a parse.

    openpyxl, bs4 and markitdown warn about things users cannot act on (missing
    default styles, unsupported extensions, markup that looks like a URL).  The
    test suite turns warnings into errors, and in a worker they are just noise.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


class TextBudget:
    """Counts text across units and fails past ``ParseOptions.max_text_bytes``.

    It counts code points, not encoded bytes: the limit is a sanity bound
    against runaway output, and ``len`` keeps the check free.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def add(self, text: str) -> str:
        self.used += len(text)
        if self.used > self.limit:
            raise ParseFailed(f"too much text (>{self.limit} bytes)")
        return text


def no_text_note(details: str) -> str:
    """The line an empty view shows instead of silence: ``[swfs: no text found (3
    pages, 3 images)]``.  ``details`` counts what the file does hold."""
    return f"[swfs: no text found ({details})]\n" if details else "[swfs: no text found]\n"
