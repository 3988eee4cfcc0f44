"""The parser registry: which parser handles a file, and running it.

Parsers are tried in priority order (higher first, specific formats before
generic ones).  ``accepts`` looks only at the extension and the first bytes,
so selection is cheap; the engine calls ``parse`` in a worker process.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import posixpath
import stat

from parsers._base import (
    FileInfo,
    ParseFailed,
    ParseOptions,
    Parser,
    ToolMissing,
    Unit,
    UnitRange,
    UnsupportedFormat,
)
from parsers._common import describe, no_text_note

log = logging.getLogger(__name__)

HEAD_BYTES = 4096


@functools.cache
def _instances() -> tuple[Parser, ...]:
    # Imported here so that importing the registry stays cheap until a parse
    # (or a listing) is needed: pymupdf and openpyxl take a while to import.
    from parsers.delimited import DelimitedParser
    from parsers.docx import DocxParser
    from parsers.epub import EpubParser
    from parsers.html import HtmlParser
    from parsers.ipynb import IpynbParser
    from parsers.legacy_office import ConvertedDocumentParser, LegacyOfficeParser
    from parsers.outlook import OutlookMsgParser
    from parsers.pdf import PdfParser
    from parsers.pptx import PptxParser
    from parsers.spreadsheet import SpreadsheetParser
    from parsers.text import SniffedTextParser, TextParser
    from parsers.xlsx import XlsxParser

    parsers: list[Parser] = [
        PdfParser(),
        XlsxParser(),
        SpreadsheetParser(),
        DocxParser(),
        PptxParser(),
        LegacyOfficeParser(next_readers=candidates),
        ConvertedDocumentParser(),
        OutlookMsgParser(),
        EpubParser(),
        IpynbParser(),
        HtmlParser(),
        DelimitedParser(),
        TextParser(),
        SniffedTextParser(),
    ]
    parsers.extend(_extra_parsers())
    # sorted() is stable: equal priorities keep the order above.
    return tuple(sorted(parsers, key=lambda p: -p.priority))


EXTRA_ENV = "SWFS_EXTRA_PARSERS"


def _extra_parsers() -> list[Parser]:
    """Parsers named in $SWFS_EXTRA_PARSERS (``module:Class,...``): a plug-in
    point for site-specific formats, and how tests inject misbehaving parsers
    into worker processes (which inherit the environment)."""
    out: list[Parser] = []
    for spec in filter(None, os.environ.get(EXTRA_ENV, "").split(",")):
        module_name, _, class_name = spec.strip().partition(":")
        try:
            module = importlib.import_module(module_name)
            cls = getattr(module, class_name)
            out.append(cls())
        except Exception as exc:  # a broken plug-in must not disable the built-ins
            log.warning("%s: cannot load parser %r: %s", EXTRA_ENV, spec, exc)
    return out


def all_parsers() -> list[Parser]:
    """Every parser, highest priority first."""
    return list(_instances())


def fingerprint() -> str:
    """Every parser's key, and whether the tools some of them run are there.

    A file record names the parser key its file was given when it was last
    hashed; when this changes (swfs upgraded, LibreOffice installed), the
    engine re-examines every file, so none keeps an old parser's verdict.
    """
    from parsers import soffice

    keys = sorted(p.key() for p in _instances())
    keys.append(f"soffice={'yes' if soffice.program() else 'no'}")
    return ",".join(keys)


def extension_of(rel: str) -> str:
    """Lowercase extension of the last path component, with the dot; '' when none."""
    base = posixpath.basename(rel)
    ext = posixpath.splitext(base)[1]
    return ext.lower()


def file_info(path: str, rel: str) -> FileInfo:
    """Cheap facts about ``path``: its size (lstat) and its first bytes.

    ``rel`` names the file (the extension comes from it, never from ``path``,
    which may be ``/proc/self/fd/N``).
    """
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) and path.startswith("/proc/self/fd/"):
        st = os.stat(path)  # the engine's open descriptor, not a user's symlink
    head = b""
    if stat.S_ISREG(st.st_mode):
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    return FileInfo(name=rel, extension=extension_of(rel), size=st.st_size, head=head)


def candidates(info: FileInfo) -> list[Parser]:
    """Every parser that accepts ``info``, in the order they are tried."""
    return [p for p in _instances() if p.accepts(info)]


def select(info: FileInfo) -> Parser | None:
    """The parser that handles ``info`` first, or None when the format is unsupported."""
    for parser in _instances():
        if parser.accepts(info):
            return parser
    return None


def parse(path: str, info: FileInfo, options: ParseOptions) -> tuple[Parser, list[Unit]]:
    """Parse ``path`` with the first parser that accepts it.

    A parser may decline after a closer look by raising UnsupportedFormat (a
    legacy Office file that turns out not to be encrypted); the next candidate
    is tried then.  A ParseFailed is final: the most specific parser's reason
    is the useful one, and a generic fallback would only hide it.  So is a
    ToolMissing: the format is known, only the program to read it is not there.
    """
    declined: list[str] = []
    for parser in candidates(info):
        try:
            units = parser.parse(path, info, options)
        except ToolMissing:
            raise
        except UnsupportedFormat as exc:
            declined.append(f"{parser.id}: {describe(exc)}")
            continue
        except ParseFailed:
            raise
        except RecursionError as exc:
            raise ParseFailed(f"{parser.id}: document too deeply nested") from exc
        except MemoryError as exc:
            raise ParseFailed(f"{parser.id}: out of memory") from exc
        except Exception as exc:  # a library bug must not look like a crash of the worker
            log.debug("parser %s failed on %s", parser.key(), info.name, exc_info=True)
            raise ParseFailed(f"{parser.id}: {describe(exc)}") from exc
        return parser, explain_empty(units)
    if declined:
        raise UnsupportedFormat("; ".join(declined))
    raise UnsupportedFormat(f"no parser for {info.extension or 'files without extension'}")


def parse_range(
    path: str, info: FileInfo, options: ParseOptions, *, start: int, stop: int, threshold: int
) -> UnitRange | None:
    """Units ``start`` to ``stop`` of ``path`` from the parser ``parse``
    would try first (``Parser.parse_range``), or None: parse it whole."""
    parser = select(info)
    if parser is None:
        return None
    try:
        return parser.parse_range(path, info, options, start=start, stop=stop, threshold=threshold)
    except ParseFailed:
        raise
    except (RecursionError, MemoryError, UnsupportedFormat):
        return None  # parse() has its own words for these
    except Exception as exc:
        log.debug("parser %s failed on %s", parser.key(), info.name, exc_info=True)
        raise ParseFailed(f"{parser.id}: {describe(exc)}") from exc


# Units whose format shows the file byte for byte: an empty file is an empty view.
_VERBATIM = frozenset({"content.txt"})


def explain_empty(units: list[Unit]) -> list[Unit]:
    """Units that say why there is no text, when a parse found none.

    A scanned PDF, an image-only slide deck, an empty sheet or document: each
    unit (or, when the parser returned none, one ``document.md``) gets the line
    ``[swfs: no text found (N units)]``, so ``cat`` explains the silence.
    Parsers that can count more (pages and images) write their own note and
    so never reach this.  Plain text files are shown as they are.
    """
    if any(u.text.strip() for u in units) or any(u.name in _VERBATIM for u in units):
        return units
    if not units:
        return [Unit("document.md", no_text_note("the file holds no parts with text"), "document")]
    kinds: dict[str, int] = {}
    for unit in units:
        stem = unit.name.rsplit(".", 1)[0]
        kind = stem.split("-", 1)[0] if "-" in stem else stem
        kinds[kind] = kinds.get(kind, 0) + 1
    details = ", ".join(f"{n} {k}{'' if n == 1 else 's'}" for k, n in kinds.items())
    note = no_text_note(details)
    return [Unit(u.name, note, u.locator) for u in units]
