"""The review: what changed since the baseline, and the diffs that show it.

Parsed-format diffs are made from the hash-keyed parse cache only, so they
still work after the baseline bytes were overwritten behind the mount's back.
Rendered diffs are cached by (kind, baseline hash, current hash, paths).
"""

from __future__ import annotations

import datetime
import logging
import posixpath
from collections import defaultdict
from typing import Any

from parsers import cells

from . import diffs
from .api import ChangeStatus, Hash, RelPath, ReviewEntry
from .views import short_hash
from .workspace import Workspace

log = logging.getLogger(__name__)

_SPREADSHEET = ("xlsx", "spreadsheet")
_TEXT = ("text", "csv")


def changes(ws: Workspace) -> list[ReviewEntry]:
    """Added, modified, deleted and renamed paths; renames are found by hash."""
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


def summary(ws: Workspace, entries: list[ReviewEntry]) -> str:
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


def _entry_side(ws: Workspace, e: ReviewEntry) -> tuple[list[Any] | None, list[Any] | None]:
    base = ws.baseline_manifest()
    old_rel = e.old_rel or e.rel
    old = base.get(old_rel) if e.status != ChangeStatus.ADDED else None
    new = None
    if e.status != ChangeStatus.DELETED:
        rec = ws.get_record(e.rel)
        new = rec.manifest_entry() if rec else None
    return old, new


def file_diff(ws: Workspace, e: ReviewEntry) -> str:
    old, new = _entry_side(ws, e)
    old_rel = e.old_rel or e.rel
    key = "|".join(
        [
            "v1",
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
    text, complete = _render(ws, e, old, new)
    if complete:
        ws.store.put_diff(key, text)
    return text


def _units(ws: Workspace, side: list[Any] | None) -> list[tuple[str, str, str]] | None:
    if side is None or not side[5]:
        return None
    return ws.parse_units(side[0], side[5])


def _render(
    ws: Workspace, e: ReviewEntry, old: list[Any] | None, new: list[Any] | None
) -> tuple[str, bool]:
    """The diff text, and whether it is final (both sides' parses were there)."""
    old_rel = e.old_rel or e.rel
    old_hash = old[0] if old else None
    new_hash = new[0] if new else None
    max_lines = ws.config.diff_max_lines
    parser = (new or old or [None] * 6)[5]
    kind = parser.split("@", 1)[0] if parser else None
    old_units = _units(ws, old)
    new_units = _units(ws, new)
    missing = (old is not None and old_units is None) or (new is not None and new_units is None)
    if kind is None or missing:
        note = ""
        if kind is not None:
            note = "  (no parsed text for one side yet: `swfs sync`, then look again)"
        line = diffs.binary_line(
            e.rel,
            old_rel=old_rel,
            old_size=old[1] if old else None,
            new_size=new[1] if new else None,
            old_hash=old_hash,
            new_hash=new_hash,
        )
        return line.rstrip("\n") + note + "\n", kind is None
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
            old_units[0][2] if old_units else "",
            new_units[0][2] if new_units else "",
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


def all_diff(ws: Workspace, entries: list[ReviewEntry]) -> str:
    return "".join(file_diff(ws, e) for e in entries)
