"""The reviews part (``engine.reviews``, ``swfs.api.ReviewsAPI``): the change
set against the baseline (``.review/``) as the daemon serves it, one code
path for the live workspace and a world (``swfs.history.world`` reviews its
snapshot against the baseline of then through the same class).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from swfs import permissions
from swfs.api import Access, RelPath, ReviewEntry
from swfs.review import changes as review_mod


class _Drained(Protocol):
    def drain(self) -> None: ...


class Reviewable(review_mod.Reviewed, Protocol):
    """What the reviews part reads of a workspace, beside ``Reviewed``."""

    @property
    def writes(self) -> _Drained:
        """The write protocol: its queued records are drained first."""
        ...

    def generation(self) -> int:
        """Moves whenever the change set may have."""
        ...


class Reviews:
    """Implements ``swfs.api.ReviewsAPI`` for ``ws``: the change set against
    its baseline, computed once per generation (SUMMARY.md, ALL.diff, every
    <rel>.diff and their access bits all ask for it).  ``access``: who may
    read what (the engine's ``evidence.access``).  ``header``: what
    SUMMARY.md starts with (a world says which world it is)."""

    def __init__(
        self,
        ws: Reviewable,
        access: Callable[[RelPath], Access | None],
        *,
        header: Callable[[], str] | None = None,
    ) -> None:
        self._ws = ws
        self._access = access
        self._header = header
        self._changes: tuple[int, list[ReviewEntry]] | None = None

    def review(self) -> Sequence[ReviewEntry]:
        self._ws.writes.drain()  # the queued records of changes of names first
        gen = self._ws.generation()
        if self._changes is None or self._changes[0] != gen:
            self._changes = (gen, review_mod.changes(self._ws))
        return self._changes[1]

    def review_summary(self) -> bytes:
        text = review_mod.summary(self._ws, list(self.review()))
        if self._header is not None:
            text = self._header() + text
        return text.encode("utf-8", "surrogateescape")

    def review_lists(self, rel: RelPath) -> bool:
        current = self._ws.store.get_file_hash(rel)
        if current is None:
            return False
        base = self._ws.baseline_manifest().get(rel)
        return base is None or base[0] != current

    def review_all_diff(self) -> bytes:
        entries = list(self.review())
        return review_mod.all_diff(self._ws, entries).encode("utf-8", "surrogateescape")

    def review_diff(self, rel: RelPath) -> bytes | None:
        for e in self.review():
            if e.rel == rel:
                return review_mod.file_diff(self._ws, e).encode("utf-8", "surrogateescape")
        return None

    def review_access(self) -> Access:
        return review_mod.all_access(self._ws, list(self.review()), self._access)

    def review_diff_access(self, rel: RelPath) -> Access:
        for e in self.review():
            if e.rel == rel:
                return review_mod.diff_access(self._ws, e, self._access(rel))
        return self._access(rel) or permissions.owner_only(self._ws.store_dir)
