"""``swfs prompt``: a short text telling an agent how to use the mount.

The text is a list of sections, each a title and a few lines, so a feature
adds its own section to ``SECTIONS`` (in the order an agent needs them) and
the whole stays short enough to paste into an agent's context.  The
introduction names the absolute path of the ``swfs`` that printed it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from .base import Commands

INTRO = """\
This folder is an swfs workspace: a versioned filesystem mount.  Read and
write the native files as usual; beside them are read-only trees, each tied
to the content hash of the file it describes.  The command line, written
`swfs` below (it may not be on your PATH), is
  {swfs}
"""

SECTIONS: list[tuple[str, str]] = [
    (
        "Parsed text: .parsed/<path>/",
        """\
One file per unit: page-0001.md (PDF pages), sheet-<Name>.md (spreadsheets,
one line per cell: `Sheet1!B12 = 1200`, formulas `Sheet1!C12 = =B12*2 -> 2400`,
`-> 2700 (computed)` where swfs computed the value), slide-001.md,
section-001.md (Word, one per heading), document.md, content.txt.  Search with
`grep -rn PATTERN .parsed/`: the file name of a hit is its page, sheet, slide
or section.  Each unit starts with one header line:
  <!-- swfs source=... unit=... locator=... hash="b3:..." freshness=... current="b3:..." -->
freshness is current (made from the file as it is now), stale (made from an
older version, or the file is being written: current="unrecorded"; re-parsed
in the background, a read waits briefly for it), pending or failed.
`swfs sync .` waits until every view is current.
""",
    ),
    (
        "When a view is missing or incomplete",
        """\
- .parsed/<path>/pending.md: not parsed yet, says how far; a long PDF lists
  its pages at once, unparsed ones say pending.  Re-read, or `swfs sync .`.
- .parsed/<path>/error.md: the parse failed; it says why (e.g. encrypted,
  damaged).  The native file is still there, byte for byte.
- No .parsed/<path>/ at all: an unsupported format (images, archives, ...).
  `getfattr -n user.sw.freshness FILE` says `unsupported`; use the file itself.
""",
    ),
    (
        "Ranked search: .search/<query>",
        """\
`cat ".search/regional revenue north"`: one hit a line (path, score,
freshness, snippet; best first) when grep's exact words miss.  Words,
"phrases", path:folder.  `swfs search . "QUERY" [--json]` prints the same.
""",
    ),
    (
        "Pictures: .render/<path>/",
        """\
PNG page-0001.png (PDF, Word, printed sheets), slide-001.png, numbered as in
.parsed; made on first open, not listed in the root; error.md says what failed.
""",
    ),
    (
        "Your task's tab: .tab/",
        """\
The one writable generated file is .tab/requirements.md.  First write what
the task asks, one line each: echo '- [ ] Q3 revenue by region' >>
.tab/requirements.md.  Mark each `- [x] ... -- <file>#page=N` when found or
`- [-] ... -- <why>` when set aside.  cat .tab/TAB.md shows, per item,
matching text you read and files you listed but never opened (unopened.md,
ranked); reads.md what you read.  `swfs tab check .` must exit 0 at the end.
""",
    ),
    (
        "Changes: .review/",
        """\
SUMMARY.md lists every path added, modified, deleted or renamed since the
baseline with both hashes; ALL.diff is the whole change set, <path>.diff one
file (cell-level for spreadsheets, per page/slide for documents).
`swfs diff . [PATH] [--json] [--exit-code]` prints the same.
""",
    ),
    (
        "Staged mounts",
        """\
Under `swfs mount --staged` (`swfs status .` says `staged: N path(s)`), your
writes reach SRC only on `swfs commit . [PATH...]` (each file whole or not at
all); `swfs staged .` and .review/STAGED.diff show them, `swfs discard .
[PATH...]` drops them.  Renaming a directory of SRC fails (EXDEV): `mv` copies.
""",
    ),
    (
        "History: .versions/ and snapshots",
        """\
.versions/<path>/NNNN-<hash16>.<ext> holds every recorded version of a file,
read-only (not listed by `ls` of the root; open it by path, `cp` it out);
.versions/@snapshots/<name>/<path> the tree as a snapshot named it.  `swfs
versions . PATH` lists a file's history; `swfs restore . PATH@N` (or
`PATH@baseline`, `PATH@SNAPSHOT`) brings that version back as a new one;
`swfs snapshot . NAME` names the present state, `swfs snapshots .` lists
them.  To hand in your work: `swfs submit . NAME [PATH...]`.
""",
    ),
    (
        "Read-only worlds",
        """\
`swfs mount --at NAME SRC MNT2` mounts the tree as at snapshot or submission
NAME (or `baseline`) read-only, .parsed/ and .review/ as of then (SUMMARY.md's
first line names it); writes there fail (EROFS): change the live mount.
""",
    ),
    (
        "Hashes",
        """\
Text shows `b3:` plus the first 16 hex digits of the blake3 hash;
.versions names and diff `index` lines show the same 16 digits bare; the
xattrs (by name: `getfattr -n user.sw.hash FILE`) and --json carry all 64.
""",
    ),
    (
        "When something looks wrong",
        """\
`swfs status .` prints counts, failures and where the store is; the
daemon's log is daemon.log in that store (SRC/.swfs/daemon.log by default,
not visible through the mount).  `swfs check .` verifies the store.
""",
    ),
]


def swfs_path() -> str:
    """The absolute path of the ``swfs`` being run (as the agent should call it)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "swfs":
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found:
            return os.path.abspath(found)
    beside = Path(sys.executable).with_name("swfs")
    if beside.is_file():
        return str(beside.absolute())
    return f"{sys.executable} -m cli"


def render(swfs: str) -> str:
    parts = [INTRO.format(swfs=swfs)]
    for title, body in SECTIONS:
        parts.append(f"\n## {title}\n{body}")
    return "".join(parts)


def cmd_prompt(args: argparse.Namespace) -> int:
    sys.stdout.write(render(swfs_path()))
    return 0


def register(c: Commands) -> None:
    c.add("prompt", cmd_prompt, "a text telling an agent how to use the mount", target=None)
