"""Parsing a long document range by range, its units readable as they come.

A PDF of more than ``WorkerLimits.range_threshold`` pages is parsed in
ranges, each a job of its own in a parse worker (and its sandboxed child,
like every parse): the first job learns the page count and parses the
first pages; the others parse the rest, a reader's page first.  Until the
last range is in, the file's view is *partial*: its listing names every
unit, a unit already parsed reads as its text (made from the file's present
hash, so ``current``), one not yet parsed says it is pending.  Only the
completed parse is stored, and it is what a parse of the whole file gives:
the ranges' units are those of a whole parse whenever some page has text,
the document is read without repair and its text is within the budget;
else (and after any failure of a range) the file is parsed whole, and that
parse is stored.

A partial parse lives in the daemon's memory only, keyed by (content hash,
parser key) like a stored parse: a view shows it only while the file's
record names that hash, so it never describes other bytes than it claims.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from swfs.store.records import UnitText
from swfs.views.executor import ParseExecutor
from swfs.views.parsework import CHANGED, FAILED, GONE, OK, Pages, ParseOutcome, Part

# Pages in the first range (the time to the first page), then each range
# twice the last, up to LAST_RANGE; a range a reader waits for is at most
# WANTED_RANGE pages from the page asked for.
FIRST_RANGE = 8
LAST_RANGE = 256
WANTED_RANGE = 16


@dataclass
class PartialParse:
    """The units of one (hash, parser) parsed so far.  Written on the trio
    loop, read from any thread (a lock guards the dicts)."""

    names: tuple[tuple[str, str], ...]  # (name, locator) of every unit
    ordinals: dict[str, int] = field(default_factory=dict)
    units: dict[int, UnitText] = field(default_factory=dict)
    blank: set[int] = field(default_factory=set)
    has_text: bool = False
    chars: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.ordinals = {name: i for i, (name, _) in enumerate(self.names)}

    @property
    def total(self) -> int:
        return len(self.names)

    def add(self, part: Part, units: tuple[UnitText, ...]) -> None:
        with self._lock:
            for i, unit in enumerate(units):
                k = part.start + i
                self.units[k] = unit
                if part.blank[i]:
                    self.blank.add(k)
                else:
                    self.has_text = True
            self.chars += part.chars

    def parsed(self, k: int) -> bool:
        return k in self.units

    def ready(self, k: int) -> bool:
        """Whether unit ``k`` reads as its final text: parsed, and either of
        text or in a document known to hold text (a document of none shows
        another note on every page, known only at its end)."""
        with self._lock:
            return k in self.units and (self.has_text or k not in self.blank)

    def unit(self, name: str) -> UnitText | None:
        """The final text of unit ``name``, None while it is not ready."""
        k = self.ordinals.get(name)
        if k is None or not self.ready(k):
            return None
        return self.units[k]

    def done(self) -> int:
        with self._lock:
            return len(self.units)

    def complete(self) -> bool:
        return self.done() == self.total

    def next_range(self, size: int, wanted: list[int]) -> tuple[int, int] | None:
        """The next range to parse: from a page a reader waits for, else from
        the first page not parsed; None when every page is."""
        with self._lock:
            while wanted and wanted[0] in self.units:
                wanted.pop(0)
            first = next((k for k in range(self.total) if k not in self.units), -1)
            if first < 0:
                return None
            start = first
            if wanted:
                start = wanted.pop(0)
                if start != first:  # a reader ahead of the parse: a short range
                    size = min(size, WANTED_RANGE)
            stop = start
            while stop < min(self.total, start + size) and stop not in self.units:
                stop += 1
            return start, stop


class Partials:
    """The partial parses under way, by (hash, parser key)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], PartialParse] = {}
        self._lock = threading.Lock()

    def get(self, h: str, parser: str) -> PartialParse | None:
        with self._lock:
            return self._by_key.get((h, parser))

    def begin(self, h: str, parser: str, names: tuple[tuple[str, str], ...]) -> PartialParse:
        partial = PartialParse(names)
        with self._lock:
            self._by_key[(h, parser)] = partial
        return partial

    def drop(self, h: str, parser: str) -> None:
        with self._lock:
            self._by_key.pop((h, parser), None)


Publish = Callable[[], None]  # on the loop: a range is in, readers may look again


async def parse_ranged(
    pool: ParseExecutor,
    abs_path: str,
    rel: str,
    *,
    h: str,
    parser: str,
    partials: Partials,
    wanted: list[int],
    publish: Publish,
    whole: Callable[[float], Awaitable[ParseOutcome]] | None = None,
) -> ParseOutcome:
    """Parse ``rel`` (recorded as ``h``, by ``parser``) range by range, the
    ranges shown through ``partials`` as they come (``publish`` after each);
    the outcome is that of the whole file.  ``wanted``: unit ordinals
    readers wait for, appended to while this runs.  The caller drops the
    partial parse once the outcome is stored."""
    limits = pool.limits
    threshold = limits.range_threshold
    t0 = time.monotonic()

    async def parse_whole() -> ParseOutcome:
        remaining = limits.timeout - (time.monotonic() - t0)
        if remaining <= 0:
            return _timed_out(limits.timeout, t0)
        if whole is not None:
            return await whole(remaining)
        return await pool.parse(abs_path, rel, budget=remaining)

    first = await pool.parse(abs_path, rel, pages=Pages(0, FIRST_RANGE, threshold))
    if first.status != OK or first.part is None:
        return first  # parsed whole (small, or not for ranges), or failed as whole
    if first.hash != h:
        # Changed since it was recorded: the record moves first, then a parse.
        return ParseOutcome(CHANGED, hash=first.hash, parser=first.parser)
    if first.parser != parser:
        return await parse_whole()
    partial = partials.begin(h, parser, first.part.names)
    partial.add(first.part, first.units)
    publish()
    size = FIRST_RANGE
    while True:
        span = partial.next_range(min(size * 2, LAST_RANGE), wanted)
        if span is None:
            break
        size = min(size * 2, LAST_RANGE)
        remaining = limits.timeout - (time.monotonic() - t0)
        if remaining <= 0:
            return _timed_out(limits.timeout, t0)
        out = await pool.parse(
            abs_path, rel, pages=Pages(span[0], span[1], threshold, expect=h), budget=remaining
        )
        if out.status in (CHANGED, GONE) or (out.hash is not None and out.hash != h):
            return out if out.status in (CHANGED, GONE) else ParseOutcome(CHANGED, hash=out.hash)
        if out.status == FAILED and "timed out" in (out.error or ""):
            return _timed_out(limits.timeout, t0)
        if out.part is None:
            # The worker parsed the file whole after all (a range it could
            # not parse as one): that parse says what the file is.
            return out
        if out.part.names != partial.names:
            return await parse_whole()
        partial.add(out.part, out.units)
        publish()
    if not partial.has_text or partial.chars > limits.options.max_text_bytes:
        return await parse_whole()  # its notes and failures are the whole file's
    units = tuple(partial.units[k] for k in range(partial.total))
    return ParseOutcome(OK, hash=h, parser=parser, units=units, secs=time.monotonic() - t0)


def _timed_out(timeout: float, t0: float) -> ParseOutcome:
    return ParseOutcome(
        FAILED, error=f"parse timed out after {timeout:g} s", secs=time.monotonic() - t0
    )
