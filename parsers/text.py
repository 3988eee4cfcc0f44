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


# Multi-byte encodings charset-normalizer is trusted to recognise; for short
# single-byte texts its guesses vary (cp1250, cp1006 for plain French), so
# everything else that is not UTF-8 is read as cp1252, what Windows programs
# (Excel's "CSV" export among them) write in Western locales.
_CJK = frozenset(
    {
        "cp932", "shift_jis", "shift_jis_2004", "shift_jisx0213", "euc_jp", "euc_jis_2004",
        "euc_jisx0213", "iso2022_jp", "gb2312", "gbk", "gb18030", "hz", "big5", "big5hkscs",
        "cp950", "euc_kr", "cp949", "johab", "iso2022_kr",
    }
)  # fmt: skip
_DETECT_BYTES = 256 * 1024


def decode(data: bytes) -> str:
    """The text of ``data``: UTF-8, UTF-16 with a BOM, or (when the bytes are not
    UTF-8) a detected CJK encoding or cp1252.

    A file that is mostly UTF-8 with a few stray bytes (more valid multi-byte
    sequences than invalid bytes) stays UTF-8, the stray bytes replaced.
    """
    if data.startswith(_UTF16_BOMS):
        return data.decode("utf-16", "replace")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    invalid = text.count("\ufffd")
    valid = sum(1 for ch in text if ord(ch) > 127) - invalid
    if valid > invalid:
        return text
    encoding = _detect_cjk(data)
    if encoding:
        return data.decode(encoding, "replace")
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:  # five bytes cp1252 leaves undefined
        return data.decode("latin-1")


def _detect_cjk(data: bytes) -> str | None:
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - a dependency of ours
        return None
    best = from_bytes(data[:_DETECT_BYTES]).best()
    if best is None:
        return None
    encoding = str(best.encoding).lower().replace("-", "_")
    return encoding if encoding in _CJK else None


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
    return decode(read_bytes(path, options))


def read_bytes(path: str, options: ParseOptions) -> bytes:
    """The file's bytes, up to ``max_text_bytes`` (ParseFailed beyond)."""
    # O_NONBLOCK: opening a FIFO (which an empty head would let through) must
    # not wait for a writer.  It does not affect reads of regular files.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ParseFailed("not a regular file")
        data = f.read(options.max_text_bytes + 1)
    if len(data) > options.max_text_bytes:
        raise ParseFailed(f"too much text (>{options.max_text_bytes} bytes)")
    return data


class TextParser(Parser):
    id = "text"
    version = 2
    priority = 10.0

    extensions: ClassVar[frozenset[str]] = TEXT_EXTENSIONS

    def accepts(self, info: FileInfo) -> bool:
        return info.extension in self.extensions

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return [Unit("content.txt", read_text(path, options), "content")]


class SniffedTextParser(Parser):
    id = "text-sniff"
    version = 2
    priority = -100.0

    def accepts(self, info: FileInfo) -> bool:
        return looks_like_text(info.head, complete=len(info.head) >= info.size)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        return [Unit("content.txt", read_text(path, options), "content")]
