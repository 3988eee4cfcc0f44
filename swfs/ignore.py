"""``.swfsignore``: paths the workspace neither versions nor parses.

The file sits at the workspace root and uses gitignore syntax (patterns,
``!`` negation, trailing ``/`` for directories, ``**``), matched by
``pathspec``'s implementation of git's rules.  Paths are '/'-separated and
relative to the root.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import pathspec

log = logging.getLogger(__name__)

IGNORE_FILE = ".swfsignore"


class IgnoreRules:
    """A compiled ``.swfsignore``; with no patterns nothing is ignored."""

    def __init__(self, lines: Iterable[str] = ()) -> None:
        self.lines = [line.rstrip("\r\n") for line in lines]
        self._spec = pathspec.GitIgnoreSpec.from_lines(self.lines)

    @classmethod
    def load(cls, root: Path) -> IgnoreRules:
        """The rules in ``root/.swfsignore``; none if the file is missing."""
        try:
            text = (Path(root) / IGNORE_FILE).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return cls()
        rules = cls(text.splitlines())
        log.debug("loaded %d line(s) from %s", len(rules.lines), Path(root) / IGNORE_FILE)
        return rules

    def ignored(self, rel: str, *, is_dir: bool = False) -> bool:
        """Whether ``rel`` (a file, or a directory if ``is_dir``) is ignored.

        As in git, a file under an ignored directory is ignored too: a caller
        walking the tree should not descend into a directory that is ignored.
        """
        rel = rel.strip("/")
        if not rel or not self.lines:
            return False
        # pathspec tells directories from files by a trailing slash.
        return self._spec.match_file(rel + "/" if is_dir else rel)
