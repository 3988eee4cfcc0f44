"""Rendering parsed units as the files ``.parsed/<rel>/`` shows.

Every unit starts with one header line stating provenance and freshness::

    <!-- swfs source="budget.xlsx" unit="sheet-Sheet1.md" locator="budget.xlsx#sheet=Sheet1"
         hash="b3:1a2b3c4d5e6f7081" freshness="stale" current="b3:9f8e7d6c5b4a3921"
         parser="xlsx@1" -->

(one line in the file).  Attribute order is fixed.  ``hash`` is the content
hash the text was made from and ``current`` the file's present hash, both as
``b3:`` plus the first 16 hex digits of the blake3 hash, as everywhere in
text (``swfs.store.hashform``; the full hashes are in the ``user.sw.source_hash``
/ ``user.sw.current_hash`` xattrs).  Values are
escaped so the line stays one well-formed comment: ``&`` ``"`` ``<`` ``>``
and newlines become ``&amp;`` ``&quot;`` ``&lt;`` ``&gt;`` ``&#10;``.
``freshness`` is one of current, stale, pending, failed.  ``current`` is
``unrecorded`` while the file holds bytes that are not recorded yet (a writer
has written and not closed or fsynced it, or it changed behind the mount):
then no view is current, whatever its hash (``Workspace.settled``).

A pending view parsed range by range (swfs.ranged) lists every unit once
its first range is in: a unit parsed already is rendered ``current`` (its
text is made from the file's present hash, and is what the stored parse
will hold), one not parsed yet is a note rendered ``pending`` with
``hash="none"``; the view itself stays ``pending`` until every unit is in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from swfs.api import Freshness, Hash, RelPath, RenderedUnit, UnitTooLarge, ViewState
from swfs.store import hashform
from swfs.store.records import FileRecord, ParseRecord, UnitInfo, UnitText
from swfs.views import parsework

if TYPE_CHECKING:
    from swfs.views.ranged import PartialParse


class ParseReads(Protocol):
    """The parses views are read from, by (content hash, parser): the
    store's (``swfs.store.records.Store``), or a world's, which adds the
    parses it made on demand (``swfs.history.world``).  ``txn``: a read
    transaction of the source, or None."""

    def get_parse(self, h: str, parser: str, txn: Any = None) -> ParseRecord | None: ...
    def parse_status(self, h: str, parser: str, txn: Any = None) -> str | None: ...
    def unit_names(self, h: str, parser: str, txn: Any = None) -> list[UnitInfo]: ...
    def parse_units(self, h: str, parser: str, txn: Any = None) -> list[UnitText]: ...
    def get_unit(
        self, h: str, parser: str, name: str, txn: Any = None, *, limit: int | None = None
    ) -> UnitText | None: ...


short_hash = hashform.label
# ``current`` of a view whose file holds bytes not recorded yet: a writer
# has written it and not closed (or fsynced) it, or it changed behind the
# mount and the change is not recorded yet.
UNRECORDED = "unrecorded"


def escape_attr(value: str) -> str:
    return (
        value.replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", "&#10;")
    )


def header_line(
    *,
    rel: str,
    unit: str,
    locator: str,
    source_hash: str | None,
    freshness: Freshness,
    current_hash: str | None,
    parser: str | None,
) -> str:
    current = short_hash(current_hash)
    if current_hash is None and freshness in (Freshness.STALE, Freshness.PENDING):
        current = UNRECORDED
    return (
        f'<!-- swfs source="{escape_attr(rel)}" unit="{escape_attr(unit)}" '
        f'locator="{escape_attr(locator)}" '
        f'hash="{short_hash(source_hash)}" freshness="{freshness.value}" '
        f'current="{current}" parser="{escape_attr(parser or "none")}" -->\n'
    )


def encode_text(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Lone surrogates from a broken document: show them as U+FFFD.
        return text.encode("utf-8", "replace")


def render_unit(header: str, text: str) -> bytes:
    body = encode_text(text)
    if body and not body.endswith(b"\n"):
        body += b"\n"
    return encode_text(header) + body


def strip_header(content: str) -> str:
    """The text of a rendered unit without its header line."""
    if content.startswith("<!-- swfs "):
        _, _, rest = content.partition("\n")
        return rest
    return content


# -- serving units one at a time
#
# A view is its state (freshness, the hash and parser its units come from)
# plus units read from the store one by one: opening page 23,999 of a PDF
# reads that page's record and nothing else.

PENDING_UNIT = "pending.md"  # the one unit of a view without any parse yet
ERROR_UNIT = "error.md"  # the one unit of a failed view

Progress = Callable[[str], str]  # rel -> how far its parse has got, in words

# A parse status (swfs.views.parsework) as the freshness of the view it makes.
_FRESHNESS_OF = {
    parsework.OK: Freshness.CURRENT,
    parsework.FAILED: Freshness.FAILED,
    parsework.UNSUPPORTED: Freshness.UNSUPPORTED,
}


def record_freshness(parser: str | None, status: str | None, *, prior_view: bool) -> Freshness:
    """The freshness of a file record's view: from the parse status of its
    content (None: not parsed yet) under its ``parser`` (None: no parser for
    its format).  ``prior_view``: the record keeps an older parse of the path
    to show meanwhile (stale, not pending).  One mapping for the live
    workspace and a world (swfs.history.world)."""
    if parser is None:
        return Freshness.UNSUPPORTED
    if status is None:
        return Freshness.STALE if prior_view else Freshness.PENDING
    return _FRESHNESS_OF.get(status, Freshness.UNSUPPORTED)


def content_freshness(parses: ParseReads, rec: FileRecord, txn: Any = None) -> Freshness:
    """The freshness of ``rec``'s view from the parses alone (whether the
    file still holds those bytes is ``freshness_now``'s question)."""
    status = None if rec.parser is None else parses.parse_status(rec.hash, rec.parser, txn)
    prior = bool(rec.view_hash and rec.view_parser)
    return record_freshness(rec.parser, status, prior_view=prior)


def freshness_now(fresh: Freshness, settled: Callable[[], bool]) -> Freshness:
    """The freshness of a view now, its record's being ``fresh``: unless the
    file surely holds the bytes its record names (``settled``, asked only
    when it matters: it costs an lstat), a current view is stale (the prior
    view of what is being written) and a failed one pending (its failure
    was on bytes the file may no longer hold)."""
    if fresh in (Freshness.CURRENT, Freshness.FAILED) and not settled():
        return Freshness.STALE if fresh is Freshness.CURRENT else Freshness.PENDING
    return fresh


def ok_units(parses: ParseReads, h: str, parser: str) -> list[UnitText] | None:
    """Every unit of the parse of (``h``, ``parser``), None unless it parsed."""
    if parses.parse_status(h, parser) != parsework.OK:
        return None
    return parses.parse_units(h, parser)


def view_state(
    store: ParseReads,
    rel: str,
    rec: FileRecord,
    freshness: Freshness,
    *,
    settled: bool = True,
) -> ViewState:
    """The state of ``.parsed/<rel>/`` for the file record ``rec``, whose own
    freshness is ``freshness``.  Unless ``settled`` (the file may hold other
    bytes than ``rec`` names: written and not recorded yet), nothing is
    current and the present hash is not known: a current view is the prior
    view of what is being written, stale, and a failed one pending."""
    if not settled:
        if freshness is Freshness.CURRENT:
            return ViewState(
                rel=RelPath(rel),
                freshness=Freshness.STALE,
                current_hash=None,
                source_hash=Hash(rec.hash),
                parser=rec.parser,
                error=None,
            )
        if freshness is Freshness.FAILED:
            freshness = Freshness.PENDING
        return dataclasses.replace(view_state(store, rel, rec, freshness), current_hash=None)
    source: str | None = None
    parser = rec.parser
    error = None
    if freshness in (Freshness.CURRENT, Freshness.FAILED):
        source = rec.hash
        if freshness is Freshness.FAILED:
            record = store.get_parse(rec.hash, rec.parser or "")
            error = (record.error if record is not None else None) or "parse failed"
    elif freshness is Freshness.STALE and rec.view_hash and rec.view_parser:
        # The prior view, if its parse is kept and has units; else pending.md.
        prior = store.get_parse(rec.view_hash, rec.view_parser)
        if prior is not None and prior.ok and prior.units:
            source, parser = rec.view_hash, rec.view_parser
    return ViewState(
        rel=RelPath(rel),
        freshness=freshness,
        current_hash=Hash(rec.hash),
        source_hash=Hash(source) if source else None,
        parser=parser,
        error=error,
    )


def partial_state(rel: str, rec: FileRecord) -> ViewState:
    """The state of a pending view parsed range by range, some ranges in
    (swfs.ranged): its units come from the file's present hash."""
    return ViewState(
        rel=RelPath(rel),
        freshness=Freshness.PENDING,
        current_hash=Hash(rec.hash),
        source_hash=Hash(rec.hash),
        parser=rec.parser,
        error=None,
        partial=True,
    )


def partial_unit_names(view: ViewState, partial: PartialParse, *, limit: int | None) -> list[str]:
    if limit is not None and partial.total > limit:
        raise UnitTooLarge(f"{view.rel}: {partial.total} units")
    return [name for name, _ in partial.names]


def partial_unit(
    view: ViewState, partial: PartialParse, name: str, progress: Progress
) -> RenderedUnit | None:
    """Unit ``name`` of a view parsed range by range: its text, current,
    once its range is in; until then a note saying it is pending."""
    k = partial.ordinals.get(name)
    if k is None:
        return None
    found = partial.unit(name)
    if found is not None:
        state = dataclasses.replace(view, freshness=Freshness.CURRENT, partial=False)
        return dataclasses.replace(render(state, *found), state=state)
    state = dataclasses.replace(view, source_hash=None)
    text = (
        f"swfs has not parsed {name} of {view.rel} yet ({partial.done()} of "
        f"{partial.total} parsed; {progress(view.rel)}).\n"
        "`swfs sync` waits for it; reading it by name waits for it too.\n"
    )
    return dataclasses.replace(render(state, name, partial.names[k][1], text), state=state)


def _pending(view: ViewState) -> bool:
    return view.source_hash is None and view.freshness is not Freshness.FAILED


def unit_names(store: ParseReads, view: ViewState, *, limit: int | None = None) -> list[str]:
    """The names of ``view``'s units; UnitTooLarge when the parse has more
    than ``limit`` of them (counted from its record, before any is read)."""
    if view.freshness is Freshness.FAILED:
        return [ERROR_UNIT]
    if _pending(view):
        return [PENDING_UNIT]
    h, parser = view.source_hash or "", view.parser or ""
    if limit is not None:
        record = store.get_parse(h, parser)
        if record is not None and record.units > limit:
            raise UnitTooLarge(f"{view.rel}: {record.units} units")
    return [u.name for u in store.unit_names(h, parser)]


def render(view: ViewState, name: str, locator: str, text: str) -> RenderedUnit:
    full = f"{view.rel}#{locator}"
    head = header_line(
        rel=view.rel,
        unit=name,
        locator=full,
        source_hash=view.source_hash,
        freshness=view.freshness,
        current_hash=view.current_hash,
        parser=view.parser,
    )
    return RenderedUnit(name=name, locator=full, content=render_unit(head, text))


def _synthetic(view: ViewState, name: str, progress: Progress) -> RenderedUnit | None:
    """error.md of a failed view, pending.md of a view without a parse."""
    if view.freshness is Freshness.FAILED:
        if name != ERROR_UNIT:
            return None
        text = f"swfs could not parse {view.rel}: {view.error}\n"
        return render(view, name, "error", text)
    if name != PENDING_UNIT:
        return None
    text = (
        f"swfs has not parsed {view.rel} yet: {progress(view.rel)}.\n"
        "`swfs sync` waits for it; reading a unit by name waits for it too.\n"
    )
    return render(view, name, "pending", text)


def unit(
    store: ParseReads,
    view: ViewState,
    name: str,
    progress: Progress,
    *,
    limit: int | None = None,
) -> RenderedUnit | None:
    """The unit ``name`` of ``view``, read from the store without the others
    (UnitTooLarge past ``limit`` bytes of stored text)."""
    if view.freshness is Freshness.FAILED or _pending(view):
        return _synthetic(view, name, progress)
    found = store.get_unit(view.source_hash or "", view.parser or "", name, limit=limit)
    return None if found is None else render(view, *found)


def all_units(store: ParseReads, view: ViewState, progress: Progress) -> tuple[RenderedUnit, ...]:
    """Every unit of ``view``, rendered (``swfs show``, tests)."""
    if view.freshness is Freshness.FAILED or _pending(view):
        name = ERROR_UNIT if view.freshness is Freshness.FAILED else PENDING_UNIT
        one = _synthetic(view, name, progress)
        return () if one is None else (one,)
    units = store.parse_units(view.source_hash or "", view.parser or "")
    return tuple(render(view, *u) for u in units)
