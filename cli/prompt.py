"""``swfs prompt``: a short text telling an agent how to use the mount."""

from __future__ import annotations

import argparse
import sys

from .base import Commands

PROMPT = """\
This folder is an swfs workspace: a versioned filesystem mount.  Beside the
native files (read and write them as usual) there are these trees:

  .parsed/<path>/     text of every document, one file per unit:
                      page-0001.md (PDF pages), sheet-<Name>.md (spreadsheets,
                      one line per cell: `Sheet1!B12 = 1200`, formulas as
                      `Sheet1!C12 = =B12*2 -> 2400`, or `-> 2700 (computed)`
                      where the file holds no value and swfs computed it),
                      slide-001.md, section-001.md (Word, one per heading),
                      document.md,
                      content.txt.  Search with `grep -rn PATTERN .parsed/`:
                      the file name of a hit is its page/sheet/slide/section
                      (a section's header gives its heading path).
  .review/            SUMMARY.md and ALL.diff: what changed since the
                      baseline (cell-level for spreadsheets); <path>.diff each.
  .versions/<path>/   every recorded version of a file, NNNN-<hash>.<ext>
                      (not listed by `ls` of the root; open it by path).
  .search/<query>     ranked search over every unit, e.g.
                      cat ".search/regional revenue north": one hit a line,
                      path<TAB>score<TAB>freshness<TAB>snippet; words,
                      "phrases", path:folder.  Use it when grep's exact
                      words miss; open the hit's .parsed path as it is.
  .tab/               your task's tab (the only writable generated file is
                      .tab/requirements.md).  First write what the task asks,
                      one line each: echo '- [ ] Q3 revenue by region' >>
                      .tab/requirements.md.  Mark each `- [x] ... -- <file>#page=N`
                      when found or `- [-] ... -- <why>` when set aside.
                      cat .tab/TAB.md shows, per item, matching text you read
                      and files you listed but never opened (unopened.md,
                      ranked); reads.md lists what you read.  Before you
                      finish, `swfs tab check .` must exit 0.

Each .parsed file starts with a header line
  <!-- swfs source=... unit=... hash=... freshness=current|stale|pending|failed ... -->
A `stale` view describes an older version of the file; it is re-parsed in the
background after every write, and a read waits briefly for that.  Run
`swfs sync .` to wait until every view is current, or read the xattr
`user.sw.freshness` (getfattr -n user.sw.freshness FILE).  `swfs diff .`
prints the review, `swfs versions . PATH` the history, `swfs restore . PATH@N`
brings a version back.
"""


def cmd_prompt(args: argparse.Namespace) -> int:
    sys.stdout.write(PROMPT)
    return 0


def register(c: Commands) -> None:
    c.add("prompt", cmd_prompt, "a text telling an agent how to use the mount", target=None)
