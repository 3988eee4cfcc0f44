"""Who may read content recorded in the past: the one rule for history.

An old version, a stale ``.parsed`` unit, a ``.review`` diff and a file or
folder of a snapshot show bytes the file held *then*.  Only a caller who
could read the file both then (the owner, group and mode recorded with that
content) and now (the file's present ones) may read them: the stricter of
the two.  Content recorded without its owner and mode (a store older than
the record fields) is owner-only: the store's owner alone.

The kernel decides each read (the mount runs with ``default_permissions``),
so the rule is written as one owner, group and mode: ``narrowed`` keeps the
owner and group of one side and only the bits the other side also grants to
every caller who may fall in that class.  Where the two sides name other
owners or groups, a caller's membership of the other side's group is not
known here, so every class they might fall in there must allow: the answer
may refuse someone who could read both, never the reverse.  ``may_read``
answers the same question exactly for a known caller (uid and groups).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Sequence
from typing import Any, Protocol

from swfs.api import Access

OWNER_ONLY_FILE = 0o600
OWNER_ONLY_DIR = 0o700

_OWNER, _GROUP, _OTHER = 6, 3, 0  # the shift of each class's rwx bits


class Caller(Protocol):
    """Whoever asks (``swfs.find.search.Caller`` is one): uid and groups."""

    @property
    def uid(self) -> int: ...
    @property
    def gids(self) -> frozenset[int]: ...


def _bits(acc: Access, shift: int) -> int:
    return (acc.mode >> shift) & 0o7


@functools.lru_cache(maxsize=4096)  # a tree has few distinct (owner, group, mode)
def narrowed(shown: Access, other: Access | None) -> Access:
    """``shown``'s owner and group, keeping for each of its classes (owner,
    group, everyone else) only the rwx bits that ``other`` grants to every
    caller who may belong to that class; ``other`` None: ``shown`` as is.
    Special bits (set-id, sticky) are ``shown``'s, kept only where it stays
    executable by its owner."""
    if other is None:
        return shown
    same_owner, same_group = other.uid == shown.uid, other.gid == shown.gid
    o_owner, o_group, o_other = (_bits(other, s) for s in (_OWNER, _GROUP, _OTHER))
    # shown's owner: other's owner if the same uid; else in other's group or not.
    as_owner = o_owner if same_owner else o_group & o_other
    # shown's group (not its owner): maybe other's owner when the owners
    # differ; in other's group for sure when the groups are the same.
    as_group = o_group if same_group else o_group & o_other
    # Everyone else: maybe other's owner; surely not in other's group when
    # the groups are the same.
    as_else = o_other if same_group else o_group & o_other
    if not same_owner:
        as_group &= o_owner
        as_else &= o_owner
    mode = (
        (_bits(shown, _OWNER) & as_owner) << _OWNER
        | (_bits(shown, _GROUP) & as_group) << _GROUP
        | (_bits(shown, _OTHER) & as_else) << _OTHER
    )
    special = shown.mode & 0o7000 if mode & 0o100 else 0
    return Access(shown.uid, shown.gid, mode | special)


def then_and_now(then: Access, now: Access | None) -> Access:
    """Content recorded with ``then`` of a file that is ``now`` (None: gone,
    nothing to add): ``now``'s owner and group, readable only by whom both
    allow (``narrowed``)."""
    if now is None:
        return then
    return narrowed(now, then)


def allows(acc: Access, caller: Caller, bit: int) -> bool:
    """``bit``: 0o4 read, 0o1 search; the class the kernel picks for ``caller``."""
    if caller.uid == 0:
        return True
    if caller.uid == acc.uid:
        return bool(acc.mode & (bit << _OWNER))
    if acc.gid in caller.gids:
        return bool(acc.mode & (bit << _GROUP))
    return bool(acc.mode & bit)


def may_read(caller: Caller, then: Access, now: Access | None) -> bool:
    """Exactly: ``caller`` could read the file then and can now."""
    return allows(then, caller, 0o4) and (now is None or allows(now, caller, 0o4))


def recorded(mode: Any, uid: Any, gid: Any) -> Access | None:
    """The access a record kept, or None if it kept none (or not as ints)."""
    if isinstance(mode, int) and isinstance(uid, int) and isinstance(gid, int):
        return Access(uid, gid, stat.S_IMODE(mode))
    return None


def from_entry(entry: Sequence[Any] | None, at: int) -> Access | None:
    """The access kept in ``entry[at:at + 3]`` (mode, uid, gid), if any."""
    if entry is None or len(entry) < at + 3:
        return None
    return recorded(entry[at], entry[at + 1], entry[at + 2])


def as_record(acc: Access) -> list[int]:
    """``[mode, uid, gid]``: what a version or a folder keeps."""
    return [acc.mode, acc.uid, acc.gid]


def of_stat(st: os.stat_result) -> Access:
    return Access(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


@functools.lru_cache(maxsize=64)
def _store_owner(store_dir: str) -> tuple[int, int]:
    try:
        st = os.stat(store_dir)
    except OSError:
        return (os.geteuid(), os.getegid())
    return (st.st_uid, st.st_gid)


def owner_only(store_dir: str | os.PathLike[str], *, directory: bool = False) -> Access:
    """Content or a folder with no recorded mode: the store's owner alone."""
    uid, gid = _store_owner(os.fspath(store_dir))
    return Access(uid, gid, OWNER_ONLY_DIR if directory else OWNER_ONLY_FILE)


def dir_as_file(acc: Access) -> Access:
    """A folder's search (x) bits moved to the read bits: passing through it
    is what a caller needs of it to read a file below."""
    return Access(acc.uid, acc.gid, (acc.mode & 0o111) << 2)
