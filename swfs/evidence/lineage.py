"""Lineage: what each file written through the mount was derived from.

**The rule.**  When a file is written (its write is recorded on close, flush
or fsync), its inputs are the files read, before that moment, by the writing
process and by the processes of its job (``swfs.evidence.procinfo``: one ``bash -c``,
a script and what it runs, one pipeline of an interactive shell) whose
output reached it: a process that wrote a pipe the writer (or such a
process) read, and a process that held the written file open for writing
(a ``for`` loop's children under ``done > out``).  Reads of the other
processes of the job are no input, however close in time: in ``head -3
a; cat b | sort > out`` the input of ``out`` is ``b``, and in ``cut a >
t; sort t > out`` it is ``t`` (whose input is ``a``).  Which process held
which pipe end is read from ``/proc`` when each process first opens a
file of the mount (``procinfo.job_links``); a shell's ends on descriptors
above 2 count only when no process holds that end as its standard input
or output (a command substitution's shell, a process substitution's
reader), not while it hands a pipeline its pipes.  The journal looks at a
job again shortly after a process that feeds a pipe opened a file, and a
pipe whose writer was never seen is bridged (``JobReads._unseen_stage``).
Each input is the file's version (content hash) when it was read; a
``.parsed`` unit counts as a read of its source file, at the hash the unit was
made from, with the unit's locator.  A file read and rewritten in place is its
own input at its earlier hash.  A rename moves a written file's lineage to its
new name (an editor's temp-then-rename save is attributed to the final name);
a later write by the same job carries the earlier write's inputs on
(``>`` then ``>>``).  A read of ``.review/<file>.diff`` is a read of the
two versions of ``<file>`` it compares.

The graph: nodes are file versions (path, hash), edges go from an input to
the output it was read for, labelled with the writing process.  Exported as
JSON, Graphviz DOT and W3C PROV-JSON (entities: file versions; activities:
processes; ``used``, ``wasGeneratedBy``, ``wasDerivedFrom``).
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from swfs.evidence.procinfo import Link
from swfs.store.sqlitetext import in_list


def read_locator(locator: str | None, detail: dict[str, Any]) -> str | None:
    if locator:
        return locator.partition("#")[2] or locator
    if detail.get("lines"):
        a, b = detail["lines"]
        return f"lines={a}-{b}"
    ranges = detail.get("ranges") or []
    if ranges:
        return "bytes=" + ",".join(f"{s}-{e - 1}" for s, e in ranges)
    return None


# -- the same rule, kept up to date as events are stored
#
# ``JobReads`` holds what one job has read: per (source, hash), per reader,
# the reads' locators.  The journal's thread advances it by each read event
# it stores (``fold``, in the order of the events; ``update`` when a stored
# read's detail changed: its ranges grew, its handle closed).
#
# The reads that count for a write by process P are those of P and of the
# processes whose output reached it (``JobReads.counted``): the same for
# every write by P but for new reads and newly seen channels.  So each
# writing process has a view of the job (``_View``: the groups as its
# writes see them, and the readers they count), kept up to date by the
# reads that concern it, and a write stores
# its view's change since that process's previous write (``base``), plus,
# by reference, the output row it carries on from (``carry``: the job's
# previous write of the path, whose inputs not read again come after).  A
# group's item is extended by its new reads, and made again from its reads
# only when a reader stops counting (it wrote) or an open read's detail
# changed.  So a write costs what changed since its process's last write.

Key = tuple[str, str | None]


class _Reads:
    """One reader's reads of one (source, hash): seq -> (locator, t); the
    locators of its closed reads (a closed read repeating one is not kept:
    it changes nothing in the group)."""

    __slots__ = ("entries", "final")

    def __init__(self) -> None:
        self.entries: dict[int, tuple[str | None, float]] = {}
        self.final: set[str | None] = set()


class _Item:
    """A group as one view sees it: its item (None: no read counts), and
    what extends it since (``new``), unless it must be made again."""

    __slots__ = ("item", "full", "new", "locs", "readers")

    def __init__(self) -> None:
        self.item: dict[str, Any] | None = None
        self.full = True
        self.new: list[tuple[int, str, str | None, float]] = []
        self.locs: set[str] = set()
        self.readers: set[str] = set()


class _View:
    """The job's reads as the writes of process ``proc`` see them."""

    __slots__ = (
        "proc",
        "counted",
        "items",
        "g",
        "dirty",
        "last",
        "since_snapshot",
        "snapshot_chars",
        "whole",
    )

    def __init__(self, proc: str) -> None:
        self.proc = proc
        self.counted: set[str] = set()  # the readers whose reads its items hold
        self.items: dict[Key, _Item] = {}
        self.g: dict[Key, dict[str, Any]] = {}  # the items that exist
        self.dirty: set[Key] = set()
        self.last = 0  # its previous output row (0: none, the next is whole)
        self.since_snapshot = 0  # characters of changes stored since the last whole
        self.snapshot_chars = 0  # of that whole
        # Its items in the order of their first read, without "o", made once
        # per change of ``g`` (None: ``g`` changed since): a job's writes
        # between two of its reads would each sort and copy every item.
        # Never changed in place once made: a new list replaces it.
        self.whole: list[dict[str, Any]] | None = None

    def append(self, key: Key, entry: tuple[int, str, str | None, float]) -> None:
        it = self.items.get(key)
        if it is None:
            it = self.items[key] = _Item()
        elif not it.full:
            it.new.append(entry)
        self.dirty.add(key)

    def remake(self, key: Key) -> None:
        it = self.items.get(key)
        if it is None:
            it = self.items[key] = _Item()
        it.full = True
        it.new.clear()
        self.dirty.add(key)


@dataclass
class WriteInputs:
    """What ``JobReads.write`` gives: the row's stored form."""

    base: int  # the row whose view ``text`` changes; 0: ``text`` holds it whole
    carry: int  # the row carried on from; 0: none
    text: str  # JSON: {"own", "g"} or {"own", "set", "add", "del"}
    entries: int  # items stored
    # The whole list, when known cheaply.  The same list object as the
    # previous write's while the view did not change (read it, never change
    # it): its JSON can be reused.
    items: list[dict[str, Any]] | None


def _key(item: dict[str, Any]) -> Key:
    return (item["path"], item["hash"])


def _order(item: dict[str, Any]) -> list[int]:
    return item.get("o") or [0, 0]


def _strip(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "o"}


class JobReads:
    """One job's reads (see the section's comment)."""

    # A view is stored whole again once the changes stored since the last
    # whole reach its size in characters (at least this many): a row reads
    # back in about twice its view, and the wholes add up to about twice the
    # changes (a view grows only by them): storage stays linear.
    SNAPSHOT_MIN = 2048
    MAX_VIEWS = 64  # writing processes kept per job (the rest: made again)
    # Rows carried on from one another at most this deep: the next stores
    # what it carries itself ("c"), so reading one row back reads a bounded
    # number of others (a file rewritten again and again by its job).
    CARRY_DEPTH = 16
    MAX_DEPTHS = 65536  # rows whose depth is kept (one not kept: as if too deep)

    def __init__(self, job: str) -> None:
        self.job = job
        self.upto = 0  # the last read folded in
        self.groups: dict[Key, dict[str, _Reads]] = {}
        self.by_reader: dict[str, set[Key]] = {}
        # The channels seen held: chan -> ((holders of its read end,
        # holders of its write end): proc -> on a standard descriptor?).
        self.chans: dict[str, tuple[dict[str, bool], dict[str, bool]]] = {}
        self.reads_of: dict[str, set[str]] = {}  # proc -> pipes it holds a read end of
        # The "file:" channels of ``chans``: their write ends' holders.
        self.files: dict[str, dict[str, bool]] = {}
        # ``counted`` of a writer and the holders of the written file: the
        # same until the channels change (``link``), and asked at every
        # write (a checkout's thousands).  Never changed in place.
        self.closures: dict[tuple[str, frozenset[str]], set[str]] = {}
        self.views: OrderedDict[str, _View] = OrderedDict()
        # reads whose detail may still change: seq -> (key, reader, locator)
        self.open: dict[int, tuple[Key, str, str | None]] = {}
        self.touched = 0.0  # time.monotonic() of its last event (the journal's)
        # How deep each of its rows carries on (rows not carried on from yet).
        self.depth: dict[int, int] = {}

    def _views_of(self, reader: str) -> Iterable[_View]:
        return (v for v in self.views.values() if reader in v.counted)

    def link(self, link: Link) -> None:
        """Process ``link.proc`` was seen holding a channel (counted at the
        job's next writes)."""
        ends = self.chans.get(link.chan)
        if ends is None:
            ends = self.chans[link.chan] = ({}, {})
        side = ends[1] if link.write else ends[0]
        side[link.proc] = side.get(link.proc, False) or link.std
        if not link.write:
            self.reads_of.setdefault(link.proc, set()).add(link.chan)
        if link.chan.startswith("file:"):
            self.files[link.chan] = ends[1]
        self.closures.clear()

    def counted(self, proc: str, path: str) -> set[str]:
        """The processes whose reads count for a write of ``path`` by
        ``proc``: itself, those that held ``path`` open for writing, and,
        transitively, those that wrote a pipe one of them read."""
        out = {proc}
        suffix = "/" + path
        for chan, holders in self.files.items():
            if chan.endswith(suffix):
                out.update(holders)
        key = (proc, frozenset(out))
        hit = self.closures.get(key)
        if hit is None:
            if len(self.closures) >= 1024:
                self.closures.clear()
            hit = self.closures[key] = self._closure(out)
        return hit

    def _closure(self, out: set[str]) -> set[str]:
        """``out`` and, transitively, the processes that wrote a pipe one of
        them read (``out`` is grown in place and returned)."""
        todo = list(out)
        while todo:
            x = todo.pop()
            for chan in self.reads_of.get(x, ()):
                readers, writers = self.chans[chan]
                if not _holds(readers, x):
                    continue
                if not writers:
                    writers = self._unseen_stage(chan)
                for w in writers:
                    if w not in out and _holds(writers, w):
                        out.add(w)
                        todo.append(w)
        return out

    def _unseen_stage(self, chan: str) -> dict[str, bool]:
        """The writers to take for pipe ``chan``, read on a standard input,
        whose writer was never seen: a pipeline stage that opened no file of
        the mount and was forked and gone between two looks at the job
        (``cat a | grep x | sort | tail > out`` on a loaded machine).  The
        stage before it is then the job's nearest pipe made before it (pipe
        inodes are handed out in order), if it was written and no process
        was seen reading it on its standard input.  A pipe the job root holds
        on a standard descriptor (a harness's) is neither, nor one only the
        root reads (``$(...)``: a shell handing a pipeline its pipe holds
        both ends)."""
        root = self.job.partition("/")[0]
        readers = self.chans[chan][0]
        if readers.get(root) or not chan.startswith("pipe:") or not any(readers.values()):
            return {}
        try:
            ino = int(chan[5:])
        except ValueError:
            return {}
        nearest: tuple[int, str] | None = None
        for other in self.chans:
            if other.startswith("pipe:") and other[5:].isdigit():
                n = int(other[5:])
                if n < ino and (nearest is None or n > nearest[0]):
                    nearest = (n, other)
        if nearest is None:
            return {}
        r, w = self.chans[nearest[1]]
        if w.get(root) or r.get(root) or any(r.values()) or not any(w.values()):
            return {}  # a harness's, or read by a process seen, or written by none seen
        if root in r and root not in w:
            return {}  # a command substitution's: its shell reads it
        return w

    # -- advancing

    def fold(
        self,
        seq: int,
        reader: str,
        source: str,
        hash_: str | None,
        locator: str | None,
        detail: str | None,
        t: float,
    ) -> None:
        """A read event, stored with ``detail`` (in the order of the events)."""
        self.upto = max(self.upto, seq)
        if not source:
            return
        d = json.loads(detail or "{}")
        loc = read_locator(locator, d)
        final = not d.get("open")
        key = (source, hash_)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = {}
        reads = group.get(reader)
        if reads is None:
            reads = group[reader] = _Reads()
            self.by_reader.setdefault(reader, set()).add(key)
        elif final and loc in reads.final:
            return  # a closed read of the same place again: nothing new
        reads.entries[seq] = (loc, t)
        if final:
            reads.final.add(loc)
        else:
            self.open[seq] = (key, reader, locator)
        entry = (seq, reader, loc, t)
        for view in self._views_of(reader):
            view.append(key, entry)

    def update(self, seq: int, detail: str | None) -> None:
        """A read folded before was stored again with ``detail``."""
        ref = self.open.get(seq)
        if ref is None:
            return
        key, reader, locator = ref
        d = json.loads(detail or "{}")
        loc = read_locator(locator, d)
        reads = self.groups[key][reader]
        old = reads.entries.get(seq)
        if old is None:
            self.open.pop(seq, None)
            return
        if not d.get("open"):
            self.open.pop(seq, None)
            reads.final.add(loc)
        if old[0] == loc:
            return
        reads.entries[seq] = (loc, old[1])
        for view in self._views_of(reader):
            view.remake(key)

    # -- a write

    def _view(self, proc: str) -> _View:
        view = self.views.get(proc)
        if view is not None:
            self.views.move_to_end(proc)
            return view
        view = self.views[proc] = _View(proc)
        while len(self.views) > self.MAX_VIEWS:
            self.views.popitem(last=False)
        return view

    def _compute(self, view: _View, key: Key) -> tuple[str, Any]:
        """Bring ``view``'s item of ``key`` up to date; what changed: ("add",
        (locators, readers)) appended in place, or ("set", the old item)."""
        it = view.items[key]
        old = it.item
        if it.full or old is None:
            it.full = False
            it.new.clear()
            it.locs = set()
            it.readers = set()
            counted = view.counted
            entries = sorted(
                (seq, reader, loc, t)
                for reader, reads in self.groups.get(key, {}).items()
                if reader in counted
                for seq, (loc, t) in reads.entries.items()
            )
            if not entries:
                it.item = None
                view.g.pop(key, None)
                del view.items[key]
                return ("set", old)
            item: dict[str, Any] = {
                "path": key[0],
                "hash": key[1],
                "locators": [],
                "readers": [],
                "t": entries[0][3],
                "o": [0, entries[0][0]],
            }
            for _seq, reader, loc, _t in entries:
                if loc and loc not in it.locs:
                    it.locs.add(loc)
                    item["locators"].append(loc)
                if reader not in it.readers:
                    it.readers.add(reader)
                    item["readers"].append(reader)
            it.item = view.g[key] = item
            return ("set", old)
        locs: list[str] = []
        readers: list[str] = []
        for _seq, reader, loc, _t in it.new:
            if loc and loc not in it.locs:
                it.locs.add(loc)
                locs.append(loc)
            if reader not in it.readers:
                it.readers.add(reader)
                readers.append(reader)
        it.new.clear()
        old["locators"].extend(locs)
        old["readers"].extend(readers)
        return ("add", (locs, readers))

    def write(
        self,
        con: sqlite3.Connection,
        seq: int,
        proc: str,
        path: str,
        hash_: str | None,
        prev: int | None,
        *,
        want_items: int = 0,
    ) -> WriteInputs:
        """The inputs of the write stored as event ``seq`` by ``proc``
        (``prev``: the job's present output row of ``path``, which this one
        carries on from); ``want_items``: give the whole list when it has no
        row to carry on from and at most that many inputs."""
        view = self._view(proc)
        counted = self.counted(proc, path)
        if counted != view.counted:
            for reader in counted ^ view.counted:
                for key in self.by_reader.get(reader, ()):
                    view.remake(key)
            view.counted = counted
        sets: list[dict[str, Any]] = []
        adds: list[list[Any]] = []
        dels: list[list[Any]] = []
        if view.dirty:
            view.whole = None  # its items change below
        for key in view.dirty:
            kind, what = self._compute(view, key)
            if kind == "add":
                if what[0] or what[1]:
                    adds.append([key[0], key[1], what[0], what[1]])
                continue
            new = view.g.get(key)
            if new is None:
                if what is not None:
                    dels.append([key[0], key[1]])
            elif what != new:
                sets.append(_copy(new))
        view.dirty.clear()
        own = [path, hash_]
        head: dict[str, Any] = {"own": own}
        carry = prev or 0
        depth = 0
        inline: list[dict[str, Any]] | None = None
        if carry:
            depth = self.depth.pop(carry, self.CARRY_DEPTH) + 1
            if depth > self.CARRY_DEPTH:
                # Too deep (or a row this object did not write): what it
                # carries on, stored here.
                was = stored_inputs(con, [carry]).get(carry, [])
                g = view.g
                mine = (path, hash_)
                inline = [i for i in was if _key(i) not in g and _key(i) != mine]
                carry = depth = 0
        self.depth[seq] = depth
        if len(self.depth) > self.MAX_DEPTHS:  # the oldest: as if too deep
            for s in list(itertools.islice(self.depth, self.MAX_DEPTHS // 2)):
                del self.depth[s]
        text = None
        entries = len(sets) + len(adds) + len(dels)
        if view.last:
            if sets:
                head["set"] = sets
            if adds:
                head["add"] = adds
            if dels:
                head["del"] = dels
            if inline is not None:
                head["c"] = inline
            text = _dumps(head)
        base = view.last
        if text is None or view.since_snapshot + len(text) > max(
            view.snapshot_chars, self.SNAPSHOT_MIN
        ):
            whole = sorted((_copy(i) for i in view.g.values()), key=_order)
            head = {"own": own, "g": whole}
            if inline is not None:
                head["c"] = inline
            text = _dumps(head)
            entries = len(whole) + len(inline or ())
            view.snapshot_chars = len(text)
            view.since_snapshot = 0
            base = 0
        else:
            view.since_snapshot += len(text)
        view.last = seq
        items = None
        if not carry and want_items and len(view.g) + len(inline or ()) <= want_items:
            items = view.whole
            if items is None:
                items = view.whole = [_strip(i) for i in sorted(view.g.values(), key=_order)]
            if (path, hash_) in view.g:
                items = [i for i in items if _key(i) != (path, hash_)]
            if inline:
                items = items + inline
        return WriteInputs(base, carry, text, entries, items)

    def forget_before(self, seq: int) -> None:
        """Output rows up to ``seq`` were deleted: a view whose previous row
        was among them is stored whole at its next write."""
        for view in self.views.values():
            if view.last <= seq:
                view.last = 0
        for s in [s for s in self.depth if s <= seq]:
            del self.depth[s]


def _holds(side: dict[str, bool], proc: str) -> bool:
    """Does ``proc`` count as a holder of this end of a channel: on a
    standard descriptor, or when nobody holds it on one."""
    return side.get(proc, False) or not any(side.values())


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    out = dict(item)
    if "locators" in out:
        out["locators"] = list(out["locators"])
    if "readers" in out:
        out["readers"] = list(out["readers"])
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def job_reads(con: sqlite3.Connection, job: str, seq: int) -> JobReads:
    """A job's reads before event ``seq``, from the events table (after a
    restart, or for a job not kept in memory)."""
    acc = JobReads(job)
    if con.execute("SELECT 1 FROM sqlite_master WHERE name='links'").fetchone():
        for proc, chan, write, std in con.execute(
            "SELECT proc, chan, write, std FROM links WHERE job=?", (job,)
        ):
            acc.link(Link(proc, chan, bool(write), bool(std)))
    rows = con.execute(
        "SELECT seq, proc, source, hash, locator, detail, t FROM events "
        "WHERE job=? AND kind='read' AND seq<? ORDER BY seq",
        (job, seq),
    )
    for s, reader, source, h, locator, detail, t in rows:
        acc.fold(s, reader, source, h, locator, detail, t)
    acc.upto = max(acc.upto, seq)
    return acc


# -- output rows as stored


def has_refs(con: sqlite3.Connection) -> bool:
    """Whether ``outputs`` has the ``base`` and ``carry`` columns (format 2)."""
    cols = {r[1] for r in con.execute("PRAGMA table_info(outputs)")}
    return {"base", "carry"} <= cols


@contextmanager
def _one_read(con: sqlite3.Connection) -> Iterator[None]:
    """Queries that see one state of the journal (its thread may store and
    delete rows between two queries of a reader)."""
    if con.in_transaction:
        yield
        return
    con.execute("BEGIN")
    try:
        yield
    finally:
        con.execute("COMMIT")


def _apply(view: dict[Key, dict[str, Any]], change: dict[str, Any]) -> None:
    for path, h in change.get("del", ()):
        view.pop((path, h), None)
    for item in change.get("set", ()):
        view[_key(item)] = item
    for path, h, locs, readers in change.get("add", ()):
        item = view.get((path, h))
        if item is not None:
            view[(path, h)] = {
                **item,
                "locators": item.get("locators", []) + locs,
                "readers": item.get("readers", []) + readers,
            }


@dataclass
class Stored:
    """Output rows read back: whole input lists (``lists``) and, for rows
    stored by format 2, the writer's view (``views``: key -> item with its
    order) and the items carried on (``carried``)."""

    lists: dict[int, list[dict[str, Any]]]
    views: dict[int, dict[Key, dict[str, Any]]]
    carried: dict[int, list[dict[str, Any]]]


def stored_inputs(
    con: sqlite3.Connection,
    seqs: Iterable[int],
    *,
    refs: dict[int, tuple[int, int]] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """The whole input lists of output rows ``seqs`` (see ``swfs.evidence.access``
    for how rows store them); ``refs``: seq -> (base, carry) of every row,
    when already read."""
    wanted = set(seqs)
    if not wanted:
        return {}
    with _one_read(con):
        return read_rows(con, wanted, refs=refs).lists


def read_rows(
    con: sqlite3.Connection,
    wanted: set[int],
    *,
    refs: dict[int, tuple[int, int]] | None = None,
    views_of: set[int] | None = None,
    carried_of: set[int] | None = None,
) -> Stored:
    """Rows ``wanted`` read back (``views_of``, ``carried_of``: rows whose
    view and carried items are wanted too)."""
    newer = has_refs(con)
    views_of = views_of or set()
    carried_of = carried_of or set()
    # Every row the wanted ones rest on, and how many rest on each: a row
    # whose list is needed needs its view and the list of the row it carries
    # on from; a row whose view is needed, the view of its base.
    need: set[int] = set()
    listed: set[int] = set()
    uses: dict[int, int] = {}  # rows resting on each as their base
    cuses: dict[int, int] = {}  # rows carrying on from each
    todo = [(s, True) for s in sorted(wanted | carried_of)] + [(s, False) for s in views_of]
    while todo:
        s, as_list = todo.pop()
        if s in need and (not as_list or s in listed):
            continue
        first = s not in need
        need.add(s)
        if as_list:
            listed.add(s)
        if not newer:
            continue
        if refs is not None:
            b, c = refs.get(s, (0, 0))
        else:
            row = con.execute("SELECT base, carry FROM outputs WHERE seq=?", (s,)).fetchone()
            b, c = row if row is not None else (0, 0)
        if b and first:
            uses[b] = uses.get(b, 0) + 1
            todo.append((b, False))
        if c and as_list:
            cuses[c] = cuses.get(c, 0) + 1
            todo.append((c, True))
    out = Stored({}, {}, {})
    views: dict[int, dict[Key, dict[str, Any]]] = {}
    lists: dict[int, list[dict[str, Any]]] = {}
    ordered = sorted(need)
    cols = "base, carry" if newer else "0, 0"
    for i in range(0, len(ordered), 512):
        marks, params = in_list(ordered[i : i + 512])  # few statement shapes
        rows = con.execute(
            f"SELECT seq, {cols}, inputs FROM outputs WHERE seq IN {marks} ORDER BY seq", params
        )
        for seq, base, carry, text in rows:
            data = json.loads(text or "[]")
            if isinstance(data, list):  # a whole list (format 1)
                lists[seq] = [_strip(i) for i in data]
                views[seq] = {_key(i): i for i in data}
                carried: list[dict[str, Any]] = []
            else:
                if "g" in data or not base:
                    view = {_key(i): i for i in data.get("g", ())}
                else:
                    view = _view_of(views, uses, base)
                    _apply(view, data)
                views[seq] = view
                carried = []
                if seq in wanted or cuses.get(seq) or seq in carried_of:
                    own = tuple(data.get("own") or ("", None))
                    if "c" in data:
                        carried = data["c"]
                    elif carry:
                        carried = [
                            i
                            for i in lists.get(carry, [])
                            if _key(i) not in view and _key(i) != own
                        ]
                    mine = sorted((i for k, i in view.items() if k != own), key=_order)
                    lists[seq] = [_strip(i) for i in mine] + carried
            if seq in wanted:
                out.lists[seq] = lists[seq]
            if seq in views_of:
                out.views[seq] = dict(views[seq])
            if seq in carried_of:
                out.carried[seq] = carried
            _release(views, uses, base)
            _release(lists, cuses, carry)
            if not uses.get(seq):  # nothing later rests on it
                views.pop(seq, None)
            if not cuses.get(seq):
                lists.pop(seq, None)
    return out


def _view_of(
    views: dict[int, dict[Key, dict[str, Any]]], uses: dict[int, int], base: int
) -> dict[Key, dict[str, Any]]:
    view = views.get(base)
    if view is None:
        return {}  # the row it rests on is missing: what it changed, at least
    return dict(view) if uses.get(base, 0) > 1 else view


def _release(states: dict[int, Any], uses: dict[int, int], r: int) -> None:
    if r and r in uses:
        uses[r] -= 1
        if uses[r] <= 0:
            del uses[r]
            states.pop(r, None)


# -- locators as people read them


def _spans(nums: Iterable[int]) -> str:
    out: list[str] = []
    ordered = sorted(set(nums))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out)


def _ranges(pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(pairs):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def describe(locators: Sequence[str]) -> str:
    """``["rows=1-5000", "rows=5001-10000"]`` -> ``rows 1-10000``; pages,
    slides, rows, lines and bytes merged, sheets and sections by name."""
    pages: list[int] = []
    slides: list[int] = []
    spans: dict[str, list[tuple[int, int]]] = {"rows": [], "lines": [], "bytes": []}
    names: list[str] = []
    for loc in locators:
        key, _, value = loc.partition("=")
        try:
            if key == "page":
                pages.append(int(value))
                continue
            if key == "slide":
                slides.append(int(value))
                continue
            if key in spans:
                for part in value.split(","):
                    a, _, b = part.partition("-")
                    spans[key].append((int(a), int(b or a)))
                continue
        except ValueError:
            pass
        name = value if key in ("sheet", "h") else loc
        if name not in names:
            names.append(name)
    out: list[str] = []
    if pages:
        out.append(("pages " if len(set(pages)) > 1 else "page ") + _spans(pages))
    if slides:
        out.append(("slides " if len(set(slides)) > 1 else "slide ") + _spans(slides))
    for key in ("rows", "lines", "bytes"):
        if spans[key]:
            out.append(
                f"{key} "
                + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in _ranges(spans[key]))
            )
    out += names
    return ", ".join(out)


# -- the graph


@dataclass
class Graph:
    nodes: dict[tuple[str, str | None], dict[str, Any]] = field(default_factory=dict)
    edges: list[dict[str, Any]] = field(default_factory=list)

    def node(self, path: str, hash_: str | None, role: str) -> str:
        key = (path, hash_)
        n = self.nodes.get(key)
        if n is None:
            n = {"id": f"n{len(self.nodes) + 1}", "path": path, "hash": hash_, "role": role}
            self.nodes[key] = n
        elif role == "output":
            n["role"] = "output"
        return str(n["id"])

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes.values()), "edges": self.edges}


@dataclass(frozen=True)
class Output:
    seq: int
    t: float
    path: str
    hash: str | None
    process: dict[str, Any]
    inputs: list[dict[str, Any]]


def _process(row: Sequence[Any]) -> dict[str, Any]:
    key, pid, name, cmdline, job = row
    return {
        "key": key,
        "pid": pid,
        "name": name,
        "cmdline": json.loads(cmdline or "[]"),
        "job": job,
    }


def outputs(con: sqlite3.Connection) -> list[Output]:
    """Every written file version still in the workspace, oldest first."""
    with _one_read(con):
        return _outputs(con)


def _outputs(con: sqlite3.Connection) -> list[Output]:
    refs = None
    if has_refs(con):
        refs = {s: (b, c) for s, b, c in con.execute("SELECT seq, base, carry FROM outputs")}
    rows = con.execute(
        "SELECT o.seq, o.t, o.path, o.hash, o.proc, p.pid, p.name, p.cmdline, o.job "
        "FROM outputs o LEFT JOIN procs p ON p.key = o.proc "
        "WHERE o.superseded=0 AND o.gone=0 ORDER BY o.seq"
    ).fetchall()
    lists = stored_inputs(con, [r[0] for r in rows], refs=refs)
    return [
        Output(seq, t, path, h, _process(rest), lists.get(seq, []))
        for seq, t, path, h, *rest in rows
    ]


def build(outs: Sequence[Output], path: str | None = None) -> Graph:
    """The graph of ``outs``; with ``path``: of that file's present version and
    everything it was derived from, transitively."""
    if path is not None:
        by_version = {(o.path, o.hash): o for o in outs}
        latest = [o for o in outs if o.path == path]
        todo = latest[-1:]
        picked: dict[int, Output] = {}
        while todo:
            o = todo.pop()
            if o.seq in picked:
                continue
            picked[o.seq] = o
            for i in o.inputs:
                prior = by_version.get((i["path"], i["hash"]))
                if prior is not None and prior.seq < o.seq:
                    todo.append(prior)
        outs = sorted(picked.values(), key=lambda o: o.seq)
    g = Graph()
    for o in outs:
        to = g.node(o.path, o.hash, "output")
        for i in o.inputs:
            frm = g.node(i["path"], i["hash"], "input")
            g.edges.append(
                {
                    "from": frm,
                    "to": to,
                    "from_path": i["path"],
                    "to_path": o.path,
                    "from_hash": i["hash"],
                    "to_hash": o.hash,
                    "locators": i.get("locators", []),
                    "process": o.process,
                    "t": o.t,
                }
            )
    return g


def to_dot(g: Graph) -> str:
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace('"', '\\"')

    def q(s: str) -> str:
        return '"' + esc(s) + '"'

    lines = ["digraph lineage {", "  rankdir=LR;", "  node [shape=box];"]
    for n in g.nodes.values():
        label = '"' + esc(n["path"]) + "\\n" + (n["hash"] or "?")[:16] + '"'
        style = ", style=bold" if n["role"] == "output" else ""
        lines.append(f"  {n['id']} [label={label}{style}];")
    for e in g.edges:
        label = e["process"].get("name") or "?"
        where = describe(e["locators"])
        if where:
            label += f" ({where})"
        lines.append(f"  {e['from']} -> {e['to']} [label={q(label)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


PROV_NS = "urn:swfs:"


def _entity_id(path: str, hash_: str | None) -> str:
    return f"sw:file-{quote(path, safe='')}-{(hash_ or 'unknown')[:16]}"


def to_prov(g: Graph) -> dict[str, Any]:
    """W3C PROV-JSON: file versions are entities, writing processes
    activities; ``used`` and ``wasGeneratedBy`` tie them, ``wasDerivedFrom``
    says which version came from which."""
    doc: dict[str, Any] = {
        "prefix": {"sw": PROV_NS},
        "entity": {},
        "activity": {},
        "used": {},
        "wasGeneratedBy": {},
        "wasDerivedFrom": {},
    }
    for n in g.nodes.values():
        attrs: dict[str, Any] = {
            "prov:label": n["path"],
            "sw:path": n["path"],
            "sw:role": n["role"],
        }
        if n["hash"]:
            attrs["sw:hash"] = n["hash"]
        doc["entity"][_entity_id(n["path"], n["hash"])] = attrs
    ids = {n["id"]: (n["path"], n["hash"]) for n in g.nodes.values()}
    generated: set[tuple[str, str]] = set()
    used: set[tuple[str, str]] = set()
    for k, e in enumerate(g.edges, 1):
        proc = e["process"]
        act = f"sw:process-{quote(str(proc.get('key') or 'unknown'), safe='')}"
        if act not in doc["activity"]:
            doc["activity"][act] = {
                "prov:label": " ".join(proc.get("cmdline") or []) or (proc.get("name") or "?"),
                "sw:pid": proc.get("pid") or 0,
                "sw:name": proc.get("name") or "?",
            }
        out_ent = _entity_id(*ids[e["to"]])
        in_ent = _entity_id(*ids[e["from"]])
        if (act, in_ent) not in used:
            used.add((act, in_ent))
            doc["used"][f"_:u{k}"] = {"prov:activity": act, "prov:entity": in_ent}
        if (out_ent, act) not in generated:
            generated.add((out_ent, act))
            doc["wasGeneratedBy"][f"_:g{k}"] = {"prov:entity": out_ent, "prov:activity": act}
        doc["wasDerivedFrom"][f"_:d{k}"] = {
            "prov:generatedEntity": out_ent,
            "prov:usedEntity": in_ent,
            "prov:activity": act,
        }
    return {k: v for k, v in doc.items() if v}


def input_summary(
    inputs: Sequence[dict[str, Any]], exists: Callable[[str], bool] | None = None
) -> str:
    """``data/export.csv (rows 1-20000), finance/budget.xlsx (Sheet1)``: each
    path once, with how many of its versions were read when more than one
    (``log.txt (3 versions; lines 1-40)``); with ``exists``, a path that
    no longer exists is said to be gone."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for i in inputs:
        by_path.setdefault(i["path"], []).append(i)
    parts = []
    for path in sorted(by_path):
        items = by_path[path]
        notes = []
        if exists is not None and not exists(path):
            notes.append("gone")
        versions = len({i["hash"] for i in items})
        if versions > 1:
            notes.append(f"{versions} versions")
        where = describe([loc for i in items for loc in i.get("locators", [])])
        if where:
            notes.append(where)
        parts.append(f"{path} ({'; '.join(notes)})" if notes else path)
    return ", ".join(parts)


def to_text(g: Graph, outs: Sequence[Output], exists: Callable[[str], bool] | None = None) -> str:
    """One line per written version shown: ``out <- inputs``; with
    ``exists``, outputs and inputs no longer there are marked gone (a
    reset, or a change made beside the mount, removes them unseen)."""
    shown = {(n["path"], n["hash"]) for n in g.nodes.values() if n["role"] == "output"}
    lines = []
    for o in outs:
        if (o.path, o.hash) in shown:
            name = o.path if exists is None or exists(o.path) else f"{o.path} (gone)"
            lines.append(f"{name} <- {input_summary(o.inputs, exists) or '(no inputs read)'}")
    return "\n".join(lines) + ("\n" if lines else "")


_REVIEWED = re.compile(r"^(added|modified|renamed)$")


def lineage_md(
    outs: Sequence[Output],
    changed: Iterable[tuple[str, str, str | None]],
    exists: Callable[[str], bool] | None = None,
) -> str:
    """``.review/LINEAGE.md``: for each added or modified file (``changed``:
    path, status, present hash), what it was derived from (``exists``: see
    ``input_summary``)."""
    latest: dict[str, Output] = {}
    for o in outs:
        latest[o.path] = o
    lines = [
        "# Lineage of the changed files",
        "",
        "Each added or modified file, and what its present version was derived from",
        "(files the writing process and its job read before writing it).",
        "",
    ]
    body = []
    for path, status, current in changed:
        if not _REVIEWED.match(status):
            continue
        last = latest.get(path)
        if last is None:
            body.append(f"{path} <- (not written through the mount)")
        elif current is not None and last.hash is not None and last.hash != current:
            body.append(f"{path} <- (changed since it was written through the mount)")
        else:
            body.append(f"{path} <- {input_summary(last.inputs, exists) or '(no inputs read)'}")
    if not body:
        body.append("(no added or modified files)")
    return "\n".join(lines + body) + "\n"


__all__ = [
    "Graph",
    "JobReads",
    "Output",
    "build",
    "describe",
    "input_summary",
    "job_reads",
    "lineage_md",
    "outputs",
    "read_rows",
    "stored_inputs",
    "to_dot",
    "to_prov",
    "to_text",
]
