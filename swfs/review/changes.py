"""The review: what changed since the baseline, and the diffs that show it.

Parsed-format diffs are made from the hash-keyed parse cache only, so they
still work after the baseline bytes were overwritten behind the mount's back.
Rendered diffs are cached by (kind, baseline hash, current hash, paths).
"""

from __future__ import annotations

import datetime
import functools
import logging
import posixpath
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from parsers import cells
from swfs import permissions
from swfs.api import Access, ChangeStatus, Hash, RelPath, ReviewEntry
from swfs.review import diffs
from swfs.store.hashform import label as short_hash
from swfs.store.records import FileRecord, Store

log = logging.getLogger(__name__)


class DiffLimits(Protocol):
    @property
    def diff_max_lines(self) -> int: ...


class Reviewed(Protocol):
    """What the review reads of a workspace (``swfs.workspace.Workspace``, a
    world, a staged layer's view of one)."""

    @property
    def store(self) -> Store: ...
    @property
    def store_dir(self) -> Path: ...
    @property
    def config(self) -> DiffLimits: ...
    def baseline_manifest(self) -> dict[str, list[Any]]: ...
    def get_record(self, rel: str) -> FileRecord | None: ...
    def parse_units(self, h: str, parser: str) -> list[tuple[str, str, str]] | None: ...


_SPREADSHEET = ("xlsx", "spreadsheet")
_TEXT = ("text", "csv")


def changes(ws: Reviewed) -> list[ReviewEntry]:
    """Added, modified, deleted and renamed paths.  A rename is found by hash
    (the same bytes under a new path) or, for a file moved and then edited,
    by the similarity of its parsed text (see ``_similar_pairs``)."""
    base = ws.baseline_manifest()
    cur = {rel: rec.manifest_entry() for rel, rec in ws.store.all_files().items()}
    added = [rel for rel in cur if rel not in base]
    deleted = [rel for rel in base if rel not in cur]
    by_hash: dict[str, list[str]] = defaultdict(list)
    for rel in deleted:
        by_hash[base[rel][0]].append(rel)
    out: list[ReviewEntry] = []
    renamed_from: set[str] = set()
    for rel in added:
        candidates = by_hash.get(cur[rel][0])
        if candidates:
            old = candidates.pop(0)
            renamed_from.add(old)
            out.append(
                ReviewEntry(
                    RelPath(rel),
                    ChangeStatus.RENAMED,
                    Hash(base[old][0]),
                    Hash(cur[rel][0]),
                    RelPath(old),
                )
            )
        else:
            out.append(ReviewEntry(RelPath(rel), ChangeStatus.ADDED, None, Hash(cur[rel][0])))
    unmatched_added: list[str] = [e.rel for e in out if e.status == ChangeStatus.ADDED]
    unmatched_deleted = [rel for rel in deleted if rel not in renamed_from]
    moved = _similar_pairs(ws, base, cur, unmatched_deleted, unmatched_added)
    if moved:
        renamed_to = {new for _, new in moved}
        out = [e for e in out if e.rel not in renamed_to]
    for old, new in moved:
        renamed_from.add(old)
        out.append(
            ReviewEntry(
                RelPath(new),
                ChangeStatus.RENAMED,
                Hash(base[old][0]),
                Hash(cur[new][0]),
                RelPath(old),
            )
        )
    for rel in deleted:
        if rel not in renamed_from:
            out.append(ReviewEntry(RelPath(rel), ChangeStatus.DELETED, Hash(base[rel][0]), None))
    for rel, entry in cur.items():
        if rel in base and base[rel][0] != entry[0]:
            out.append(
                ReviewEntry(RelPath(rel), ChangeStatus.MODIFIED, Hash(base[rel][0]), Hash(entry[0]))
            )
    out.sort(key=lambda e: e.rel)
    return out


# A deleted and an added file with the same extension whose parsed texts
# share at least this fraction of their lines are one renamed file (git's
# default rename threshold, -M50%).
RENAME_SIMILARITY = 0.5
# Bounds on the work of finding moved-and-edited files: pairs compared, and
# characters of parsed text read per file.
RENAME_MAX_PAIRS = 2500
RENAME_MAX_CHARS = 4 * 1024 * 1024
_line_counts: dict[tuple[str, str], Counter[str] | None] = {}
_scores: dict[tuple[str, str, str, str], float] = {}


def _similar_pairs(
    ws: Reviewed,
    base: dict[str, list[Any]],
    cur: dict[str, list[Any]],
    deleted: list[str],
    added: list[str],
) -> list[tuple[str, str]]:
    """(old path, new path) of deleted and added files that are one file
    moved and edited: same extension, parsed text at least
    ``RENAME_SIMILARITY`` alike (shared lines, counted with multiplicity,
    over all lines).  Best pairs first, each file in one pair at most.
    Files without parsed text (binaries, parses not there yet) are never
    paired: their bytes would have to be compared."""
    pairs = [
        (old, new)
        for old in deleted
        for new in added
        if posixpath.splitext(old)[1].lower() == posixpath.splitext(new)[1].lower()
    ]
    if not pairs or len(pairs) > RENAME_MAX_PAIRS:
        return []
    scored = []
    for old, new in pairs:
        score = _similarity(ws, base[old], cur[new])
        if score is not None and score >= RENAME_SIMILARITY:
            # Same file name breaks ties: a move keeps it more often than not.
            same_name = posixpath.basename(old) == posixpath.basename(new)
            scored.append((score, same_name, old, new))
    scored.sort(key=lambda x: (-x[0], not x[1], x[2], x[3]))
    taken: set[str] = set()
    out = []
    for _, _, old, new in scored:
        if old in taken or new in taken:
            continue
        taken.update((old, new))
        out.append((old, new))
    return out


def _similarity(ws: Reviewed, old: list[Any], new: list[Any]) -> float | None:
    """Shared lines over all lines of two versions' parsed texts, or None
    when a side has none.  Cached by the pair of hashes: the change set is
    recomputed after every write, the pairs mostly stay the same."""
    key = (old[0], old[5], new[0], new[5])
    if key in _scores:
        return _scores[key]
    a = _lines(ws, old)
    b = _lines(ws, new)
    if not a or not b:
        return None  # not cached: a parse may still come
    size_a, size_b = a.total(), b.total()
    if 2 * min(size_a, size_b) < RENAME_SIMILARITY * (size_a + size_b):
        score = 0.0  # too different in length to reach the threshold
    else:
        score = 2 * (a & b).total() / (size_a + size_b)
    if len(_scores) > 4096:
        _scores.clear()
    _scores[key] = score
    return score


def _lines(ws: Reviewed, side: list[Any]) -> Counter[str] | None:
    """The lines of a file version's parsed text, counted; cached by
    (hash, parser), which fixes the text."""
    h, parser = side[0], side[5]
    if not h or not parser:
        return None
    key = (h, parser)
    if key in _line_counts:
        return _line_counts[key]
    units = ws.parse_units(h, parser)
    if units is None:
        return None  # not parsed yet: not cached, it may be soon
    counts: Counter[str] = Counter()
    size = 0
    for _, _, text in units:
        size += len(text)
        if size > RENAME_MAX_CHARS:
            break
        counts.update(line for line in text.split("\n") if line.strip())
    result = counts if size <= RENAME_MAX_CHARS else None
    if len(_line_counts) > 256:
        _line_counts.clear()
    _line_counts[key] = result
    return result


def summary(ws: Reviewed, entries: list[ReviewEntry]) -> str:
    at = ws.store.get_meta("baseline_at")
    when = (
        datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if at
        else "never"
    )
    lines = [
        "# swfs review: changes since the baseline",
        "",
        f"Baseline recorded {when}. {len(entries)} changed path(s).",
        "Per-file diffs: `.review/<path>.diff`; everything: `.review/ALL.diff`.",
        "",
    ]
    if entries:
        lines += ["| status | path | baseline hash | current hash |", "| --- | --- | --- | --- |"]
        for e in entries:
            path = f"{e.old_rel} -> {e.rel}" if e.old_rel else e.rel
            lines.append(
                f"| {e.status.value} | {path} | {short_hash(e.baseline_hash)} | "
                f"{short_hash(e.current_hash)} |"
            )
    return "\n".join(lines) + "\n"


def _entry_side(ws: Reviewed, e: ReviewEntry) -> tuple[list[Any] | None, list[Any] | None]:
    base = ws.baseline_manifest()
    old_rel = e.old_rel or e.rel
    old = base.get(old_rel) if e.status != ChangeStatus.ADDED else None
    new = None
    if e.status != ChangeStatus.DELETED:
        rec = ws.get_record(e.rel)
        new = rec.manifest_entry() if rec else None
    return old, new


def file_diff(ws: Reviewed, e: ReviewEntry) -> str:
    old, new = _entry_side(ws, e)
    old_rel = e.old_rel or e.rel
    key = "|".join(
        [
            "v2",
            old[0] if old else "-",
            str(old[5]) if old else "-",
            new[0] if new else "-",
            str(new[5]) if new else "-",
            old_rel,
            e.rel,
        ]
    )
    cached = ws.store.get_diff(key)
    if cached is not None:
        return cached
    text, complete = render(ws, e, old, new)
    if complete:
        ws.store.put_diff(key, text)
    return text


def _units(ws: Reviewed, side: list[Any] | None) -> list[tuple[str, str, str]] | None:
    if side is None or not side[5]:
        return None
    return ws.parse_units(side[0], side[5])


def render(
    ws: Reviewed, e: ReviewEntry, old: list[Any] | None, new: list[Any] | None
) -> tuple[str, bool]:
    """The diff text, and whether it is final (both sides' parses were there)."""
    old_rel = e.old_rel or e.rel
    old_hash = old[0] if old else None
    new_hash = new[0] if new else None
    max_lines = ws.config.diff_max_lines
    parser = (new or old or [None] * 6)[5]
    kind = parser.split("@", 1)[0] if parser else None
    if old is not None and new is not None and old_hash == new_hash:
        # Moved, not changed: the header says so; there is nothing to show.
        header = diffs.diff_header(old_rel, e.rel, old_hash=old_hash, new_hash=new_hash)
        return "".join(line + "\n" for line in header), True
    old_units = _units(ws, old)
    new_units = _units(ws, new)
    missing = (old is not None and old_units is None) or (new is not None and new_units is None)
    if kind is None or missing:
        notes: list[str] = []
        final = True
        if kind is not None:
            for which, side, units in (("baseline", old, old_units), ("current", new, new_units)):
                if side is not None and units is None:
                    note, side_final = _no_text(ws, which, side)
                    notes.append(note)
                    final = final and side_final
        line = diffs.binary_line(
            e.rel,
            old_rel=old_rel,
            old_size=old[1] if old else None,
            new_size=new[1] if new else None,
            old_hash=old_hash,
            new_hash=new_hash,
        )
        return line.rstrip("\n") + "".join(f"  ({n})" for n in notes) + "\n", final
    if kind in _SPREADSHEET:
        text = diffs.spreadsheet_diff(
            e.rel,
            _sheets(old_units) if old is not None else None,
            _sheets(new_units) if new is not None else None,
            old_hash=old_hash,
            new_hash=new_hash,
            max_lines=max_lines,
            old_rel=old_rel,
        )
    elif kind == "csv" and (texts := _eol_rewrite(old_units, new_units)) is not None:
        # Say exactly what changed where the whole text is at hand (a small
        # file's content.txt); the cell-level diff could only say "no cell
        # changes".
        text = diffs.text_diff(
            old_rel, e.rel, texts[0], texts[1], old_hash=old_hash, new_hash=new_hash
        )
    elif kind == "csv" and (table := _tables(e.rel, old_units, new_units)) is not None:
        text = diffs.table_diff(
            e.rel,
            table[0] if old is not None else None,
            table[1] if new is not None else None,
            old_hash=old_hash,
            new_hash=new_hash,
            max_lines=max_lines,
            old_rel=old_rel,
        )
    elif kind in _TEXT and len(old_units or new_units or []) <= 1:
        text = diffs.text_diff(
            old_rel if old else None,
            e.rel if new else None,
            (old_units[0][2] if old_units else "") if old is not None else None,
            (new_units[0][2] if new_units else "") if new is not None else None,
            old_hash=old_hash,
            new_hash=new_hash,
            max_lines=max_lines,
        )
    else:
        text = diffs.units_diff(
            e.rel,
            [(n, t) for n, _, t in old_units] if old_units is not None else None,
            [(n, t) for n, _, t in new_units] if new_units is not None else None,
            old_hash=old_hash,
            new_hash=new_hash,
            max_lines=max_lines,
            old_rel=old_rel,
        )
    return text, True


def _eol_rewrite(
    old_units: list[tuple[str, str, str]] | None, new_units: list[tuple[str, str, str]] | None
) -> tuple[str, str] | None:
    """Both texts, when both sides are one ``content.txt`` that differ in
    line endings only."""
    if not old_units or not new_units or len(old_units) != 1 or len(new_units) != 1:
        return None
    (old_name, _, old_text), (new_name, _, new_text) = old_units[0], new_units[0]
    if old_name != "content.txt" or new_name != "content.txt":
        return None
    if diffs.line_endings_only(old_text, new_text) is None:
        return None
    return old_text, new_text


def _no_text(ws: Reviewed, which: str, side: list[Any]) -> tuple[str, bool]:
    """Why one side of a diff has no parsed text, and whether that is final
    (a failed parse stays failed for that content and parser version)."""
    h, parser = side[0], side[5]
    status = ws.store.parse_status(h, parser)
    if status is None:
        if which == "current":
            return "the current version is not parsed yet: `swfs sync`, then look again", False
        return (
            f"the baseline version ({short_hash(h)}) has no parsed text in the cache, "
            "so only sizes and hashes are compared"
        ), False
    record = ws.store.get_parse(h, parser)
    error = (record.error if record is not None else None) or status
    if status == "failed":
        return f"the {which} version could not be parsed ({parser}): {error}", True
    return f"the {which} version has no parsed text ({status}): {error}", True


def _tables(
    rel: str,
    old_units: list[tuple[str, str, str]] | None,
    new_units: list[tuple[str, str, str]] | None,
) -> tuple[diffs.Table | None, diffs.Table | None] | None:
    """Both sides of a CSV/TSV as tables, or None when a side is not one the
    csv module reads, or too big to hold as cells here (then its units are
    diffed line by line)."""
    ext = posixpath.splitext(rel)[1].lower()
    sides: list[diffs.Table | None] = []
    for units in (old_units, new_units):
        if units is None:
            sides.append(None)
            continue
        if sum(len(t) for _, _, t in units) > diffs.TABLE_MAX_CHARS:
            return None
        table = diffs.table_from_units([(n, t) for n, _, t in units], ext)
        if table is None:
            return None
        sides.append(table)
    return sides[0], sides[1]


def _sheets(units: list[tuple[str, str, str]] | None) -> list[tuple[str, str]]:
    """(sheet name, text) of the sheet units: the name from the locator, as
    the cell lines spell it, not the unit's file name."""
    out = []
    for name, locator, text in units or []:
        sheet = cells.sheet_name(name, locator)
        if sheet is not None:
            out.append((sheet, text))
    return out


def all_diff(ws: Reviewed, entries: list[ReviewEntry]) -> str:
    return "".join(file_diff(ws, e) for e in entries)


# -- who may read them (swfs.permissions)


def diff_access(ws: Reviewed, e: ReviewEntry, now: Access | None) -> Access:
    """Who may read ``e``'s diff: it shows the baseline's bytes of the file
    (``e.old_rel`` for a rename) and its present ones (``now``, the present
    access of ``e.rel``), so only who could read the file at the baseline
    and can now.  A baseline entry that kept no access is owner-only."""
    return _diff_access(ws.baseline_manifest(), e, now, ws.store_dir)


def _diff_access(
    base: dict[str, list[Any]], e: ReviewEntry, now: Access | None, store_dir: Any
) -> Access:
    if e.status == ChangeStatus.ADDED:
        return now or permissions.owner_only(store_dir)
    then = permissions.from_entry(base.get(e.old_rel or e.rel), 2)
    return permissions.then_and_now(then or permissions.owner_only(store_dir), now)


def all_access(
    ws: Reviewed, entries: list[ReviewEntry], access: Callable[[RelPath], Access | None]
) -> Access:
    """Owner and bits for SUMMARY.md and ALL.diff: the workspace root's,
    narrowed so that only those who may read every diff (``diff_access``)
    and pass through every folder above a changed path may read them."""
    root = access(RelPath("")) or permissions.owner_only(ws.store_dir, directory=True)
    out = Access(root.uid, root.gid, root.mode & 0o444)
    seen: set[str] = set()
    base = ws.baseline_manifest()
    then_dirs: dict[str, Any] = ws.store.get_meta("baseline_dir_modes") or {}
    for e in entries:
        if not out.mode:
            break  # nobody but root: nothing left to narrow
        out = permissions.narrowed(
            out, read_only(_diff_access(base, e, access(e.rel), ws.store_dir))
        )
        for rel in (e.rel, e.old_rel):
            if rel is None:
                continue
            parts = rel.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                d = "/".join(parts[:depth])
                if d in seen:
                    continue
                seen.add(d)
                acc = access(RelPath(d))
                if acc is None:  # gone: as the baseline recorded it, else owner-only
                    acc = permissions.from_entry(then_dirs.get(d), 0)
                    acc = acc or permissions.owner_only(ws.store_dir, directory=True)
                out = permissions.narrowed(out, permissions.dir_as_file(acc))
    return out


@functools.lru_cache(maxsize=4096)
def read_only(acc: Access) -> Access:
    return Access(acc.uid, acc.gid, acc.mode & 0o444)
