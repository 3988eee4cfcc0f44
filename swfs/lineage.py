"""Lineage: what each file written through the mount was derived from.

**The rule.**  When a file is written (its write is recorded on close, flush
or fsync), its inputs are the files read, before that moment, by processes of
the writer's job (``swfs.procinfo``: same job root and process group: one
``bash -c``, its pipelines and subshells, a script and what it runs; one
pipeline of an interactive shell), except reads by *another* process of the
job that wrote a file of its own before: those are that file's inputs (so
``cut a > t; sort t > out`` gives ``a -> t -> out``, not ``a -> out``).
Each input is the file's version (content hash) when it was read; a
``.parsed`` unit counts as a read of its source file, at the hash the unit was
made from, with the unit's locator.  A file read and rewritten in place is its
own input at its earlier hash.  A rename moves a written file's lineage to its
new name (an editor's temp-then-rename save is attributed to the final name);
a later write by the same job carries the earlier write's inputs on
(``>`` then ``>>``).

The graph: nodes are file versions (path, hash), edges go from an input to
the output it was read for, labelled with the writing process.  Exported as
JSON, Graphviz DOT and W3C PROV-JSON (entities: file versions; activities:
processes; ``used``, ``wasGeneratedBy``, ``wasDerivedFrom``).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote


def inputs_of(
    con: sqlite3.Connection, seq: int, proc: str, job: str, path: str, hash_: str | None
) -> list[dict[str, Any]]:
    """The inputs of the write stored as event ``seq`` (see the module's rule)."""
    writers = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT proc FROM events WHERE job=? AND kind='write' AND op='write' "
            "AND seq<?",
            (job, seq),
        )
    }
    writers.discard(proc)
    grouped: dict[tuple[str, str | None], dict[str, Any]] = {}
    rows = con.execute(
        "SELECT proc, source, hash, locator, detail, t FROM events "
        "WHERE job=? AND kind='read' AND seq<? ORDER BY seq",
        (job, seq),
    )
    for reader, source, h, locator, detail, t in rows:
        if not source or reader in writers:
            continue
        if source == path and h == hash_:
            continue  # read back what it wrote: no input
        item = grouped.setdefault(
            (source, h), {"path": source, "hash": h, "locators": [], "readers": [], "t": t}
        )
        loc = read_locator(locator, json.loads(detail or "{}"))
        if loc and loc not in item["locators"]:
            item["locators"].append(loc)
        if reader not in item["readers"]:
            item["readers"].append(reader)
    return list(grouped.values())


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
# ``JobReads`` holds what one job has read, grouped as ``inputs_of`` groups
# it, and is advanced by each read event the journal stores (``fold``, in the
# order of the events; ``update`` when a stored read's detail changed, its
# ranges grown or its handle closed).  ``write`` gives the write's inputs as a
# change against the job's previous output row, at a cost that follows what
# changed since then, not all the job ever read.

Key = tuple[str, str | None]


class _Reads:
    """One reader's reads of one (source, hash): seq -> (locator, t); the
    locators of its closed reads (a closed read repeating one is not kept:
    it changes nothing in the group)."""

    __slots__ = ("entries", "final")

    def __init__(self) -> None:
        self.entries: dict[int, tuple[str | None, float]] = {}
        self.final: set[str | None] = set()


class _Group:
    """The reads of one (source, hash) in a job: by the readers that count
    (``inc``) and by those that do not (``exc``: other writers of the job)."""

    __slots__ = ("inc", "exc", "item", "full", "new", "locs", "readers")

    def __init__(self) -> None:
        self.inc: dict[str, _Reads] = {}
        self.exc: dict[str, _Reads] = {}
        self.item: dict[str, Any] | None = None  # as last computed
        self.full = True  # recompute from ``inc``, else extend by ``new``
        self.new: list[tuple[int, str, str | None, float]] = []
        self.locs: set[str] = set()
        self.readers: set[str] = set()


@dataclass
class _Last:
    """The job's previous output row: its seq, the (path, hash) it left out
    (itself), and the items it carried on from an earlier write of its path."""

    seq: int
    own: Key
    carry: dict[Key, dict[str, Any]]


@dataclass
class WriteInputs:
    """What ``JobReads.write`` gives: the row's stored form and its size."""

    base: int  # the row ``delta`` applies to; 0: ``text`` is the whole list
    text: str  # JSON: the whole list, or {"set", "add", "del"} against ``base``
    count: int  # inputs in the whole list
    entries: int  # items stored (list items, or set + add + del)
    items: list[dict[str, Any]] | None  # the whole list, when asked for and built


def _key(item: dict[str, Any]) -> Key:
    return (item["path"], item["hash"])


def _order(item: dict[str, Any]) -> list[int]:
    return item.get("o") or [0, 0]  # stored by format 1: the list's own order


class JobReads:
    """One job's reads, grouped (see the section's comment)."""

    # A whole list is stored again once the changes stored since the last
    # one reach its size in characters (at least this many): reading a row
    # back reads at most about twice the last whole list, and the whole
    # lists stored add up to about twice the changes (the list grows only by
    # them): storage stays linear in what the job read and wrote.
    SNAPSHOT_MIN = 2048

    def __init__(self, job: str, base: int) -> None:
        self.job = job
        self.base = base  # the first output row this object computed
        self.upto = 0  # the last read folded in
        self.groups: dict[Key, _Group] = {}
        self.by_reader: dict[str, set[Key]] = {}
        self.writers: set[str] = set()  # procs of the job's writes so far
        self.excluded: set[str] = set()  # readers whose reads do not count now
        self.g: dict[Key, dict[str, Any]] = {}  # the groups' items that exist
        self.dirty: set[Key] = set()
        # reads whose detail may still change: seq -> (key, reader, locator)
        self.open: dict[int, tuple[Key, str, str | None]] = {}
        self.last: _Last | None = None
        self.carries: dict[int, dict[Key, dict[str, Any]]] = {}
        self.removed_at = 0  # the last write at which a group stopped counting
        self.since_snapshot = 0  # characters of changes stored since the last whole list
        self.snapshot_chars = 0  # of that whole list
        self.touched = 0.0  # time.monotonic() of its last event (the journal's)

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
        grp = self.groups.get(key)
        if grp is None:
            grp = self.groups[key] = _Group()
        side = grp.exc if reader in self.excluded else grp.inc
        reads = side.get(reader)
        if reads is None:
            reads = side[reader] = _Reads()
            self.by_reader.setdefault(reader, set()).add(key)
        elif final and loc in reads.final:
            return  # a closed read of the same place again: nothing new
        reads.entries[seq] = (loc, t)
        if final:
            reads.final.add(loc)
        else:
            self.open[seq] = (key, reader, locator)
        if side is grp.inc:
            if not grp.full:
                grp.new.append((seq, reader, loc, t))
            self.dirty.add(key)

    def update(self, seq: int, detail: str | None) -> None:
        """A read folded before was stored again with ``detail``."""
        ref = self.open.get(seq)
        if ref is None:
            return
        key, reader, locator = ref
        d = json.loads(detail or "{}")
        loc = read_locator(locator, d)
        grp = self.groups[key]
        side = grp.inc if reader in grp.inc else grp.exc
        reads = side[reader]
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
        if side is grp.inc:
            grp.full = True
            grp.new.clear()
            self.dirty.add(key)

    def _move(self, reader: str, *, exclude: bool) -> None:
        for key in self.by_reader.get(reader, ()):
            grp = self.groups[key]
            frm, to = (grp.inc, grp.exc) if exclude else (grp.exc, grp.inc)
            reads = frm.pop(reader, None)
            if reads is not None:
                to[reader] = reads
                grp.full = True
                grp.new.clear()
                self.dirty.add(key)

    # -- a write

    def _compute(self, key: Key) -> tuple[str, Any]:
        """Bring group ``key``'s item up to date; what changed: ("add",
        (locators, readers)) appended in place, or ("set", the old item)."""
        grp = self.groups[key]
        old = grp.item
        if grp.full or old is None:
            grp.full = False
            grp.new.clear()
            grp.locs = set()
            grp.readers = set()
            entries = sorted(
                (seq, reader, loc, t)
                for reader, reads in grp.inc.items()
                for seq, (loc, t) in reads.entries.items()
            )
            if not entries:
                grp.item = None
                self.g.pop(key, None)
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
                if loc and loc not in grp.locs:
                    grp.locs.add(loc)
                    item["locators"].append(loc)
                if reader not in grp.readers:
                    grp.readers.add(reader)
                    item["readers"].append(reader)
            grp.item = self.g[key] = item
            return ("set", old)
        locs: list[str] = []
        readers: list[str] = []
        for _seq, reader, loc, _t in grp.new:
            if loc and loc not in grp.locs:
                grp.locs.add(loc)
                locs.append(loc)
            if reader not in grp.readers:
                grp.readers.add(reader)
                readers.append(reader)
        grp.new.clear()
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
        carries on from); ``want_items``: build the whole list when it holds
        no more than that many inputs."""
        excluded = self.writers - {proc}
        if excluded != self.excluded:
            for reader in excluded - self.excluded:
                self._move(reader, exclude=True)
            for reader in self.excluded - excluded:
                self._move(reader, exclude=False)
            self.excluded = excluded
        changes: dict[Key, tuple[str, Any]] = {}
        for key in self.dirty:
            changes[key] = change = self._compute(key)
            if change[0] == "set" and change[1] is not None and key not in self.g:
                self.removed_at = seq
        self.dirty.clear()
        own: Key = (path, hash_)
        g = self.g
        carry: dict[Key, dict[str, Any]] = {}
        if prev is not None:
            if prev >= self.base and self.removed_at <= prev:
                # Nothing stopped counting since that write: what it carried
                # is all it had that the groups may lack now.
                for key, item in self.carries.get(prev, {}).items():
                    if key not in g and key != own:
                        carry[key] = item
            else:
                whole = stored_inputs(con, [prev], strip=False).get(prev, [])
                for n, item in enumerate(whole):
                    key = _key(item)
                    if key not in g and key != own:
                        carry[key] = {**item, "o": [1, n]}
            self.carries.pop(prev, None)
        count = len(g) - (own in g) + len(carry)
        last = self.last
        sets: list[dict[str, Any]] = []
        adds: list[list[Any]] = []
        dels: list[list[Any]] = []
        if last is not None:
            cands = set(changes) | {own, last.own} | last.carry.keys() | carry.keys()
            for key in cands:
                new = g.get(key) if key != own else None
                grouped = new is not None
                if new is None and key != own:
                    new = carry.get(key)
                ch = changes.get(key)
                was_grouped = key not in last.carry and key != last.own
                if was_grouped:
                    old = ch[1] if ch and ch[0] == "set" else g.get(key)
                else:
                    old = last.carry.get(key)
                if grouped and was_grouped and old is new:
                    if ch and ch[0] == "add" and (ch[1][0] or ch[1][1]):
                        adds.append([key[0], key[1], ch[1][0], ch[1][1]])
                elif new is None:
                    if old is not None:
                        dels.append([key[0], key[1]])
                elif old != new:
                    sets.append(_copy(new))
        entries = len(sets) + len(adds) + len(dels)
        items = None
        text = None
        if last is not None:
            delta: dict[str, Any] = {}
            if sets:
                delta["set"] = sets
            if adds:
                delta["add"] = adds
            if dels:
                delta["del"] = dels
            text = _dumps(delta)
        if text is None or self.since_snapshot + len(text) > max(
            self.snapshot_chars, self.SNAPSHOT_MIN
        ):
            items = self._whole(own, carry)
            wi = WriteInputs(0, _dumps(items), count, len(items), items)
            self.snapshot_chars = len(wi.text)
            self.since_snapshot = 0
        else:
            assert last is not None
            self.since_snapshot += len(text)
            if want_items and count <= want_items:
                items = self._whole(own, carry)
            wi = WriteInputs(last.seq, text, count, entries, items)
        self.last = _Last(seq, own, carry)
        if carry:
            self.carries[seq] = carry
        self.writers.add(proc)
        return wi

    def _whole(self, own: Key, carry: dict[Key, dict[str, Any]]) -> list[dict[str, Any]]:
        items = [_copy(i) for k, i in self.g.items() if k != own]
        items.sort(key=_order)
        return items + sorted((_copy(i) for i in carry.values()), key=_order)

    def forget_before(self, seq: int) -> None:
        """Output rows up to ``seq`` were deleted: the next row is whole."""
        if self.last is not None and self.last.seq <= seq:
            self.last = None
        for s in [s for s in self.carries if s <= seq]:
            del self.carries[s]


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
    acc = JobReads(job, seq)
    acc.writers = {
        r[0]
        for r in con.execute(
            "SELECT DISTINCT proc FROM events WHERE job=? AND kind='write' AND op='write' "
            "AND seq<?",
            (job, seq),
        )
    }
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


def has_base(con: sqlite3.Connection) -> bool:
    """Whether ``outputs`` has the ``base`` column (format 2 on)."""
    return any(r[1] == "base" for r in con.execute("PRAGMA table_info(outputs)"))


def _apply(state: dict[Key, dict[str, Any]], delta: dict[str, Any]) -> None:
    for path, h in delta.get("del", ()):
        state.pop((path, h), None)
    for item in delta.get("set", ()):
        state[_key(item)] = item
    for path, h, locs, readers in delta.get("add", ()):
        item = state.get((path, h))
        if item is not None:
            state[(path, h)] = {
                **item,
                "locators": item.get("locators", []) + locs,
                "readers": item.get("readers", []) + readers,
            }


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


def stored_inputs(
    con: sqlite3.Connection,
    seqs: Iterable[int],
    *,
    bases: dict[int, int] | None = None,
    strip: bool = True,
) -> dict[int, list[dict[str, Any]]]:
    """The whole input lists of output rows ``seqs`` (a row stores its list,
    or its changes against the job's previous row: see ``swfs.journal``);
    ``bases``: seq -> base of every row, when already read."""
    wanted = set(seqs)
    if not wanted:
        return {}
    with _one_read(con):
        return _stored_inputs(con, wanted, bases, strip)


def _stored_inputs(
    con: sqlite3.Connection, wanted: set[int], bases: dict[int, int] | None, strip: bool
) -> dict[int, list[dict[str, Any]]]:
    newer = has_base(con)
    need: set[int] = set()
    for s in sorted(wanted, reverse=True):
        while s and s not in need:
            need.add(s)
            if not newer:
                break
            if bases is not None:
                b = bases.get(s, 0)
            else:
                row = con.execute("SELECT base FROM outputs WHERE seq=?", (s,)).fetchone()
                b = row[0] if row is not None else 0
            s = b or 0
    ordered = sorted(need)
    states: dict[int, dict[Key, dict[str, Any]]] = {}
    out: dict[int, list[dict[str, Any]]] = {}
    col = "base" if newer else "0"
    for i in range(0, len(ordered), 500):
        chunk = ordered[i : i + 500]
        rows = con.execute(
            f"SELECT seq, {col}, inputs FROM outputs WHERE seq IN ({','.join('?' * len(chunk))}) "
            "ORDER BY seq",
            chunk,
        )
        for seq, base, text in rows:
            data = json.loads(text or "[]")
            if not base or isinstance(data, list):
                state = {_key(i): i for i in data}
            else:
                state = states.pop(base) if base in states else {}
                _apply(state, data)
            states[seq] = state
            if seq in wanted:
                items = sorted(state.values(), key=_order)
                if strip:
                    items = [{k: v for k, v in i.items() if k != "o"} for i in items]
                else:
                    items = list(items)
                out[seq] = items
    return out


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
    bases = dict(con.execute("SELECT seq, base FROM outputs")) if has_base(con) else None
    rows = con.execute(
        "SELECT o.seq, o.t, o.path, o.hash, o.proc, p.pid, p.name, p.cmdline, o.job "
        "FROM outputs o LEFT JOIN procs p ON p.key = o.proc "
        "WHERE o.superseded=0 AND o.gone=0 ORDER BY o.seq"
    ).fetchall()
    lists = stored_inputs(con, [r[0] for r in rows], bases=bases)
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


def input_summary(inputs: Sequence[dict[str, Any]]) -> str:
    """``data/export.csv (rows 1-20000), finance/budget.xlsx (Sheet1)``."""
    parts = []
    for i in sorted(inputs, key=lambda i: i["path"]):
        where = describe(i.get("locators", []))
        parts.append(f"{i['path']} ({where})" if where else i["path"])
    return ", ".join(parts)


def to_text(g: Graph, outs: Sequence[Output]) -> str:
    shown = {(n["path"], n["hash"]) for n in g.nodes.values() if n["role"] == "output"}
    lines = []
    for o in outs:
        if (o.path, o.hash) in shown:
            lines.append(f"{o.path} <- {input_summary(o.inputs) or '(no inputs read)'}")
    return "\n".join(lines) + ("\n" if lines else "")


_REVIEWED = re.compile(r"^(added|modified|renamed)$")


def lineage_md(outs: Sequence[Output], changed: Iterable[tuple[str, str, str | None]]) -> str:
    """``.review/LINEAGE.md``: for each added or modified file (``changed``:
    path, status, present hash), what it was derived from."""
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
            body.append(f"{path} <- {input_summary(last.inputs) or '(no inputs read)'}")
    if not body:
        body.append("(no added or modified files)")
    return "\n".join(lines + body) + "\n"


__all__ = [
    "Graph",
    "Output",
    "build",
    "describe",
    "inputs_of",
    "input_summary",
    "lineage_md",
    "outputs",
    "to_dot",
    "to_prov",
    "to_text",
]
