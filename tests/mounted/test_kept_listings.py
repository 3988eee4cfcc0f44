"""Generated folders whose listing the kernel keeps (mountd.dirlist).

The root of ``.parsed`` and its folders (the native tree's mirror), and
``.review`` with its folders, keep their listing in the kernel until a
change event drops it:

* a warm walk from the mount root (``find .``, ``ls -R``, ``grep -r``)
  sends no READDIR at all, and no GETATTR or LOOKUP of a folder: the kernel
  answers it, as it does for the native tree; a tree listed afresh
  (``.versions``) still reaches the daemon at each listing;
* every event that changes such a listing shows in the next listing: a
  supported file created, removed, renamed across folders, a folder renamed
  or emptied, a file turning supported or unsupported, a chmod (who may read
  a folder of ``.parsed`` is its native folder's mode), a change behind the
  mount once the change feed saw it, a change and a new baseline in
  ``.review``;
* the journal still records the first listing after a change, and the first
  in a new tab.

Each check lists the folder first, twice, so the kernel holds the listing
when the change comes: without the invalidation it would keep showing it.
The counts come from the daemon's SIGUSR1 dump (``mountd.reqcount``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.mounted.test_walk_requests import (
    _counts,
    _delta,
    _lists,
    _poll,
    _run,
    needs_no_opendir,
)
from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse, needs_no_opendir, pytest.mark.timeout(600)]

FOLDERS = ("docs", "docs/deep", "notes", "notes/old", "src")
BINARY = bytes(range(256)) * 4  # no parser takes it: not in .parsed


def _populate(src: Path) -> None:
    for i, folder in enumerate(FOLDERS):
        (src / folder).mkdir(parents=True, exist_ok=True)
        for n in range(3):
            (src / folder / f"f{n}.md").write_text(f"# {folder} {n}\nthe figure is {i * 10 + n}\n")
    (src / "docs" / "blob").write_bytes(BINARY)
    (src / "empty").mkdir()  # no file: no folder in .parsed


def _names(path: Path) -> set[str]:
    return set(os.listdir(path))


def _warm(*paths: Path) -> None:
    """List each folder twice: the kernel keeps the listing now."""
    for _ in range(2):
        for p in paths:
            os.listdir(p)


def _shows(path: Path, name: str, present: bool = True) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return (name in _names(path)) is present
        except FileNotFoundError:
            return not present

    return check


def _settled(m: Mount) -> None:
    """Every file recorded and parsed (a view folder of each shows units)."""
    swfs("sync", m.mnt)


def test_warm_walks_from_the_root_list_no_kept_folder() -> None:
    with workspace(populate=_populate) as m:
        walks = (["find", "."], ["ls", "-R"], ["grep", "-r", "figure", "."])
        for _ in range(2):  # cold, then the first warm pass (atimes asked once)
            for argv in walks:
                _run(argv, m.mnt)
        found = _run(["find", "."], m.mnt).splitlines()
        assert "./.parsed/docs/deep/f0.md/content.txt" in found, found
        assert "./.review/SUMMARY.md" in found, found
        assert "./.parsed/empty" not in found, found
        assert "./.parsed/docs/blob" not in found, found
        for argv in walks:
            before = _counts(m)
            out = _run(argv, m.mnt)
            warm = _delta(before, _counts(m))
            assert "f2.md" in out, out
            for op in ("readdir", "opendir", "lookup", "getattr"):
                assert warm.get(op, 0) == 0, (argv, op, warm)

        # A tree whose listing is not kept still reaches the daemon each time.
        before = _counts(m)
        for _ in range(2):
            assert "f0.md" in os.listdir(m.mnt / ".versions" / "docs")
        assert _delta(before, _counts(m)).get("readdir", 0) >= 2


def test_kept_listings_follow_changes_through_the_mount() -> None:
    with workspace(populate=_populate) as m:
        parsed = m.mnt / ".parsed"
        assert _names(parsed) == {"docs", "notes", "src"}
        assert _names(parsed / "docs") == {"f0.md", "f1.md", "f2.md", "deep"}

        # A new supported file.
        _warm(parsed / "docs")
        (m.mnt / "docs" / "new.md").write_text("# new\n")
        _poll(_shows(parsed / "docs", "new.md"), ".parsed/docs/new.md listed")

        # Removed.
        _warm(parsed / "docs")
        os.unlink(m.mnt / "docs" / "f0.md")
        _poll(_shows(parsed / "docs", "f0.md", False), ".parsed/docs/f0.md gone")

        # Renamed across folders.
        _warm(parsed / "docs", parsed / "src")
        os.rename(m.mnt / "src" / "f1.md", m.mnt / "docs" / "moved.md")
        _poll(_shows(parsed / "docs", "moved.md"), ".parsed/docs/moved.md listed")
        _poll(_shows(parsed / "src", "f1.md", False), ".parsed/src/f1.md gone")

        # A folder renamed into another one: gone from its old parent, in its
        # new one, with its files.
        _warm(parsed, parsed / "notes", parsed / "docs", parsed / "notes" / "old")
        os.rename(m.mnt / "notes" / "old", m.mnt / "docs" / "older")
        _poll(_shows(parsed / "notes", "old", False), ".parsed/notes/old gone")
        _poll(_shows(parsed / "docs", "older"), ".parsed/docs/older listed")
        assert _names(parsed / "docs" / "older") == {"f0.md", "f1.md", "f2.md"}
        assert not (parsed / "notes" / "old").exists()

        # A new folder with a file appears at the root of .parsed, and goes
        # when its last file does.
        _warm(parsed)
        (m.mnt / "empty" / "first.md").write_text("# first\n")
        _poll(_shows(parsed, "empty"), ".parsed/empty listed")
        _warm(parsed, parsed / "empty")
        os.unlink(m.mnt / "empty" / "first.md")
        _poll(_shows(parsed, "empty", False), ".parsed/empty gone")

        # Unsupported (binary), then supported (text), then unsupported again.
        _warm(parsed / "docs")
        assert "blob" not in _names(parsed / "docs")
        (m.mnt / "docs" / "blob").write_text("plain text now, the sniffer takes it\n")
        _poll(_shows(parsed / "docs", "blob"), ".parsed/docs/blob listed once it is text")
        _warm(parsed / "docs")
        (m.mnt / "docs" / "blob").write_bytes(BINARY)
        _poll(_shows(parsed / "docs", "blob", False), ".parsed/docs/blob gone once binary")

        # A chmod of a folder: who may read its mirror follows at once.
        _warm(parsed, parsed / "src")
        assert stat.S_IMODE(os.stat(parsed / "src").st_mode) == 0o555
        os.chmod(m.mnt / "src", 0o700)
        assert stat.S_IMODE(os.stat(parsed / "src").st_mode) == 0o500
        assert _names(parsed / "src") == {"f0.md", "f2.md"}
        assert m.alive()


def test_kept_listings_follow_changes_behind_the_mount() -> None:
    with workspace(populate=_populate) as m:
        parsed = m.mnt / ".parsed"
        _warm(parsed, parsed / "docs", parsed / "notes", parsed / "src")

        (m.src / "docs" / "outside.md").write_text("# written behind the mount\n")
        _poll(_shows(parsed / "docs", "outside.md"), ".parsed/docs/outside.md listed")

        _warm(parsed / "notes")
        (m.src / "notes" / "f1.md").unlink()
        _poll(_shows(parsed / "notes", "f1.md", False), ".parsed/notes/f1.md gone")

        _warm(parsed, parsed / "src")
        os.rename(m.src / "src", m.src / "lib")
        _poll(_shows(parsed, "lib"), ".parsed/lib listed")
        _poll(_shows(parsed, "src", False), ".parsed/src gone")
        assert _names(parsed / "lib") == {"f0.md", "f1.md", "f2.md"}

        _warm(parsed, parsed / "docs")
        os.chmod(m.src / "docs", 0o700)

        def mode() -> int:
            return stat.S_IMODE(os.stat(parsed / "docs").st_mode)

        _poll(lambda: mode() == 0o500, ".parsed/docs readable by its owner only")
        assert m.alive()


def test_review_listings_follow_changes_and_the_baseline() -> None:
    with workspace(populate=_populate) as m:
        review = m.mnt / ".review"
        top = {"SUMMARY.md", "ALL.diff"}
        assert top <= _names(review)
        assert "docs" not in _names(review)

        _warm(review)
        (m.mnt / "docs" / "f1.md").write_text("# changed\n")
        _poll(_shows(review, "docs"), ".review/docs listed")
        assert "f1.md.diff" in _names(review / "docs")

        _warm(review, review / "docs")
        os.unlink(m.mnt / "docs" / "f2.md")
        _poll(_shows(review / "docs", "f2.md.diff"), ".review/docs/f2.md.diff listed")

        # Accepted: nothing to review.
        _warm(review, review / "docs")
        swfs("baseline", m.mnt)
        _poll(_shows(review, "docs", False), ".review/docs gone after the baseline")
        assert top <= _names(review)


def test_kept_listings_are_journaled_after_a_change_and_in_a_new_tab() -> None:
    with workspace(populate=_populate) as m:
        folder = m.mnt / ".parsed" / "notes"
        _run(["ls", str(folder)], m.mnt)
        _warm(folder)
        _poll(lambda: bool(_lists(m, ".parsed/notes")), "the first listing journaled")
        first = len(_lists(m, ".parsed/notes"))

        # The kernel answers the warm listings: nothing more is recorded.
        _warm(folder)
        assert len(_lists(m, ".parsed/notes")) == first

        # A change: the next listing reaches the daemon and is recorded.
        (m.mnt / "notes" / "late.md").write_text("# late\n")
        _poll(_shows(folder, "late.md"), ".parsed/notes/late.md listed")
        _poll(
            lambda: any("late.md" in e["names"] for e in _lists(m, ".parsed/notes")),
            "the listing after the change journaled",
        )
        after = len(_lists(m, ".parsed/notes"))

        # A new tab: the kernel's copy goes, the next listing is recorded for it.
        swfs("tab", "new", m.mnt)

        def listed_again() -> bool:
            os.listdir(folder)
            return len(_lists(m, ".parsed/notes")) > after

        _poll(listed_again, "a listing recorded in the new tab")
