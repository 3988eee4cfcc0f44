"""The views part (``engine.views``, ``swfs.api.ViewsAPI``): the parsed views
``.parsed/`` shows, their units, their state and their freshness, served
over a *source* of file records and parses.

One code path for the live workspace and a world: the live workspace's
source is its file table and the store's parses
(``swfs.workspace.LiveSource``), a world's is its snapshot's manifest, read
only, and the store's parses plus those it made on demand
(``swfs.history.world``).  The freshness rule is ``swfs.views.files``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from parsers.cells import count_cells
from swfs.api import Freshness, ParsedView, RelPath, RenderedUnit, ViewState
from swfs.store.records import FileRecord
from swfs.views import files
from swfs.views.files import ParseReads
from swfs.views.parsework import OK
from swfs.views.ranged import PartialParse

Progress = Callable[[str], str]  # rel -> how far its parse has got, in words
Wait = Callable[[RelPath, float, "str | None"], Awaitable[None]]


class ViewSource(Protocol):
    """What the views read: the file records they show and the parses of
    their contents."""

    @property
    def parses(self) -> ParseReads: ...
    def read(self) -> AbstractContextManager[Any]:
        """A read transaction: records and parses read in one are consistent."""
        ...

    def record(self, rel: str) -> FileRecord | None: ...
    def records(self, txn: Any) -> Iterator[tuple[str, FileRecord]]: ...
    def generation(self) -> int:
        """Moves whenever a record or a parse the views read may have."""
        ...

    def busy(self) -> set[str]:
        """The paths a writer holds unrecorded changes to (asked once by a
        caller that checks many files)."""
        ...

    def settled(self, rel: str, rec: FileRecord, busy: set[str] | None = None) -> bool:
        """Whether ``rel``'s bytes are surely those ``rec`` names."""
        ...

    def partial(self, h: str, parser: str) -> PartialParse | None:
        """The ranges parsed so far of a parse under way (``swfs.views.ranged``)."""
        ...


async def _no_wait(rel: RelPath, limit: float, unit: str | None = None) -> None:
    """Nothing parses: nothing to wait for."""


def _no_progress(rel: str) -> str:
    return "no parse is running (no daemon)"


def _no_hurry() -> None:
    """Nothing parses: nothing deferred."""


class Views:
    """Implements ``swfs.api.ViewsAPI`` over ``source``.  ``progress`` says
    how far a parse has got, ``wait`` waits for a view, ``hurry`` starts
    the parses deferred to a pause in changes (the parse queue's owner
    supplies all three; on the trio loop); ``world``: the name of the world the views are
    of, said in every unit's header."""

    def __init__(
        self,
        source: ViewSource,
        *,
        progress: Progress = _no_progress,
        wait: Wait = _no_wait,
        hurry: Callable[[], None] = _no_hurry,
        world: str | None = None,
    ) -> None:
        self.source = source
        self.progress = progress
        self.wait = wait
        self.hurry = hurry
        self.world = world
        self._parsed_paths: tuple[int, list[RelPath]] | None = None

    # -- freshness: derived on every request, never remembered
    def freshness_now(
        self, rel: str, rec: FileRecord, txn: Any = None, busy: set[str] | None = None
    ) -> Freshness:
        """The freshness of ``rel``'s view now, its record ``rec`` just read."""
        fresh = files.content_freshness(self.source.parses, rec, txn)
        return files.freshness_now(fresh, lambda: self.source.settled(rel, rec, busy))

    # -- .parsed
    def parsed_paths(self) -> Iterable[RelPath]:
        # Listing .parsed asks for this often; it only changes with the
        # source's generation, and walking every record of a large tree is
        # not free.
        gen = self.source.generation()
        cached = self._parsed_paths
        if cached is not None and cached[0] == gen:
            return cached[1]
        parses = self.source.parses
        with self.source.read() as txn:
            paths = [
                RelPath(rel)
                for rel, rec in self.source.records(txn)
                if rec.parser
                and files.content_freshness(parses, rec, txn) is not Freshness.UNSUPPORTED
            ]
        self._parsed_paths = (gen, paths)
        return paths

    def parsed_view(self, rel: RelPath) -> ParsedView | None:
        state = self.view_state(rel)
        if state is None:
            return None
        return ParsedView(
            rel=state.rel,
            freshness=state.freshness,
            current_hash=state.current_hash,
            source_hash=state.source_hash,
            parser=state.parser,
            error=state.error,
            units=self._all_units(state),
        )

    def _all_units(self, state: ViewState) -> tuple[RenderedUnit, ...]:
        if self._partial_of(state) is None:
            units = files.all_units(self.source.parses, state, self.progress)
            return tuple(self._named(u) for u in units)
        found = (self.view_unit(state, name) for name in self.view_unit_names(state))
        return tuple(u for u in found if u is not None)

    def view_state(self, rel: RelPath) -> ViewState | None:
        rec = self.source.record(rel)
        if rec is None or rec.parser is None:
            return None
        freshness = files.content_freshness(self.source.parses, rec)
        if freshness == Freshness.UNSUPPORTED:
            return None
        settled = self.source.settled(rel, rec)
        # Parsed range by range, some ranges in: what the file holds now.
        if (
            freshness is Freshness.PENDING
            and settled
            and self.source.partial(rec.hash, rec.parser) is not None
        ):
            return files.partial_state(rel, rec)
        return files.view_state(self.source.parses, rel, rec, freshness, settled=settled)

    def _partial_of(self, view: ViewState) -> PartialParse | None:
        if not view.partial or view.source_hash is None or view.parser is None:
            return None
        return self.source.partial(view.source_hash, view.parser)

    def view_unit_names(self, view: ViewState, *, limit: int | None = None) -> Sequence[str]:
        partial = self._partial_of(view)
        if partial is not None:
            return files.partial_unit_names(view, partial, limit=limit)
        return files.unit_names(self.source.parses, view, limit=limit)

    def view_unit(
        self, view: ViewState, name: str, *, limit: int | None = None
    ) -> RenderedUnit | None:
        parses = self.source.parses
        partial = self._partial_of(view)
        if partial is not None:
            found = files.partial_unit(view, partial, name, self.progress)
        elif view.partial:
            # Its parse ended since the state was read: the stored units
            # (current ones) or none (a change event brings the new state).
            state = dataclasses.replace(view, freshness=Freshness.CURRENT, partial=False)
            found = files.unit(parses, state, name, self.progress, limit=limit)
            found = None if found is None else dataclasses.replace(found, state=state)
        else:
            found = files.unit(parses, view, name, self.progress, limit=limit)
        return None if found is None else self._named(found)

    def _named(self, unit: RenderedUnit) -> RenderedUnit:
        """A world's unit names the world in its header too (one more
        attribute, at the end)."""
        if self.world is None:
            return unit
        head, nl, body = unit.content.partition(b"\n")
        if not head.endswith(b" -->"):
            return unit
        world = files.encode_text(f' world="{files.escape_attr(self.world)}" -->')
        return dataclasses.replace(unit, content=head[:-4] + world + nl + body)

    # -- every view at once (swfs status, swfs sync, the parse queue)
    def counts(self) -> dict[str, int]:
        """How many files, and how many views of each freshness."""
        out = {f.value: 0 for f in Freshness}
        n = 0
        busy = self.source.busy()
        with self.source.read() as txn:
            for rel, rec in self.source.records(txn):
                n += 1
                out[self.freshness_now(rel, rec, txn, busy).value] += 1
        return {"files": n, **out}

    def unsettled(self) -> list[RelPath]:
        """*slow* (an lstat per file): the recorded files whose bytes may
        not be the recorded ones now, written through the mount and not
        recorded yet, or changed behind it (``ViewSource.settled``)."""
        busy = self.source.busy()
        with self.source.read() as txn:
            return [
                RelPath(rel)
                for rel, rec in self.source.records(txn)
                if not self.source.settled(rel, rec, busy)
            ]

    def failures(self) -> list[tuple[str, str]]:
        """(path, error) of every file whose present hash failed to parse."""
        out = []
        busy = self.source.busy()
        parses = self.source.parses
        with self.source.read() as txn:
            for rel, rec in self.source.records(txn):
                if self.freshness_now(rel, rec, txn, busy) == Freshness.FAILED:
                    parse = parses.get_parse(rec.hash, rec.parser or "", txn)
                    out.append((rel, (parse.error if parse else None) or "parse failed"))
        return out

    def needs_parse(self) -> list[RelPath]:
        """The files whose content has no parse yet under their parser."""
        parses = self.source.parses
        with self.source.read() as txn:
            return [
                RelPath(rel)
                for rel, rec in self.source.records(txn)
                if rec.parser and parses.parse_status(rec.hash, rec.parser, txn) is None
            ]

    def content_counts(self) -> dict[str, int]:
        """Pages, slides, sheets and spreadsheet cells in the parses of the
        files as they are now: what indexing throughput is measured in.
        Decodes every current parse record, so it costs a read of the store."""
        out = {"pages": 0, "slides": 0, "sheets": 0, "cells": 0}
        parses = self.source.parses
        with self.source.read() as txn:
            for _, rec in self.source.records(txn):
                if not rec.parser or parses.parse_status(rec.hash, rec.parser, txn) != OK:
                    continue
                for unit in parses.unit_names(rec.hash, rec.parser, txn):
                    kind = unit.locator.partition("=")[0]
                    if kind == "page":
                        out["pages"] += 1
                    elif kind == "slide":
                        out["slides"] += 1
                    elif kind == "sheet":
                        out["sheets"] += 1
                        got = parses.get_unit(rec.hash, rec.parser, unit.name, txn)
                        out["cells"] += count_cells(got[2]) if got else 0
        return out

    def parse_progress(self, rel: str) -> str:
        return self.progress(rel)

    async def wait_view(self, rel: RelPath, limit: float, unit: str | None = None) -> None:
        await self.wait(rel, limit, unit)
