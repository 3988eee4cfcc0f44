"""How a content hash is written wherever an agent may compare hashes.

One rule, so that a hash seen in one place can be matched in any other:

- The extended attributes (``user.sw.hash``, ``source_hash``,
  ``current_hash``, ``baseline_hash``) and every ``--json`` output carry the
  full hash: 64 lowercase hex digits of blake3.
- Everywhere else a hash is shortened to its first ``SHORT_LEN`` (16) hex
  digits.  In text (the header line of a ``.parsed`` unit, ``SUMMARY.md``,
  diff lines, the CLI's tables and messages) it is written ``b3:`` plus those
  digits, ``b3:1a2b3c4d5e6f7081``.  Where a format has no room for the
  prefix, the same 16 digits stand alone: ``.versions`` file names
  (``0003-1a2b3c4d5e6f7081.xlsx``) and the ``index <old>..<new>`` line of a
  diff, which git tools read as hex.

So ``b3:X`` in a header, a ``.versions`` name containing ``X`` and an
xattr starting with ``X`` all name the same content.
"""

from __future__ import annotations

import re

SHORT_LEN = 16
PREFIX = "b3:"
# Where one side has no content (an added or deleted file).
NONE = "none"
ZERO = "0" * SHORT_LEN
_FULL = re.compile(r"[0-9a-f]{64}")


def short(h: str) -> str:
    """The first ``SHORT_LEN`` hex digits, bare (file names, git index lines)."""
    return h[:SHORT_LEN]


def label(h: str | None) -> str:
    """``b3:<16 hex>``, the form used in text; ``none`` for no content."""
    return f"{PREFIX}{h[:SHORT_LEN]}" if h else NONE


def index_part(h: str | None) -> str:
    """One side of a diff's ``index`` line: 16 hex digits, zeros for no content."""
    return h[:SHORT_LEN] if h else ZERO


def is_full(value: str) -> bool:
    """Whether ``value`` is a whole hash (64 lowercase hex digits)."""
    return _FULL.fullmatch(value) is not None
