"""Mount options: what ``swfs mount`` lets a user tune about the daemon."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from swfs.views.waits import Waits

StalePolicy = Literal["serve", "wait"]
VersionsPolicy = Literal["hidden", "visible"]
PassthroughMode = Literal["auto", "on", "off"]

FUSE_CONF = Path("/etc/fuse.conf")
CACHE_TIMEOUT = 86400.0  # seconds (libfuse's passthrough_hp keeps entries as long)


def may_allow_other(conf: Path = FUSE_CONF) -> bool:
    """True when fusermount3 lets this user mount with ``allow_other``."""
    if os.geteuid() == 0:
        return True
    try:
        text = conf.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.split("#", 1)[0].strip() == "user_allow_other" for line in text.splitlines())


@dataclass(frozen=True)
class MountOptions:
    # A read of a stale view waits this long for its re-parse, then serves the
    # prior view marked stale ('serve': at once, as it is).
    stale: StalePolicy = "wait"
    stale_wait: float = 2.0
    pending_wait: float = 10.0  # seconds a read of a pending unit waits for its parse
    # 'hidden': the root lists no .versions (it works by path), so a recursive
    # search from the root does not find every old version (ZFS snapdir=hidden).
    versions: VersionsPolicy = "hidden"
    allow_other: bool | None = None  # None: whenever the mounting user may
    # Kernel dentry and attribute caches of the native tree.  Every change the
    # daemon sees (through the mount, from the change feed, from a rescan) is
    # invalidated explicitly, so the kernel may keep what it was told for long:
    # a timeout would only make it ask again about what has not changed.
    entry_timeout: float = CACHE_TIMEOUT
    attr_timeout: float = CACHE_TIMEOUT
    # The same for the generated trees: a view changes only when the engine
    # says so (a new hash, a re-parse), which is invalidated explicitly too.
    synthetic_timeout: float = CACHE_TIMEOUT
    poll_window: float = 0.0005  # seconds the loop keeps polling after a request (mountd.poll)
    debug: bool = False
    max_tasks: int = 64  # concurrent FUSE requests
    journal: bool = True  # the access journal records opens, reads, listings, writes
    # Every listing reaches the daemon (an OPENDIR per directory opened) and
    # is journaled, not only those the kernel asks for (mountd.dirlist).
    every_listing: bool = False
    # (pid, start) of the process that ran `swfs mount` and its ancestors:
    # where the access journal's jobs end (swfs.evidence.procinfo)
    callers: tuple[tuple[int, int], ...] = ()
    render_dpi: float = 110.0  # resolution of .render images (swfs.render)
    # .tab/ readable by every user (excerpts still only from files they may
    # read); by default it belongs to the mounting user and root.
    share_tab: bool = False
    # Kernel FUSE passthrough for read-only opens of native files (mountd.fastpath):
    # 'auto' unless the journal records reads, 'on' even then.
    passthrough: PassthroughMode = "auto"

    @property
    def waits(self) -> Waits:
        """How long a read waits for a view (the rule: ``swfs.views.waits``)."""
        return Waits(self.pending_wait, self.stale_wait, serve_stale=self.stale == "serve")

    def __post_init__(self) -> None:
        if self.stale not in ("serve", "wait"):
            raise ValueError(f"stale policy must be 'serve' or 'wait', not {self.stale!r}")
        if self.passthrough not in ("auto", "on", "off"):
            raise ValueError(f"passthrough must be auto, on or off, not {self.passthrough!r}")
        if self.versions not in ("hidden", "visible"):
            raise ValueError(f"versions must be 'hidden' or 'visible', not {self.versions!r}")
        for name in (
            "stale_wait",
            "pending_wait",
            "entry_timeout",
            "attr_timeout",
            "synthetic_timeout",
            "poll_window",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        from swfs.find.render import clamp_dpi

        clamp_dpi(self.render_dpi)

    @property
    def resolved_allow_other(self) -> bool:
        return may_allow_other() if self.allow_other is None else self.allow_other
