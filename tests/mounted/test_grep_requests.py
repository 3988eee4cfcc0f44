"""What a warm ``grep -r`` costs in FUSE requests, counted by the daemon.

``grep`` opens every file, ``fstat``s it and reads it.  On a warm mount the
kernel answers the reads from its page cache (kept across opens:
``keep_cache``) and the ``fstat`` from the attributes it holds, so the daemon
sees an OPEN and a RELEASE per file and nothing else:

* no GETATTR, READ or LOOKUP at all once the caches are warm, over the native
  files and their ``.parsed`` units alike;
* a read that does reach the daemon (a cold page) makes the kernel mark the
  atime it holds stale (``fuse_invalidate_atime`` in fs/fuse/file.c), so the
  next ``stat`` of that file asks once: the first ``grep -r`` after the one
  that filled the caches pays one GETATTR per file, the next ones none;
* with kernel passthrough (``--passthrough=on``) every read of a passed
  through file marks the atime stale the same way (fs/fuse/passthrough.c), so
  small files are kept on the page cache (``mountd.fastpath.SMALL_FILE``): a
  warm ``grep -r`` asks the attributes of large files only, and what is
  written through either path is what the other shows.

The counts come from the daemon's SIGUSR1 dump (``mountd.reqcount``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mountd.fastpath import SMALL_FILE, passthrough_unavailable
from tests.mounted.test_walk_requests import _counts, _delta, _poll, _released, _run
from tests.mountutil import needs_fuse, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(300)]

WORD = "quillwort"
FOLDERS = ("docs", "notes", "src")
PER_FOLDER = 15


def _populate(src: Path) -> None:
    for folder in FOLDERS:
        (src / folder).mkdir()
        for i in range(PER_FOLDER):
            lines = [f"{folder} file {i}, line {n}" for n in range(20)]
            lines[7 + i % 5] += f" mentions {WORD}"
            (src / folder / f"f{i:02}.txt").write_text("\n".join(lines) + "\n")


def _populate_with_large(src: Path) -> None:
    _populate(src)
    (src / "large").mkdir()
    line = "a long line of the large file, padded to make it large enough\n"
    body = line * (2 * SMALL_FILE // len(line))
    (src / "large" / "big.txt").write_text(f"{WORD} at the top\n{body}{WORD} at the end\n")


def _matches(out: str) -> set[str]:
    return {line.split(":", 1)[0] for line in out.splitlines()}


def test_warm_grep_sends_only_opens_and_releases() -> None:
    files = len(FOLDERS) * PER_FOLDER
    with workspace(populate=_populate) as m:
        grep = ["grep", "-r", WORD, "."]  # from the root: the native files and .parsed
        cold = _matches(_run(grep, m.mnt))
        assert "./docs/f00.txt" in cold, cold
        assert "./.parsed/docs/f00.txt/content.txt" in cold, cold

        # The first warm pass: nothing is read again; the files read through
        # the daemon have their atime marked stale (the kernel asks once).
        before = _counts(m)
        assert _matches(_run(grep, m.mnt)) == cold
        first = _delta(before, _counts(m))
        assert first.get("read", 0) == 0, first

        for _ in range(2):
            before = _released(m)  # each pass's last RELEASEs go in the background
            assert _matches(_run(grep, m.mnt)) == cold
            warm = _delta(before, _released(m))
            for op in ("read", "lookup", "opendir"):
                assert warm.get(op, 0) == 0, (op, warm)
            assert warm["open"] == warm["release"] >= 2 * files, warm
            # The folders of .parsed and .review keep their listing in the
            # kernel (mountd.dirlist): no READDIR, and so no atime marked
            # stale for grep's fstat of a folder to ask.
            assert warm.get("getattr", 0) == warm.get("readdir", 0) == 0, warm

        native = ["grep", "-rn", "--exclude-dir=.*", WORD, str(m.mnt)]
        cold = _matches(_run(native, m.mnt))
        assert len(cold) == files, cold
        for _ in range(2):
            before = _released(m)
            assert _matches(_run(native, m.mnt)) == cold
            warm = _delta(before, _released(m))
            for op in ("getattr", "read", "lookup", "opendir", "readdir"):
                assert warm.get(op, 0) == 0, (op, warm)
            assert warm["open"] == warm["release"] == files, warm


def test_a_read_through_the_daemon_makes_the_next_stat_ask_once() -> None:
    with workspace(populate=_populate) as m:
        path = m.mnt / "notes" / "f03.txt"
        text = path.read_text()
        os.stat(path)  # whatever the read above marked stale is asked now
        before = _counts(m)
        assert path.read_text() == text
        os.stat(path)
        warm = _delta(before, _counts(m))
        assert warm.get("read", 0) == warm.get("getattr", 0) == 0, warm

        # Drop the kernel's pages of the file: the next read reaches the daemon.
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        before = _counts(m)
        assert path.read_text() == text
        read = _delta(before, _counts(m))
        assert read.get("read", 0) >= 1, read
        before = _counts(m)
        os.stat(path)
        os.stat(path)
        after = _delta(before, _counts(m))
        assert after.get("getattr", 0) == 1, after


def test_warm_grep_with_passthrough_asks_about_large_files_only() -> None:
    why = passthrough_unavailable()
    if why is not None:
        pytest.skip(f"kernel passthrough unavailable: {why}")
    with workspace(["--passthrough", "on"], populate=_populate_with_large) as m:
        big = m.mnt / "large" / "big.txt"
        before = _counts(m)
        content = big.read_bytes()
        if _delta(before, _counts(m)).get("read", 0):
            pytest.skip("the kernel did not take the large file's reads (no FUSE passthrough)")
        assert content == (m.src / "large" / "big.txt").read_bytes()

        grep = ["grep", "-rn", "--exclude-dir=.*", WORD, str(m.mnt)]  # the native files only
        cold = _matches(_run(grep, m.mnt))
        assert {str(big), str(m.mnt / "docs" / "f00.txt")} <= cold, cold
        _run(grep, m.mnt)  # the first warm pass asks what the cold one marked stale
        for _ in range(2):
            before = _released(m)  # each pass's last RELEASEs go in the background
            assert _matches(_run(grep, m.mnt)) == cold
            warm = _delta(before, _released(m))
            assert warm.get("read", 0) == 0, warm
            # Only the passed through file (its reads went to the backing file).
            assert warm.get("getattr", 0) <= 1, warm

        # The two paths stay coherent.  The large file's pages in the kernel's
        # cache (an open for writing, with no passthrough open, is not passed
        # through), then a change by a writer that passes through (a reader
        # holds the file passed through): the next page-cache open sees it.
        with open(big, "r+b", buffering=0) as f:
            assert f.read() == content
        with open(big, "rb", buffering=0) as reader:
            assert reader.read(9) == WORD.encode()
            with open(big, "r+b", buffering=0) as w:
                w.write(b"CHANGED!!")
            reader.seek(0)
            assert reader.read(9) == b"CHANGED!!"
        with open(big, "r+b", buffering=0) as f:
            assert f.read(9) == b"CHANGED!!"
        # The passed through write is recorded, its old bytes kept at open.
        kept = m.mnt / ".versions" / "large" / "big.txt"
        _poll(lambda: len(os.listdir(kept)) == 2, "a version of the passed through write")
        assert (kept / sorted(os.listdir(kept))[0]).read_bytes() == content

        # A small file served from the page cache still follows a change
        # behind the mount.
        small = m.mnt / "docs" / "f01.txt"
        assert WORD in small.read_text()
        (m.src / "docs" / "f01.txt").write_text("rewritten behind the mount\n")
        _poll(lambda: small.read_text() == "rewritten behind the mount\n", "the new text")
        assert m.alive()
