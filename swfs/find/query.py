"""The search query language and who asks: light enough for the command
line (``swfs search`` parses and checks a query, and names its caller,
without loading the index).  ``swfs.find.search`` runs the queries."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_LIMIT = 20
MAX_LIMIT = 1000

SYNTAX = """\
# swfs search: {problem}
#
# Every name under .search/ is a query; reading it runs the query and lists
# ranked hits, best first, one a line:
#   .parsed/<path>/<unit>  <score>  <freshness>  <snippet with **matched** words>
#
# Query syntax (as in a search box):
#   regional revenue north      words: units matching more of them rank first,
#                               then by BM25 (score: words matched + BM25 in [0, 1))
#   "termination fee"           a quoted phrase: must occur as written
#   path:finance                only files under the folder finance/ (in a name
#                               under .search/ write a nested folder's / as %2F:
#                               path:finance%2F2024)
# Words are matched by stem (revenue finds revenues), case-insensitively.
# `swfs search TARGET "query" [--json] [-n N]` gives the same on the command line.
"""


class QueryError(ValueError):
    """A query that cannot be run; the message says why in one line."""


@dataclass(frozen=True)
class Query:
    text: str
    words: tuple[tuple[str, ...], ...]  # each word's tokens (several: matched as a phrase)
    phrases: tuple[tuple[str, ...], ...]
    paths: tuple[str, ...]  # folder prefixes, without trailing '/'

    def match_expr(self) -> str:
        """The FTS5 MATCH expression: every phrase, and any of the words."""

        def quote(tokens: Sequence[str]) -> str:
            return '"' + " ".join(tokens) + '"'

        parts = [quote(p) for p in self.phrases]
        if self.words:
            parts.append("(" + " OR ".join(quote(w) for w in self.words) + ")")
        return " AND ".join(parts)

    def all_tokens(self) -> list[str]:
        return [t for group in (*self.words, *self.phrases) for t in group]


_TOKEN = re.compile(r"\w+", re.UNICODE)
_PART = re.compile(r'path:("[^"]*"|\S*)|"([^"]*)"|(\S+)')


def _unescape_path(value: str) -> str:
    return value.replace("%2F", "/").replace("%2f", "/").replace("%25", "%")


def parse_query(text: str) -> Query:
    """Words, "quoted phrases" and ``path:folder``; raises QueryError."""
    if text.count('"') % 2:
        raise QueryError("a quote is not closed")
    words: list[tuple[str, ...]] = []
    phrases: list[tuple[str, ...]] = []
    paths: list[str] = []
    for m in _PART.finditer(text):
        path, phrase, word = m.groups()
        if path is not None:
            folder = _unescape_path(path.strip('"')).strip("/")
            parts = folder.split("/")
            if not folder or any(p in ("", ".", "..") for p in parts):
                raise QueryError(f"path:{path} names no folder (write path:finance)")
            paths.append(folder)
        elif phrase is not None:
            tokens = tuple(t.lower() for t in _TOKEN.findall(phrase))
            if tokens:
                phrases.append(tokens)
        elif word is not None:
            tokens = tuple(t.lower() for t in _TOKEN.findall(word))
            if tokens and tokens not in words:
                words.append(tokens)
    if not words and not phrases:
        raise QueryError("the query has no word to look for" if text.strip() else "empty query")
    return Query(text, tuple(words), tuple(phrases), tuple(paths))


def syntax_help(problem: str) -> str:
    return SYNTAX.format(problem=problem)


@dataclass(frozen=True)
class Caller:
    """Whose query it is: hits are filtered by what they may read."""

    uid: int
    gids: frozenset[int] = frozenset()

    @classmethod
    def nobody(cls) -> Caller:
        return cls(-1, frozenset())

    @property
    def root(self) -> bool:
        return self.uid == 0
