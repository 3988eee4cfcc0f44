"""Names a user gives: a snapshot's, a submission's, a world's (the
snapshot it shows) and a tab's.

Each is shown one a line (``swfs snapshots``, ``swfs status``,
``.tab/@old/``) and used as a folder name, so an empty one, or one holding a
control character (a newline, a tab, an escape), a line or paragraph
separator, a byte that is not UTF-8, or more than a folder name's 255
bytes, is refused with one line saying why.  The other rules of each kind
(no ``/``, a shorter length) are its owner's.
"""

from __future__ import annotations

import unicodedata

# Control characters (C0, DEL, C1), the two Unicode line breaks, and lone
# surrogates (how Python carries the bytes of an argument that is not UTF-8).
_REFUSED = frozenset({"Cc", "Zl", "Zp", "Cs"})
NAME_MAX = 255  # bytes: each is a folder's name somewhere


def problem(name: str, what: str) -> str | None:
    """Why ``name`` cannot be a ``what`` name (``snapshot``, ``tab``...),
    in one line; None when it can."""
    if not name:
        return f"a {what} name cannot be empty"
    for ch in name:
        if unicodedata.category(ch) in _REFUSED:
            return (
                f"{ascii(name)}: a {what} name cannot hold a control character "
                f"or a byte that is not UTF-8 (here {ascii(ch)})"
            )
    if len(name.encode("utf-8")) > NAME_MAX:
        return f"{name[:40]}...: a {what} name has at most {NAME_MAX} bytes"
    return None
