"""How many requests of each kind the daemon has answered since it started.

Every handler counts itself (``mountd.operations.handler``, by request:
a READDIR without a handle counts as ``readdir``); the SIGUSR1
dump (``mountd.dump``) writes the counts as one line, so a test or a user can
see what a walk cost in requests: ``kill -USR1`` before and after, and
subtract.  ``nowait_open=5`` and the like count the requests of a kind
answered at once in pyfuse3's callback, without a coroutine (``mountd.reply``):
they are counted in ``open=`` too.
"""

from __future__ import annotations

import re
from collections import Counter

COUNTS: Counter[str] = Counter()
PREFIX = "requests since start:"


def line() -> str:
    """``requests since start: getattr=12 lookup=3 ...`` (by name)."""
    return " ".join([PREFIX, *(f"{k}={v}" for k, v in sorted(COUNTS.items()))])


def parse(text: str) -> dict[str, int]:
    """The counts of the last such line in ``text`` (a daemon's log)."""
    found = [m for m in text.splitlines() if m.startswith(PREFIX)]
    if not found:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found[-1][len(PREFIX) :])}
