"""Plain text: code, data and prose files become one ``content.txt`` unit.

Two parsers: one by extension (a long list of text formats), and a
lowest-priority sniffer for files without a known extension whose first bytes
are valid UTF-8 without NUL bytes (``Makefile``, ``LICENSE``, dotfiles).
"""

from __future__ import annotations

import codecs
import logging
import os
import stat
from typing import ClassVar

from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit

log = logging.getLogger(__name__)

TEXT_EXTENSIONS = frozenset(
    {
        # prose and markup
        ".txt", ".text", ".md", ".markdown", ".rst", ".adoc", ".org", ".tex", ".bib",
        ".log", ".diff", ".patch", ".srt", ".vtt",
        # data
        ".csv", ".tsv", ".json", ".jsonl", ".ndjson", ".geojson", ".yaml", ".yml", ".toml",
        ".xml", ".xsd", ".xsl", ".svg", ".ini", ".cfg", ".conf", ".env", ".properties",
        ".sql", ".graphql", ".proto",
        # code
        ".py", ".pyi", ".ipy", ".r", ".jl", ".m", ".js", ".mjs", ".cjs", ".jsx", ".ts",
        ".tsx", ".vue", ".svelte", ".css", ".scss", ".sass", ".less", ".c", ".h", ".cc",
        ".cpp", ".cxx", ".hpp", ".hh", ".cs", ".java", ".kt", ".kts", ".scala", ".groovy",
        ".gradle", ".go", ".rs", ".swift", ".rb", ".php", ".pl", ".pm", ".lua", ".dart",
        ".hs", ".ml", ".mli", ".ex", ".exs", ".erl", ".clj", ".elm", ".fs", ".fsx", ".vb",
        ".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd", ".mk", ".cmake",
        ".dockerfile", ".tf", ".hcl", ".nix", ".sol", ".asm", ".s", ".f90", ".sas", ".do",
        ".gitignore", ".gitattributes", ".editorconfig", ".lock",
    }
)  # fmt: skip

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode(data: bytes) -> str:
    """UTF-8 with replacement; UTF-16 when the file says so with a BOM."""
    if data.startswith(_UTF16_BOMS):
        return data.decode("utf-16", "replace")
    text = data.decode("utf-8", "replace")
    return text.removeprefix("\ufeff")


def looks_like_text(head: bytes, *, complete: bool) -> bool:
    """No NUL bytes and valid UTF-8 (a character cut at the end of the head is fine)."""
    if b"\x00" in head:
        return False
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        decoder.decode(head, final=complete)
    except UnicodeDecodeError:
        return False
    return True


def read_text(path: str, options: ParseOptions) -> str:
    # O_NONBLOCK: opening a FIFO (which an empty head would let through) must
    # not wait for a writer.  It does not affect reads of regular files.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ParseFailed("not a regular file")
        data = f.read(options.max_text_bytes + 1)
    if len(data) > options.max_text_bytes:
        raise ParseFailed(f"too much text (>{options.max_text_bytes} bytes)")
    return decode(data)


class TextParser(Parser):
    id = "text"
    version = 1
    priority = 10.0

    extensions: ClassVar[frozenset[str]] = TEXT_EXTENSIONS

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return [Unit("content.txt", read_text(path, options), "content")]


class SniffedTextParser(Parser):
    id = "text-sniff"
    version = 1
    priority = -100.0

    def accepts(self, info: FileInfo) -> bool:
        return looks_like_text(info.head, complete=len(info.head) >= info.size)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return [Unit("content.txt", read_text(path, options), "content")]
