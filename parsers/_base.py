"""The parser contract: what every format module provides.

A parser is pure: a path in, a list of units out.  It never touches the store
or the mount.  Parsers run inside a worker process (see ``swfs.views.parsework``),
which sets a wall-clock timeout and a memory cap around them, so a parser may
assume it is allowed to fail hard; it should still fail *clearly*.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Unit:
    """One piece of parsed text, shown as one file under ``.parsed/<rel>/``.

    ``name`` is the file name fixed by DESIGN.md (``page-0007.md``,
    ``sheet-Budget.md``, ``slide-003.md``, ``document.md``, ``content.txt``).
    ``locator`` says where in the source the text comes from, relative to the
    source file: ``page=7``, ``sheet=Budget``, ``slide=3``, ``document``,
    ``content``.  The engine prefixes it with the source path
    (``report.pdf#page=7``).
    """

    name: str
    text: str
    locator: str


@dataclass(frozen=True)
class FileInfo:
    """What ``accepts`` may look at: cheap facts, no parsing."""

    name: str  # path relative to the workspace root, '/'-separated
    extension: str  # lowercase, with the dot: '.pdf'; '' when none
    size: int
    head: bytes  # the first bytes of the file (up to 4096)


@dataclass(frozen=True)
class ParseOptions:
    """Limits a parser honours by itself (the worker adds time and memory caps)."""

    max_cells: int = 5_000_000  # spreadsheets: stop with ParseFailed beyond this
    max_pages: int = 100_000  # PDFs and slide decks
    max_text_bytes: int = 256 * 1024 * 1024  # total text over all units
    max_unzipped_bytes: int = 2 * 1024 * 1024 * 1024  # zip containers (bomb guard)
    max_zip_ratio: int = 200  # a member whose uncompressed/compressed ratio exceeds this fails


@dataclass(frozen=True)
class UnitRange:
    """Some units of a document parsed on their own (``Parser.parse_range``):
    the names of all its units are known at once, the text of these only.

    Each unit's text is what a parse of the whole document gives it, provided
    some unit of the document has text (``blank`` marks those without: a
    document without any text says so on every unit instead)."""

    names: tuple[tuple[str, str], ...]  # (name, locator) of every unit of the document
    start: int  # ordinal of the first of ``units``
    units: tuple[Unit, ...]
    blank: tuple[bool, ...]  # per unit of ``units``: no text of its own
    chars: int  # text counted against ``ParseOptions.max_text_bytes``


class ParseFailed(Exception):
    """The parser recognised the format but could not extract text.

    The message is one line, names the cause and is shown to users as-is.
    """


class EncryptedDocument(ParseFailed):
    """Password-protected or encrypted: no text without the key."""


class UnsupportedFormat(Exception):
    """No parser handles this file."""


class ToolMissing(UnsupportedFormat):
    """The parser recognised the format but a program it needs is not installed
    (LibreOffice for ``.doc``).  Final: no generic parser is tried after it, so
    an RTF file is not served as its raw markup just because LibreOffice is absent.
    """


class Parser(ABC):
    """A format parser.  Subclasses set the class variables and implement both methods."""

    id: ClassVar[str]  # short and stable: 'pdf', 'xlsx', 'text'
    version: ClassVar[int]  # bump when the output for the same bytes changes
    priority: ClassVar[float] = 0.0  # higher is tried first: specific before generic

    # True when the output for the same bytes depends on the file's extension
    # (the parse cache is keyed by content, so the extension must join the key).
    keyed_by_extension: ClassVar[bool] = False

    @classmethod
    def key(cls) -> str:
        """``id@version``."""
        return f"{cls.id}@{cls.version}"

    def cache_key(self, info: FileInfo) -> str:
        """The parse-cache key part for this file: ``id@version``, plus the
        extension for parsers whose verdict depends on it."""
        if self.keyed_by_extension:
            return f"{self.key()}{info.extension or '.'}"
        return self.key()

    @abstractmethod
    def accepts(self, info: FileInfo) -> bool:
        """Cheap and side-effect free: extension and magic bytes only."""

    @abstractmethod
    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        """Return the units in document order, or raise ParseFailed."""

    def parse_range(
        self,
        path: str,
        info: FileInfo,
        options: ParseOptions,
        *,
        start: int,
        stop: int,
        threshold: int,
    ) -> UnitRange | None:
        """Units ``start`` to ``stop`` (0-based, ``stop`` excluded) of a
        document of more than ``threshold`` units, or None where the document
        is to be parsed whole (``parse``): the format has no ranges, the
        document is small, or its units depend on each other beyond what
        ``UnitRange`` says."""
        return None
