"""A shared tab (`--share-tab`) never shows a user's search queries to
another: `.tab/reads.md` lists a `.search/` read to the user who made it
alone, root included (the words of a query can say what its user looks
for)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.mountutil import needs_fuse, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

ROOT_QUERY = "zebra rootsearch"
USER_QUERY = "zebra userguess"


def _populate(src: Path) -> None:
    (src / "zoo.txt").write_text("A zebra and a lion.\n")


def _cat(path: Path, ids: tuple[int, int] | None = None) -> str:
    who = {} if ids is None else {"user": ids[0], "group": ids[1], "extra_groups": []}
    proc = subprocess.run(["cat", str(path)], capture_output=True, timeout=60, check=True, **who)
    return proc.stdout.decode("utf-8")


def test_a_shared_tab_shows_each_user_their_own_queries() -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    with workspace(["--share-tab"], populate=_populate) as m:
        mnt = m.mnt
        assert "zoo.txt" in _cat(mnt / ".search" / ROOT_QUERY)
        assert "zoo.txt" in _cat(mnt / ".search" / USER_QUERY, ids)
        _cat(mnt / "zoo.txt", ids)  # a read of a file both may read: shown to both
        reads = mnt / ".tab" / "reads.md"
        deadline = time.monotonic() + 60
        while "zoo.txt" not in (theirs := _cat(reads, ids)) or USER_QUERY not in theirs:
            assert time.monotonic() < deadline, theirs
            time.sleep(0.2)
        mine = _cat(reads)
        assert ROOT_QUERY in mine
        assert USER_QUERY not in mine
        assert "userguess" not in mine
        assert ROOT_QUERY not in theirs
        assert "rootsearch" not in theirs
        assert "## zoo.txt" in theirs
