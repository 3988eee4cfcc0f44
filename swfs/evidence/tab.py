"""The tab: a per-task record an agent keeps with the workspace.

The agent writes what the task asks for into ``requirements.md``, one line
each (``- [ ] Q3 revenue by region``), and marks each resolved
(``- [x] ... -- reports/annual_2025.pdf#page=17``) or set aside
(``- [-] ... -- not in the workspace``).  Everything else is derived from the
access journal (``swfs.evidence.access``) over the tab's time window and ranked with
the search index (``swfs.find.search``, BM25 over units):

``reads``     every read in the tab, in order, with its locator, process and
              an excerpt;
``unopened``  files a listing returned that nothing opened, best match to
              the open requirements first;
``TAB.md``    each requirement with its state, the best excerpts from what
              was read, and the best unopened candidates.

Stored in ``STORE/tab/`` (directory 0700, files 0600), so the tab works
without a mount:

``tab.json``          the current tab: {"started": unix time}
``requirements.md``   its requirements, exactly the bytes written
``old/<NAME>/``       an earlier tab: the same two files, tab.json with "ended"

An excerpt is shown only to a caller who may read its source file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swfs.api import Access, RelPath, ViewsAPI
from swfs.find.search import MAX_LIMIT, AccessCheck, Caller, Hit, SearchResult
from swfs.history import names
from swfs.store.fsutil import save_file
from swfs.store.sqlitetext import escaped, unescaped

log = logging.getLogger(__name__)

TAB_DIR = "tab"
REQUIREMENTS = "requirements.md"
META = "tab.json"
OLD = "old"
MAX_REQUIREMENTS_BYTES = 1024 * 1024
EXCERPT_LINES = 3
EXCERPT_CHARS = 240
TOP_EVIDENCE = 3
TOP_CANDIDATES = 5
NAME_MAX = 255

# Words too common to rank by: a requirement is a short phrase, and "of the"
# would match every unit.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "over",
        "per",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "with",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)
WITHHELD = "(withheld)"
_CITE = re.compile(r"[^\s,;()]+")

STATES = {" ": "open", "x": "resolved", "X": "resolved", "-": "set aside"}
_ITEM = re.compile(r"^\s*[-*+]\s+\[([ xX-])\]\s+(.*?)\s*$")


class TabError(Exception):
    """A tab operation that cannot be done; the message says why in one line."""


@dataclass(frozen=True)
class Requirement:
    line: int  # 1-based line in requirements.md
    state: str  # open | resolved | set aside
    text: str
    note: str = ""  # what follows ' -- ': the evidence, or why it was set aside

    @property
    def open(self) -> bool:
        return self.state == "open"

    def as_json(self) -> dict[str, Any]:
        return {"line": self.line, "state": self.state, "text": self.text, "note": self.note}


def parse_requirements(data: bytes) -> list[Requirement]:
    """The checklist items of ``requirements.md``; other lines are ignored."""
    out = []
    text = data.decode("utf-8", "replace")
    for n, line in enumerate(text.splitlines(), 1):
        m = _ITEM.match(line)
        if m is None:
            continue
        body, _, note = m.group(2).partition(" -- ")
        if not body.strip():
            continue
        out.append(Requirement(n, STATES[m.group(1)], body.strip(), note.strip()))
    return out


def requirement_query(text: str) -> str:
    """The search query for a requirement: its words but the commonest ones
    (all of them if that leaves none)."""
    words = _WORD.findall(text)
    kept = [w for w in words if w.lower() not in STOPWORDS]
    return " ".join(kept or words)


# -- storage


@dataclass(frozen=True)
class TabInfo:
    name: str  # "" for the current tab
    started: float
    ended: float | None
    directory: Path

    def requirements(self) -> bytes:
        try:
            return (self.directory / REQUIREMENTS).read_bytes()
        except FileNotFoundError:
            return b""


def _valid_name(name: str) -> str:
    bad = names.problem(name, "tab")
    if bad is not None:
        raise TabError(bad)
    if name in (".", "..") or "/" in name:
        raise TabError(f"{name!r}: a tab name is one path component (no '/')")
    if len(name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise TabError(f"{name[:40]}...: a tab name has at most {NAME_MAX} bytes")
    return name


class TabStore:
    """The tabs of one workspace, in ``STORE/tab/``."""

    def __init__(self, store_dir: Path) -> None:
        self.dir = Path(store_dir) / TAB_DIR

    def _meta(self, directory: Path) -> dict[str, Any]:
        try:
            value = json.loads((directory / META).read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TabError(f"{directory / META}: cannot read the tab: {exc}") from None
        return value if isinstance(value, dict) else {}

    def _ensure(self) -> None:
        if (self.dir / META).exists():
            return
        old = os.umask(0o077)
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        finally:
            os.umask(old)
        save_file(self.dir / META, json.dumps({"started": time.time()}).encode())

    def current(self) -> TabInfo:
        """The current tab (started now if there was none)."""
        self._ensure()
        meta = self._meta(self.dir)
        return TabInfo("", float(meta.get("started", 0.0)), None, self.dir)

    def peek(self) -> TabInfo | None:
        """The current tab, or None if none was ever started (nothing written)."""
        if not (self.dir / META).exists():
            return None
        return self.current()

    def old(self) -> list[TabInfo]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for d in (self.dir / OLD).iterdir():
                meta = self._meta(d)
                out.append(TabInfo(d.name, float(meta.get("started", 0.0)), meta.get("ended"), d))
        return sorted(out, key=lambda t: (t.started, t.name))

    def get_old(self, name: str) -> TabInfo | None:
        for t in self.old():
            if t.name == name:
                return t
        return None

    def requirements(self) -> bytes:
        return self.current().requirements()

    def save_requirements(self, data: bytes) -> None:
        if len(data) > MAX_REQUIREMENTS_BYTES:
            raise TabError(f"{REQUIREMENTS}: at most {MAX_REQUIREMENTS_BYTES} bytes")
        self._ensure()
        save_file(self.dir / REQUIREMENTS, data)

    def new(self, name: str | None = None) -> tuple[str, TabInfo]:
        """Start an empty tab, called ``name`` if given, and keep the current
        one as ``old/<its name>`` (the name it was started with, else its
        start time); returns that name and the new tab."""
        cur = self.current()
        meta = self._meta(self.dir)
        if name is not None:
            _valid_name(name)
            if name == meta.get("name") or (self.dir / OLD / name).exists():
                raise TabError(f"{name}: a tab has that name already")
        kept = str(meta.get("name") or "") or time.strftime(
            "%Y-%m-%dT%H-%M-%S", time.gmtime(cur.started or time.time())
        )
        base, k = kept, 2
        while (self.dir / OLD / kept).exists():
            kept, k = f"{base}-{k}", k + 1
        now = time.time()
        (self.dir / OLD).mkdir(mode=0o700, exist_ok=True)
        dest = self.dir / OLD / kept
        dest.mkdir(mode=0o700)
        save_file(dest / REQUIREMENTS, cur.requirements())
        save_file(dest / META, json.dumps({"started": cur.started, "ended": now}).encode())
        save_file(self.dir / REQUIREMENTS, b"")
        fresh: dict[str, object] = {"started": now}
        if name is not None:
            fresh["name"] = name
        save_file(self.dir / META, json.dumps(fresh).encode())
        return kept, self.current()


# -- the report


@dataclass(frozen=True)
class Read:
    seq: int
    t: float
    path: str  # in the mount
    locator: str  # x.pdf#page=17, notes.txt#lines=3-9, or the path
    source: str  # the native file it shows ('' for .search/, .review/)
    process: str  # name[pid]
    excerpt: str

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "t": self.t,
            "path": self.path,
            "locator": self.locator,
            "source": escaped(self.source),
            "process": self.process,
            "excerpt": self.excerpt,
        }


@dataclass(frozen=True)
class Candidate:
    rel: str
    score: float
    unit: str = ""
    locator: str = ""
    snippet: str = ""
    requirement: str = ""  # the open requirement it matches best

    def as_json(self) -> dict[str, Any]:
        return {
            "path": escaped(self.rel),
            "score": float(f"{self.score:.6g}"),
            "locator": self.locator,
            "snippet": self.snippet,
            "requirement": self.requirement,
        }


@dataclass
class Report:
    name: str
    started: float
    ended: float | None
    requirements_bytes: bytes
    requirements: list[Requirement]
    reads: list[Read] = field(default_factory=list)
    unopened: list[Candidate] = field(default_factory=list)
    evidence: dict[int, list[Hit]] = field(default_factory=dict)  # by requirement line
    candidates: dict[int, list[Candidate]] = field(default_factory=dict)
    # A resolved requirement's cited locators: whether each was read in this tab.
    cited: dict[int, list[tuple[str, bool | None]]] = field(default_factory=dict)
    note: str = ""  # e.g. recording is off
    read_count: int = 0  # of the tab's reads (``reads`` holds none without ``keep_reads``)

    @property
    def open(self) -> list[Requirement]:
        return [r for r in self.requirements if r.open]

    def reads_md(self) -> bytes:
        head = f"# Reads in this tab ({len(self.reads)}), oldest first: locator, process, excerpt\n"
        if self.note:
            head += f"# {self.note}\n"
        parts = [head]
        for r in self.reads:
            parts.append(f"\n## {r.locator}\nby {r.process} at {_iso(r.t)}\n")
            if r.excerpt:
                parts.append("".join(f"> {line}\n" for line in r.excerpt.splitlines()))
        return "".join(parts).encode("utf-8", "replace")

    def unopened_md(self) -> bytes:
        n_open = len(self.open)
        head = (
            f"# Listed but never opened in this tab ({len(self.unopened)}), ranked against "
            f"the {n_open} open requirement{'' if n_open == 1 else 's'}\n"
        )
        if self.note:
            head += f"# {self.note}\n"
        parts = [head]
        for c in self.unopened:
            if c.score > 0:
                parts.append(f"\n- {escaped(c.rel)}  (score {c.score:.3g}, for: {c.requirement})\n")
                parts.append(f"  {c.locator}: {c.snippet}\n")
            else:
                parts.append(f"\n- {escaped(c.rel)}  (matches no open requirement)\n")
        return "".join(parts).encode("utf-8", "replace")

    def tab_md(self) -> bytes:
        n_open = len(self.open)
        title = f"tab {self.name}" if self.name else "the current tab"
        parts = [
            f"# {title}: {len(self.requirements)} requirements, {n_open} open, "
            f"{self.read_count} reads, {len(self.unopened)} listed but unopened\n",
            "# edit requirements.md: `- [ ] what`, `- [x] what -- where`, "
            "`- [-] what -- why`; `swfs tab check` fails while one is open\n",
        ]
        if self.note:
            parts.append(f"# {self.note}\n")
        if not self.requirements:
            parts.append("\nNo requirements yet: append them to requirements.md.\n")
        for r in self.requirements:
            mark = {"open": " ", "resolved": "x", "set aside": "-"}[r.state]
            parts.append(f"\n## [{mark}] {r.text}\n{r.state}")
            parts.append(f" -- {r.note}\n" if r.note else "\n")
            for loc, seen in self.cited.get(r.line, []):
                said = (
                    "no such file in the workspace"
                    if seen is None
                    else "read in this tab"
                    if seen
                    else "NOT read in this tab"
                )
                parts.append(f"cited {loc}: {said}\n")
            ev = self.evidence.get(r.line, [])
            if ev:
                parts.append("read:\n")
                parts += [f"  - {h.locator}: {h.snippet}\n" for h in ev]
            cands = self.candidates.get(r.line, [])
            if cands and r.open:
                parts.append("not opened yet:\n")
                parts += [f"  - {c.locator}: {c.snippet}\n" for c in cands]
            if r.open and not ev and not cands:
                parts.append("nothing read or listed matches it yet\n")
        return "".join(parts).encode("utf-8", "replace")

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "started": self.started,
            "ended": self.ended,
            "note": self.note,
            "requirements": [
                {
                    **r.as_json(),
                    "evidence": [h.as_json() for h in self.evidence.get(r.line, [])],
                    "candidates": [c.as_json() for c in self.candidates.get(r.line, [])],
                    "cited": [
                        {"locator": loc, "read": seen} for loc, seen in self.cited.get(r.line, [])
                    ],
                }
                for r in self.requirements
            ],
            "open": [r.text for r in self.open],
            "reads": [r.as_json() for r in self.reads],
            "unopened": [c.as_json() for c in self.unopened],
        }


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _unit_locator(path: str, ev: dict[str, Any]) -> str:
    if ev.get("locator"):
        return str(ev["locator"])
    return path


class Builder:
    """Builds a tab's report from journal events for one caller.

    ``ws``: ``store.get_file(rel)`` (and ``access(rel)`` unless ``access``
    is given: the engine's ``evidence.access``); ``views``: the engine's
    views part (``parsed_view(rel)``); ``search``: the search index's query
    function."""

    def __init__(
        self,
        ws: Any,
        search: Callable[[str, Caller, int], SearchResult] | None,
        caller: Caller,
        *,
        views: ViewsAPI,
        access: Callable[[RelPath], Access | None] | None = None,
        excerpts: bool = True,
        keep_reads: bool = True,
    ) -> None:
        """Without ``excerpts`` reads get none (TAB.md and unopened.md show
        none); without ``keep_reads`` they are not kept, only what those two
        need of them (a long tab has hundreds of thousands)."""
        self.ws, self.views, self.search, self.caller = ws, views, search, caller
        self.check = AccessCheck(access or ws.access, caller)
        self._views: dict[str, Any] = {}  # one view per file for the whole build
        # A long tab reads the same files and units many times over (a
        # ``grep -r`` per question): each answer once per build.
        self._files: dict[str, bool] = {}
        self._excerpts: dict[tuple[str, str], str] = {}
        self.excerpts, self.keep_reads = excerpts, keep_reads
        # What ``fold`` gathered.
        self.last_seq = 0
        self._reads: list[Read] = []
        self._read_count = 0
        self._locators: set[str] = set()
        self._sources: set[str] = set()
        self._native: set[str] = set()
        self._listed_rels: dict[str, None] = {}
        self._touched: set[str] = set()
        self._read_units: set[tuple[str, str]] = set()  # (rel, unit name)
        self._read_files: set[str] = set()

    def may_read(self, rel: str) -> bool:
        return bool(rel) and self.check.may_read(rel)

    def _own(self, ev: dict[str, Any]) -> bool:
        """Whether the caller made this event (by the uid of its process)."""
        uid = (ev.get("process") or {}).get("uid")
        return uid is not None and int(uid) == self.caller.uid

    def _is_file(self, rel: str) -> bool:
        known = self._files.get(rel)
        if known is None:
            store = getattr(self.ws, "store", None)
            known = store is not None and store.get_file_hash(rel) is not None
            self._files[rel] = known
        return known

    def build(self, tab: TabInfo, events: Iterable[dict[str, Any]], *, note: str = "") -> Report:
        """The tab's report of ``events``."""
        self.fold(events)
        return self.finish(tab, note=note)

    def fold(self, events: Iterable[dict[str, Any]]) -> None:
        """Take in the tab's events, oldest first, in one call or several
        (later events after earlier ones).  What the builder learns of the
        workspace (which paths are files, views, excerpts) it keeps: fold
        more into one builder only while the workspace has not changed."""
        listed, touched = self._listed_rels, self._touched
        for ev in events:
            self.last_seq = max(self.last_seq, int(ev["seq"]))
            path = str(ev["path"])
            if path == ".tab" or path.startswith(".tab/"):
                continue
            kind = ev["kind"]
            if kind == "list":
                for rel in self._listed(path, ev.get("names", [])):
                    listed.setdefault(rel, None)
            elif kind == "write":
                touched.add(self._real(path))
                if ev.get("from"):
                    touched.add(self._real(str(ev["from"])))
            elif kind == "read":
                if (path == ".search" or path.startswith(".search/")) and not self._own(ev):
                    continue  # another user's query (a shared tab): theirs alone
                source = self._real(str(ev.get("source", path if not path.startswith(".") else "")))
                if source:
                    touched.add(source)
                    if path.startswith(".parsed/"):
                        self._read_units.add((source, path.rpartition("/")[2]))
                    else:
                        self._read_files.add(source)
                r = self._read(ev, path, source)
                self._read_count += 1
                self._locators.add(r.locator)
                if r.source:
                    self._sources.add(r.source)
                    if r.source == r.path:
                        self._native.add(r.source)
                if self.keep_reads:
                    self._reads.append(r)

    def finish(self, tab: TabInfo, *, note: str = "") -> Report:
        """The report of what was folded in, against the tab's requirements
        and the search index as they are now."""
        data = tab.requirements()
        rep = Report(tab.name, tab.started, tab.ended, data, parse_requirements(data), note=note)
        rep.reads = list(self._reads)
        rep.read_count = self._read_count
        # Only files this reader could open are candidates (and named).
        unopened = [
            rel for rel in self._listed_rels if rel not in self._touched and self.may_read(rel)
        ]
        self._rank(rep, unopened, self._read_units, self._read_files)
        self._cite(rep)
        return rep

    def _cite(self, rep: Report) -> None:
        """Each locator a resolved requirement cites (``x.pdf#page=17``, a
        path), and whether it was read in this tab: the unit itself, or its
        file read whole or in part."""
        locators, sources, native = self._locators, self._sources, self._native
        for r in rep.requirements:
            if r.state != "resolved":
                continue
            cited = []
            for word in _CITE.findall(r.note):
                word = word.rstrip(".,;:)")
                rel, _, frag = word.partition("#")
                exists = self._is_file(rel)
                if not exists and not (frag and rel) and "/" not in rel:
                    continue  # prose, not a path
                # The unit itself; else the file read natively (a document's
                # bytes stand for all its units).
                seen = word in locators or rel in native or (not frag and rel in sources)
                cited.append((word, seen if exists else None))
            if cited:
                rep.cited[r.line] = cited

    def _listed(self, path: str, names: Iterable[str]) -> Iterable[str]:
        if path == ".parsed" or path.startswith(".parsed/"):
            base = path[len(".parsed/") :] if path != ".parsed" else ""
        elif path.startswith("."):
            return
        else:
            base = path
        for n in names:
            rel = self._real(f"{base}/{n}" if base else n)
            if self._is_file(rel):
                yield rel

    def _real(self, rel: str) -> str:
        """The workspace's name for a path as the journal stores it: a name
        that is not UTF-8 is stored ``escaped`` (``caf\\xe9.txt``); search
        hits, the store and access checks use the name itself."""
        if "\\x" not in rel:
            return rel
        real = unescaped(rel)
        return real if real != rel and self._is_file(real) else rel

    def _read(self, ev: dict[str, Any], path: str, source: str) -> Read:
        proc = ev.get("process") or {}
        who = f"{proc.get('name') or '?'}[{proc.get('pid') or '?'}]"
        locator = _unit_locator(path, ev)
        excerpt = ""
        named = source
        if not named and path.startswith(".review/") and path.endswith(".diff"):
            named = path[len(".review/") : -len(".diff")]  # a file's diff names the file
            named = "" if named == "ALL" else named
        if named and not self.may_read(named):
            # Neither its text nor its name: the reader could not see either.
            excerpt = "(withheld: a file you may not read)"
            locator, path, source = WITHHELD, WITHHELD, WITHHELD
        elif not self.excerpts:
            if source and source == path:
                locator = _native_locator(source, ev)
            return Read(int(ev["seq"]), float(ev["t"]), path, locator, source, who, "")
        elif path.startswith(".parsed/") and source:
            excerpt = self._unit_excerpt(source, path.rpartition("/")[2])
        elif source and source == path:
            excerpt, locator = self._native_excerpt(source, ev)
        elif path.startswith(".versions/"):
            excerpt = f"an earlier version; {ev.get('bytes', 0)} bytes read"
        if not excerpt and not ev.get("bytes") and not ev.get("open"):
            excerpt = excerpt or "(opened; the bytes came from the kernel's cache, if read)"
        return Read(int(ev["seq"]), float(ev["t"]), path, locator, source, who, excerpt)

    def _view(self, rel: str) -> Any:
        if rel in self._views:
            return self._views[rel]
        try:
            view = self.views.parsed_view(RelPath(rel))
        except Exception:  # a view that cannot be built shows no excerpt
            log.warning("tab: no excerpt of %s", rel, exc_info=True)
            view = None
        self._views[rel] = view
        return view

    def _once(self, key: tuple[str, str], make: Callable[[], str]) -> str:
        got = self._excerpts.get(key)
        if got is None:
            got = self._excerpts[key] = make()
        return got

    def _unit_excerpt(self, rel: str, unit: str) -> str:
        return self._once((rel, unit), lambda: self._unit_excerpt_now(rel, unit))

    def _unit_excerpt_now(self, rel: str, unit: str) -> str:
        view = self._view(rel)
        if view is None:
            return ""
        for u in view.units:
            if u.name == unit:
                lines: list[str] = []
                # The header first; only as many lines as the excerpt shows.
                for ln in u.content.decode("utf-8", "replace").splitlines()[1:]:
                    if ln.strip():
                        lines.append(ln)
                        if len(lines) == EXCERPT_LINES:
                            break
                return _cut("\n".join(lines))
        return ""

    def _native_excerpt(self, rel: str, ev: dict[str, Any]) -> tuple[str, str]:
        n = int(ev.get("bytes", 0))
        if n == 0:
            return "(opened; the bytes came from the kernel's cache, if read)", rel
        lines = ev.get("lines")
        if lines:
            first, last = int(lines[0]), int(lines[1])
            loc = _native_locator(rel, ev)
            return self._once((rel, loc), lambda: self._lines_excerpt(rel, first, last)), loc
        view = self._view(rel)
        rec = self.ws.store.get_file(rel) if getattr(self.ws, "store", None) else None
        size = getattr(rec, "size", None)
        units = list(view.units) if view is not None else []
        ranges = ev.get("ranges") or []
        whole = bool(ranges) and size is not None and _covers(ranges, int(size))
        if whole and units:
            names = ", ".join(u.locator.rpartition("#")[2] for u in units[:12])
            more = f", ... ({len(units)} in all)" if len(units) > 12 else ""
            return f"the whole file ({n} bytes): {names}{more}", rel
        return f"{n} bytes read", rel

    def _lines_excerpt(self, rel: str, first: int, last: int) -> str:
        view = self._view(rel)
        for u in view.units if view is not None else ():
            text = u.content.decode("utf-8", "replace").splitlines()[1:]
            shown = [ln for ln in text[first - 1 : last] if ln.strip()][:EXCERPT_LINES]
            return _cut("\n".join(shown))
        return f"lines {first}-{last}"

    def _rank(
        self,
        rep: Report,
        unopened: list[str],
        read_units: set[tuple[str, str]],
        read_files: set[str],
    ) -> None:
        best: dict[str, Candidate] = {}
        pending = set(unopened)
        for r in rep.requirements:
            if self.search is None:
                break
            query = requirement_query(r.text)
            if not query:
                continue
            result = self.search(query, self.caller, MAX_LIMIT)
            if result.error is not None:
                continue
            ev: list[Hit] = []
            cands: list[Candidate] = []
            for h in result.hits:
                if (h.rel, h.unit) in read_units or h.rel in read_files:
                    ev.append(h)
                elif r.open and h.rel in pending:
                    c = Candidate(h.rel, h.score, h.unit, h.locator, h.snippet, r.text)
                    if len(cands) < TOP_CANDIDATES and all(x.rel != h.rel for x in cands):
                        cands.append(c)
                    if h.rel not in best or best[h.rel].score < h.score:
                        best[h.rel] = c
            # The sources the agent read before its own outputs (which hold
            # the same words, copied), each group in rank order.
            ev.sort(key=lambda h: h.rel in self._touched)
            rep.evidence[r.line] = ev[:TOP_EVIDENCE]
            rep.candidates[r.line] = cands
        rep.unopened = sorted(
            (best.get(rel) or Candidate(rel, 0.0) for rel in unopened),
            key=lambda c: (-c.score, c.rel),
        )


def _native_locator(rel: str, ev: dict[str, Any]) -> str:
    """A native file's read: ``rel#lines=a-b`` when it read lines, else ``rel``."""
    lines = ev.get("lines")
    if not lines or not ev.get("bytes"):
        return rel
    return f"{rel}#lines={int(lines[0])}-{int(lines[1])}"


def _covers(ranges: list[list[int]], size: int) -> bool:
    """True when the byte ``ranges`` cover [0, size)."""
    at = 0
    for s, e in sorted(ranges):
        if s > at:
            return False
        at = max(at, e)
    return at >= size


def _cut(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."
