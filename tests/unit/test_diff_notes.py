"""Pure pieces of the review's wording: the hash notation and the one-line
summary of a line-ending rewrite."""

from __future__ import annotations

import pytest

from swfs.review.diffs import line_endings_only, text_diff
from swfs.store import hashform

FULL = "1a2b3c4d5e6f7081" + "9" * 48


def test_hash_notation() -> None:
    assert hashform.label(FULL) == "b3:1a2b3c4d5e6f7081"
    assert hashform.short(FULL) == "1a2b3c4d5e6f7081"
    assert hashform.index_part(FULL) == "1a2b3c4d5e6f7081"
    assert hashform.label(None) == "none"
    assert hashform.index_part(None) == "0" * 16
    assert hashform.is_full(FULL)
    assert not hashform.is_full(FULL[:16])
    assert not hashform.is_full(FULL.upper())


@pytest.mark.parametrize(
    ("old", "new", "note"),
    [
        ("a\nb\n", "a\r\nb\r\n", "(line endings only: LF -> CRLF, 2 lines; no other change)"),
        ("a\r\nb\r\n", "a\nb\n", "(line endings only: CRLF -> LF, 2 lines; no other change)"),
        ("a\rb\r", "a\nb\n", "(line endings only: CR -> LF, 2 lines; no other change)"),
        (
            "a\nb\nc",
            "a\r\nb\nc",
            "(line endings only: LF -> mixed CRLF/LF, 1 line; no other change)",
        ),
        # Not line endings only: a line ending added or removed at the end,
        # a changed character, or nothing changed at all.
        ("a\nb", "a\nb\n", None),
        ("a\nb\n", "a\r\nB\r\n", None),
        ("a\nb\n", "a\nb\n", None),
    ],
)
def test_line_endings_only(old: str, new: str, note: str | None) -> None:
    assert line_endings_only(old, new) == note
    diff = text_diff("x.txt", "x.txt", old, new, old_hash="1" * 64, new_hash="2" * 64)
    if note is not None:
        assert diff.splitlines()[2:] == [note]


def test_same_text_other_bytes_says_so() -> None:
    diff = text_diff("x.txt", "x.txt", "a\n", "a\n", old_hash="1" * 64, new_hash="2" * 64)
    assert diff.splitlines()[2:] == [
        "(no text changes; the bytes differ in encoding or byte-order mark)"
    ]
    moved = text_diff("x.txt", "y.txt", "a\n", "a\n", old_hash="1" * 64, new_hash="1" * 64)
    assert moved.splitlines() == [
        "diff --git a/x.txt b/y.txt",
        "rename from x.txt",
        "rename to y.txt",
        f"index {'1' * 16}..{'1' * 16}",
    ]
