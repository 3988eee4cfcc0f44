"""PDF: one unit per page, ``page-0001.md``, text from PyMuPDF's plain extractor.

``page.get_text()`` is MuPDF's fastest text path (several hundred pages per
second per core); layout-aware extractors are an order of magnitude slower and
grep does not need them.  MuPDF prints its errors and warnings to stderr by
default; they are switched off here and the one worth showing (why a file
does not open) is put in the ParseFailed reason instead.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar

from parsers._base import EncryptedDocument, FileInfo, ParseFailed, ParseOptions, Parser, Unit
from parsers._common import TextBudget, describe, one_line

if TYPE_CHECKING:
    import pymupdf

log = logging.getLogger(__name__)

PDF_MAGIC = b"%PDF-"
EOF_MARKER = b"%%EOF"
# Readers accept a header anywhere in the first KiB (some writers prepend junk).
_MAGIC_WINDOW = 1024
# Readers look for %%EOF in the last KiB; without it (and with an xref MuPDF had
# to rebuild) the file was cut short, typically a copy still in progress.
_TAIL_WINDOW = 1024


def _has_eof_marker(path: str) -> bool:
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - _TAIL_WINDOW))
        return EOF_MARKER in f.read()


@functools.cache
def _mupdf() -> ModuleType:
    """pymupdf, imported on first use (half a second) and told to keep quiet."""
    import pymupdf

    pymupdf.TOOLS.mupdf_display_errors(False)
    pymupdf.TOOLS.mupdf_display_warnings(False)
    return pymupdf


def _reason(exc: BaseException) -> str:
    """MuPDF's own complaint (``code=8: invalid key in dict``) beats the wrapper's text."""
    cause = exc.__cause__ or exc
    text = describe(cause)
    if text.startswith("code="):
        text = text.partition(": ")[2] or text
    warnings = _mupdf().TOOLS.mupdf_warnings(reset=True)
    lines = [w for w in warnings.splitlines() if w.strip() and not w.startswith("...")]
    first = lines[0] if lines else ""
    if first and first not in text:
        text = f"{text} ({first})"
    return one_line(text)


class PdfParser(Parser):
    id = "pdf"
    version = 1
    priority = 50.0

    extensions: ClassVar[frozenset[str]] = frozenset({".pdf"})

    def accepts(self, info: FileInfo) -> bool:
        if info.extension in self.extensions or info.head.startswith(PDF_MAGIC):
            return True
        # A header after some junk only counts without an extension: a text file
        # that merely mentions "%PDF-" must stay text.
        return not info.extension and PDF_MAGIC in info.head[:_MAGIC_WINDOW]

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        if info.size == 0:
            raise ParseFailed("broken PDF: empty file")
        mupdf = _mupdf()
        mupdf.TOOLS.reset_mupdf_warnings()
        try:
            doc = mupdf.open(path, filetype="pdf")
        except Exception as exc:  # MuPDF raises several types for unreadable input
            raise ParseFailed(f"broken PDF: {_reason(exc)}") from exc
        try:
            if doc.needs_pass:
                raise EncryptedDocument("encrypted PDF: password required")
            if doc.is_repaired and not _has_eof_marker(path):
                raise ParseFailed("truncated PDF: no end-of-file marker")
            if doc.page_count == 0:
                reason = " (damaged)" if doc.is_repaired else ""
                raise ParseFailed(f"broken PDF: no pages{reason}")
            return self._pages(doc, options)
        except ParseFailed:
            raise
        except Exception as exc:
            raise ParseFailed(f"broken PDF: {_reason(exc)}") from exc
        finally:
            doc.close()

    def _pages(self, doc: pymupdf.Document, options: ParseOptions) -> list[Unit]:
        count = doc.page_count
        if count > options.max_pages:
            raise ParseFailed(f"too many pages (>{options.max_pages})")
        budget = TextBudget(options.max_text_bytes)
        units = []
        for number in range(1, count + 1):
            # A page that cannot be loaded means a broken page tree (the page
            # numbers after it cannot be trusted): that fails the document.  A
            # page whose content cannot be read only loses its own text.
            page = doc.load_page(number - 1)
            try:
                text = page.get_text()
            except Exception as exc:
                text = f"[swfs: page {number} could not be read: {_reason(exc)}]\n"
            units.append(Unit(f"page-{number:04d}.md", budget.add(text), f"page={number}"))
        log.debug("pdf: %d pages", count)
        return units
