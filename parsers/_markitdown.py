"""Running one of markitdown's converters directly on a file.

markitdown's ``MarkItDown`` front door guesses the type with magika and tries
every converter in turn; the registry already knows the type, so the format
modules call the one converter they need.  Imports are deferred: markitdown
takes half a second to import and only workers need it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from parsers._base import ParseFailed, ParseOptions, Unit
from parsers._common import TextBudget, describe, quiet

if TYPE_CHECKING:
    from markitdown import DocumentConverter

log = logging.getLogger(__name__)


def convert(
    converter: DocumentConverter,
    path: str,
    *,
    extension: str,
    mimetype: str | None = None,
    what: str,
) -> str:
    """Markdown text of ``path`` by ``converter``; ParseFailed naming ``what`` on error.

    Tables without a marked header row (most Word tables) take their first row
    as the header, instead of an empty one.
    """
    from markitdown import StreamInfo

    info = StreamInfo(extension=extension, mimetype=mimetype)
    try:
        with quiet(), open(path, "rb") as stream:
            result = converter.convert(stream, info, table_infer_header=True)
    except RecursionError as exc:
        raise ParseFailed(f"{what} too deeply nested") from exc
    except ParseFailed:
        raise
    except Exception as exc:  # converters wrap many libraries, each with its own errors
        cause = exc.__cause__ or exc
        raise ParseFailed(f"unreadable {what}: {describe(cause)}") from exc
    return result.markdown


def document_unit(markdown: str, options: ParseOptions) -> list[Unit]:
    text = markdown.strip()
    text = text + "\n" if text else ""
    return [Unit("document.md", TextBudget(options.max_text_bytes).add(text), "document")]
