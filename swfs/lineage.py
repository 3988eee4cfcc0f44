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
from collections.abc import Iterable, Sequence
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
        loc = _read_locator(locator, json.loads(detail or "{}"))
        if loc and loc not in item["locators"]:
            item["locators"].append(loc)
        if reader not in item["readers"]:
            item["readers"].append(reader)
    return list(grouped.values())


def _read_locator(locator: str | None, detail: dict[str, Any]) -> str | None:
    if locator:
        return locator.partition("#")[2] or locator
    if detail.get("lines"):
        a, b = detail["lines"]
        return f"lines={a}-{b}"
    ranges = detail.get("ranges") or []
    if ranges:
        return "bytes=" + ",".join(f"{s}-{e - 1}" for s, e in ranges)
    return None


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
    rows = con.execute(
        "SELECT o.seq, o.t, o.path, o.hash, o.inputs, o.proc, p.pid, p.name, p.cmdline, o.job "
        "FROM outputs o LEFT JOIN procs p ON p.key = o.proc "
        "WHERE o.superseded=0 AND o.gone=0 ORDER BY o.seq"
    )
    return [
        Output(seq, t, path, h, _process(rest), json.loads(inputs))
        for seq, t, path, h, inputs, *rest in rows
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
