"""What a warm walk costs in FUSE requests, counted by the daemon.

With a pyfuse3 that lets directories open without OPENDIR
(vendor/pyfuse3, ``no_opendir_available``):

* a warm walk of the native tree sends no OPENDIR, RELEASEDIR, READDIR or
  LOOKUP at all: the kernel keeps every listing (mountd.dirlist);
* a warm listing of a file's directory in ``.parsed``, or of a folder of
  ``.parsed``, sends no READDIR either, while a folder of ``.versions`` is
  listed afresh each time;
* a listing is still evidence: the journal records the first one, by the
  process that made it, and a listing after a change behind the mount
  shows the change and is recorded again, as is the first listing in a
  new tab;
* a file created through the mount shows in the next listing;
* a parse that ends (a change event for the file, not for its bytes) does
  not make the kernel ask again for the file's attributes, while the
  listing of its ``.parsed`` directory turns from pending.md to its units.

The counts come from the daemon's SIGUSR1 dump (``mountd.reqcount``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mountd import binding, reqcount
from mountd.dump import MARK
from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]

needs_no_opendir = pytest.mark.skipif(
    not binding.NO_OPENDIR,
    reason="pyfuse3 built without vendor/pyfuse3's no-OPENDIR support",
)

WALK_IDLE = ("opendir", "releasedir", "readdir", "lookup")


def _poll(cond: Callable[[], bool], what: str, limit: float = 90.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _counts(m: Mount) -> dict[str, int]:
    """The daemon's request counts now (a SIGUSR1 dump, read from its log)."""
    ends = m.log().count(f"end of {MARK}")
    os.kill(m.proc.pid, signal.SIGUSR1)
    _poll(lambda: m.log().count(f"end of {MARK}") > ends, "the request dump")
    counts = reqcount.parse(m.log())
    assert counts, m.log()[-2000:]
    return counts


def _released(m: Mount) -> dict[str, int]:
    """The request counts once every OPEN and CREATE has been answered by its
    RELEASE (the kernel sends RELEASE in the background)."""
    seen: list[dict[str, int]] = []

    def paired() -> bool:
        seen.append(c := _counts(m))
        return c.get("open", 0) + c.get("create", 0) == c.get("release", 0)

    _poll(paired, "a RELEASE for every OPEN and CREATE")
    return seen[-1]


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}


def _run(argv: list[str], cwd: Path) -> str:
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, check=True, timeout=120
    ).stdout


def _populate(src: Path) -> None:
    for folder, names in (("docs", ("a.md", "b.md", "c.md")), ("notes", ("x.txt", "y.txt"))):
        (src / folder / "deep").mkdir(parents=True)
        for n in names:
            (src / folder / n).write_text(f"# {n}\nthe walk figure for {n} is 42\n")
        (src / folder / "deep" / "z.txt").write_text("deep text\n")


def _lists(m: Mount, path: str) -> list[dict[str, Any]]:
    out = swfs("log", m.mnt, "--json", "--kind", "list").stdout.splitlines()
    return [e for e in map(json.loads, out) if e["path"] == path]


@needs_no_opendir
def test_warm_walk_sends_no_directory_requests() -> None:
    with workspace(populate=_populate) as m:
        for name in ("a.md", "b.md", "c.md"):
            view = m.mnt / ".parsed" / "docs" / name
            _poll(lambda v=view: "content.txt" in os.listdir(v), f"{view}'s units")
        _run(["find", "."], m.mnt)  # cold: every tree, every listing asked for
        _run(["ls", "-lR", "docs", "notes"], m.mnt)

        before = _counts(m)
        walked = _run(["find", "docs", "notes"], m.mnt)
        _run(["ls", "-lR", "docs", "notes"], m.mnt)
        native = _delta(before, _counts(m))
        assert "docs/deep/z.txt" in walked.splitlines()
        for op in WALK_IDLE:
            assert native.get(op, 0) == 0, (op, native)

        before = _counts(m)
        for name in ("a.md", "b.md", "c.md"):
            assert "content.txt" in os.listdir(m.mnt / ".parsed" / "docs" / name)
        views = _delta(before, _counts(m))
        for op in WALK_IDLE:
            assert views.get(op, 0) == 0, (op, views)

        # A folder of .parsed keeps its listing too (every change to it is a
        # change event: tests/mounted/test_kept_listings.py); a folder of
        # .versions is listed afresh each time, without OPENDIR.
        before = _counts(m)
        for _ in range(2):
            assert "a.md" in os.listdir(m.mnt / ".parsed" / "docs")
        folder = _delta(before, _counts(m))
        for op in WALK_IDLE:
            assert folder.get(op, 0) == 0, (op, folder)
        before = _counts(m)
        for _ in range(2):
            assert "a.md" in os.listdir(m.mnt / ".versions" / "docs")
        folder = _delta(before, _counts(m))
        assert folder.get("readdir", 0) >= 2, folder
        assert folder.get("opendir", 0) == folder.get("releasedir", 0) == 0, folder


@needs_no_opendir
def test_listing_evidence_and_coherence_without_opendir() -> None:
    with workspace(populate=_populate) as m:
        _run(["ls", "notes"], m.mnt)
        first = [e for e in _lists(m, "notes") if e["process"]["name"] == "ls"]
        assert first, _lists(m, "notes")
        assert set(first[-1]["names"]) == {"x.txt", "y.txt", "deep"}

        # Changed behind the mount: the change feed drops the kept listing,
        # the next listing shows the file and is recorded again.
        (m.src / "notes" / "behind.txt").write_text("written outside the mount\n")
        _poll(lambda: "behind.txt" in _run(["ls", "notes"], m.mnt).split(), "behind.txt listed")
        again = [e for e in _lists(m, "notes") if "behind.txt" in e["names"]]
        assert again, _lists(m, "notes")
        assert again[-1]["process"]["name"] == "ls"

        # A new tab: the next listing is recorded for it (the kernel's copy
        # was dropped), so unopened.md names what it returned.
        recorded = len(_lists(m, "notes"))
        swfs("tab", "new", m.mnt)

        def listed_again() -> bool:
            _run(["ls", "notes"], m.mnt)
            return len(_lists(m, "notes")) > recorded

        _poll(listed_again, "a listing recorded in the new tab")
        _poll(
            lambda: "notes/x.txt" in (m.mnt / ".tab" / "unopened.md").read_text(),
            "notes/x.txt in the new tab's unopened.md",
        )

        # Removed behind the mount: gone from the next listing.
        (m.src / "notes" / "y.txt").unlink()
        _poll(lambda: "y.txt" not in _run(["ls", "notes"], m.mnt).split(), "y.txt gone")

        # Through the mount: the kernel's own change, seen at once.
        (m.mnt / "docs" / "made.md").write_text("# made\n")
        assert "made.md" in os.listdir(m.mnt / "docs")
        os.unlink(m.mnt / "docs" / "a.md")
        assert "a.md" not in os.listdir(m.mnt / "docs")
        # ... and in .parsed once the engine has it.
        _poll(lambda: "made.md" in os.listdir(m.mnt / ".parsed" / "docs"), ".parsed/docs/made.md")
        assert m.alive()


def test_parse_end_keeps_native_attributes_cached() -> None:
    def populate(src: Path) -> None:
        (src / "held.gated").write_text("held back until held.gated.go exists\n")

    # No sync: it would wait for the held parse.
    with workspace(populate=populate, sync=False) as m:
        view = m.mnt / ".parsed" / "held.gated"
        _poll(lambda: os.listdir(view) == ["pending.md"], "the pending view listed")
        os.stat(m.mnt / "held.gated")
        (m.src / "held.gated.go").touch()  # tests/evilparsers.py: the parse may end
        # The listing the kernel kept is dropped with the same batch of
        # invalidations that (before) dropped the file's attributes too.
        _poll(lambda: os.listdir(view) == ["content.txt"], "the parsed view listed")
        before = _counts(m)
        os.stat(m.mnt / "held.gated")
        after = _delta(before, _counts(m))
        assert after.get("getattr", 0) == 0, after
        assert after.get("lookup", 0) == 0, after
        assert "held back" in (view / "content.txt").read_text()


def _listers(m: Mount, path: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(e["process"]["name"], tuple(e["process"]["cmdline"])) for e in _lists(m, path)]


@needs_no_opendir
def test_every_listing_reaches_the_journal_when_asked() -> None:
    """By default a listing the kernel keeps is recorded once: a second
    process listing the warm directory sends nothing.  With
    ``--every-listing`` each directory open reaches the daemon, and every
    process's listing is recorded with the names it returned."""
    argvs = (["ls", "notes"], ["ls", "-a", "notes"], ["find", "notes", "-maxdepth", "1"])
    for extra, recorded in (((), 1), (("--every-listing",), len(argvs))):
        with workspace(list(extra), populate=_populate) as m:
            _run(["ls", "notes"], m.mnt)  # warm: the kernel keeps the listing
            before = _counts(m)
            start = len(_lists(m, "notes"))
            for argv in argvs:
                assert "x.txt" in _run(argv, m.mnt)

            def stored(m: Mount = m, start: int = start, n: int = recorded) -> bool:
                return len(_lists(m, "notes")) - start >= n

            if recorded > 1:
                _poll(stored, "every listing journaled")
                got = _listers(m, "notes")[start:]
                assert [c for _, c in got] == [tuple(a) for a in argvs], got
                assert all(
                    {"x.txt", "y.txt", "deep"} <= set(e["names"]) for e in _lists(m, "notes")
                )
                assert _delta(before, _counts(m)).get("opendir", 0) >= len(argvs)
            else:
                # `swfs log` has the journal store what it holds first.
                assert len(_lists(m, "notes")) == start, _listers(m, "notes")
                assert _delta(before, _counts(m)).get("opendir", 0) == 0
