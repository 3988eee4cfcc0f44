"""Rendering parsed units as the files ``.parsed/<rel>/`` shows.

Every unit starts with one header line stating provenance and freshness::

    <!-- swfs source="budget.xlsx" unit="sheet-Sheet1.md" locator="budget.xlsx#sheet=Sheet1"
         hash="b3:1a2b3c4d5e6f7081" freshness="stale" current="b3:9f8e7d6c5b4a3921"
         parser="xlsx@1" -->

(one line in the file).  Attribute order is fixed.  ``hash`` is the content
hash the text was made from and ``current`` the file's present hash, both as
``b3:`` plus the first 16 hex digits of the blake3 hash, as everywhere in
text (``swfs.hashform``; the full hashes are in the ``user.sw.source_hash``
/ ``user.sw.current_hash`` xattrs).  Values are
escaped so the line stays one well-formed comment: ``&`` ``"`` ``<`` ``>``
and newlines become ``&amp;`` ``&quot;`` ``&lt;`` ``&gt;`` ``&#10;``.
``freshness`` is one of current, stale, pending, failed.
"""

from __future__ import annotations

from . import hashform
from .api import Freshness

short_hash = hashform.label


def _esc(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", "&#10;")
    )


def header_line(
    *,
    rel: str,
    unit: str,
    locator: str,
    source_hash: str | None,
    freshness: Freshness,
    current_hash: str | None,
    parser: str | None,
) -> str:
    return (
        f'<!-- swfs source="{_esc(rel)}" unit="{_esc(unit)}" locator="{_esc(locator)}" '
        f'hash="{short_hash(source_hash)}" freshness="{freshness.value}" '
        f'current="{short_hash(current_hash)}" parser="{_esc(parser or "none")}" -->\n'
    )


def encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Lone surrogates from a broken document: show them as U+FFFD.
        return text.encode("utf-8", "replace")


def render_unit(header: str, text: str) -> bytes:
    body = encode_text(text)
    if body and not body.endswith(b"\n"):
        body += b"\n"
    return encode_text(header) + body


def strip_header(content: str) -> str:
    """The text of a rendered unit without its header line."""
    if content.startswith("<!-- swfs "):
        _, _, rest = content.partition("\n")
        return rest
    return content
