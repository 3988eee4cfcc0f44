"""Changes made in SRC behind a real mount reach ``.parsed``, ``.review`` and
the kernel's caches by change notification.  The periodic rescan is set to an
hour, and nothing here opens the changed native file through the mount (an
open would check it), so only the change feed can have seen the changes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(180), needs_fuse]

BOUND = 30.0  # seconds: generous, the machine may be busy; the design target is 1 s
NO_RESCAN = ("--rescan-interval", "3600")


def populate(src: Path) -> None:
    (src / "notes").mkdir()
    (src / "notes" / "a.txt").write_text("alpha original sentence\n")
    (src / "notes" / "keep.txt").write_text("kept as it is\n")


@pytest.fixture
def mounted() -> Iterator[Mount]:
    with workspace(NO_RESCAN, populate=populate) as m:
        yield m


def read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def poll(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {BOUND} s: {what}")
        time.sleep(0.02)


def current_with(unit: Path, text: str) -> bool:
    body = read(unit)
    return text in body and 'freshness="current"' in body.splitlines()[0] if body else False


def test_a_write_behind_the_mount_reaches_parsed_and_review(mounted: Mount) -> None:
    m = mounted
    unit = m.mnt / ".parsed" / "notes" / "a.txt" / "content.txt"
    summary = m.mnt / ".review" / "SUMMARY.md"
    # The kernel keeps what it was shown: the unit, the summary, the listing.
    assert current_with(unit, "alpha original sentence")
    assert "notes/a.txt" not in read(summary)
    assert sorted(os.listdir(m.mnt / "notes")) == ["a.txt", "keep.txt"]

    (m.src / "notes" / "a.txt").write_text("bravo replacement sentence, longer than before\n")
    poll(lambda: current_with(unit, "bravo replacement sentence"), "the new text, current")
    body = read(unit)
    assert "alpha original sentence" not in body
    poll(lambda: "notes/a.txt" in read(summary), ".review/SUMMARY.md names the file")
    assert "modified" in read(summary)
    # The native file through the mount: its new size and bytes.
    assert os.stat(m.mnt / "notes" / "a.txt").st_size == (m.src / "notes" / "a.txt").stat().st_size
    assert "bravo" in (m.mnt / "notes" / "a.txt").read_text()


def test_new_renamed_and_deleted_files_behind_the_mount(mounted: Mount) -> None:
    m = mounted
    parsed = m.mnt / ".parsed"
    assert sorted(os.listdir(m.mnt / "notes")) == ["a.txt", "keep.txt"]
    assert sorted(os.listdir(parsed / "notes")) == ["a.txt", "keep.txt"]

    # A new directory with files written before anything could watch it.
    deep = m.src / "fresh" / "sub"
    deep.mkdir(parents=True)
    (deep / "n.txt").write_text("november text\n")
    poll(
        lambda: current_with(parsed / "fresh" / "sub" / "n.txt" / "content.txt", "november"),
        "a file in a new directory parsed",
    )
    assert os.listdir(m.mnt / "fresh" / "sub") == ["n.txt"]

    # Renamed: the listing the kernel kept and .parsed follow.
    os.rename(m.src / "notes" / "keep.txt", m.src / "notes" / "moved.txt")
    poll(
        lambda: sorted(os.listdir(parsed / "notes")) == ["a.txt", "moved.txt"],
        ".parsed follows the rename",
    )
    assert sorted(os.listdir(m.mnt / "notes")) == ["a.txt", "moved.txt"]
    assert current_with(parsed / "notes" / "moved.txt" / "content.txt", "kept as it is")

    # Deleted.
    (m.src / "notes" / "a.txt").unlink()
    poll(lambda: not (parsed / "notes" / "a.txt").exists(), ".parsed drops the deleted file")
    poll(lambda: "deleted" in read(m.mnt / ".review" / "SUMMARY.md"), "the review says deleted")
    assert not (m.mnt / "notes" / "a.txt").exists()


def test_a_chmod_behind_the_mount_reaches_the_kernel_attribute_cache(
    mounted: Mount,
) -> None:
    m = mounted
    target = m.mnt / "notes" / "keep.txt"
    assert os.stat(target).st_mode & 0o777 == 0o644
    os.chmod(m.src / "notes" / "keep.txt", 0o600)
    # Attributes are cached for 60 s: only an invalidation shows this sooner.
    poll(lambda: os.stat(target).st_mode & 0o777 == 0o600, "the new mode through the mount")
