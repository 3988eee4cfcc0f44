"""Coherence through a real mount on the real engine: no write goes ahead
without its history, hard links share freshness, a grep right after a save
sees the new text, pending views answer at once, and ``.versions`` stays out
of recursive searches."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from swfs.store.fsutil import hash_file
from tests.mountutil import errno_of, full_store_mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse]


def poll(cond: Callable[[], object], bound: float, what: str) -> None:
    """Until ``cond()`` is true, at most ``bound`` seconds; then fail naming ``what``."""
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {bound} s: {what}")
        time.sleep(0.05)


def header(path: Path) -> str:
    return path.read_text(encoding="utf-8").partition("\n")[0]


# -- no silent loss ---------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_a_write_the_full_store_cannot_keep_fails_and_the_file_keeps_its_bytes() -> None:
    with full_store_mount(12) as (m, original):
        src, mnt = m.src, m.mnt
        big = mnt / "big.bin"

        def overwrite_in_place() -> None:
            with open(big, "r+b") as f:
                f.seek(1024)
                f.write(b"overwritten in place" * 1000)

        def editor_save() -> None:
            tmp = mnt / "big.bin.tmp"
            tmp.write_bytes(b"an editor's new version")
            try:
                os.replace(tmp, big)
            finally:
                if tmp.exists():
                    tmp.unlink()

        # Writes that add or change bytes fail while the old ones cannot be kept.
        for how in (overwrite_in_place, editor_save):
            code = errno_of(how)
            assert code in (errno.ENOSPC, errno.EIO), (how, errno.errorcode.get(code, code))
            assert (src / "big.bin").read_bytes() == original, how
        assert m.alive(), m.log()[-2000:]
        # The history still names the original bytes as the file's last version.
        versions = sorted(os.listdir(mnt / ".versions" / "big.bin"))
        assert len(versions) == 1
        assert os.getxattr(mnt / "big.bin", "user.sw.hash") == os.getxattr(
            mnt / ".versions" / "big.bin" / versions[0], "user.sw.hash"
        )
        # What the store can keep is still written.
        (mnt / "small.txt").write_text("small, edited\n")
        assert (src / "small.txt").read_text() == "small, edited\n"
        # Changes that free space always go on (a full disk must be freeable):
        # the old bytes are kept where the store's reserve allows, else the
        # version says they were not (swfs.reserve).
        assert errno_of(lambda: os.truncate(big, 10)) == 0
        assert (src / "big.bin").read_bytes() == original[:10]
        first = sorted(os.listdir(mnt / ".versions" / "big.bin"))[0]
        if first.endswith(".not-kept"):
            assert os.getxattr(mnt / ".versions" / "big.bin" / first, "user.sw.not_kept")
        else:
            assert (mnt / ".versions" / "big.bin" / first).read_bytes() == original
        assert errno_of(lambda: os.unlink(big)) == 0
        assert not (src / "big.bin").exists()
        assert m.alive(), m.log()[-2000:]


# -- hard links -------------------------------------------------------------------------


def _notes(src: Path) -> None:
    (src / "notes").mkdir()
    (src / "notes" / "readme.md").write_text("# Readme\nthe first line\n")


@pytest.mark.timeout(120)
def test_a_write_through_a_hard_link_reaches_every_name_at_once() -> None:
    with workspace(populate=_notes) as m:
        readme, link = m.mnt / "notes" / "readme.md", m.mnt / "notes" / "hardlink.md"
        unit = m.mnt / ".parsed" / "notes" / "readme.md" / "content.txt"
        old = os.getxattr(readme, "user.sw.hash").decode()
        assert f'current="b3:{old[:16]}"' in header(unit)
        os.link(readme, link)
        with open(link, "a") as f:
            f.write("x\n")
        new = hash_file(m.src / "notes" / "readme.md")
        assert new != old
        # At once: never the old hash claimed as current.
        text = unit.read_text()
        first = text.partition("\n")[0]
        assert f'current="b3:{new[:16]}"' in first, first
        if 'freshness="current"' in first:
            assert text.endswith("the first line\nx\n")
        else:
            assert 'freshness="stale"' in first
        assert f"b3:{new[:16]}" in (m.mnt / ".review" / "SUMMARY.md").read_text()
        assert f"b3:{old[:16]} |" not in (m.mnt / ".review" / "SUMMARY.md").read_text().replace(
            f"| b3:{old[:16]} | b3:{new[:16]} |", ""
        )
        # Each name has its own history, both ending with the new bytes.
        readme_versions = sorted(os.listdir(m.mnt / ".versions" / "notes" / "readme.md"))
        link_versions = sorted(os.listdir(m.mnt / ".versions" / "notes" / "hardlink.md"))
        assert len(readme_versions) == 2
        assert readme_versions[-1].startswith(f"0002-{new[:16]}")
        assert link_versions[-1].split("-", 1)[1].startswith(new[:16])
        out = swfs("check", m.mnt)
        assert "ok" in out.stdout
        swfs("sync", m.mnt)
        assert unit.read_text().endswith("the first line\nx\n")
        assert 'freshness="current"' in header(unit)


@pytest.mark.timeout(120)
def test_xattrs_set_or_removed_behind_the_mount_are_seen_through_it() -> None:
    """Absent names are answered from the names the daemon last listed
    (mountd.native.own_xattr); a change behind the mount, by any name of the
    inode, is seen within the change feed's bound, and one through the
    mount at once."""
    with workspace(populate=_notes) as m:
        readme, behind = m.mnt / "notes" / "readme.md", m.src / "notes" / "readme.md"

        def value(name: str) -> bytes | int:
            try:
                return os.getxattr(readme, name)
            except OSError as exc:
                return exc.errno or 0

        for _ in range(50):  # the names listed once, then kept
            assert value("user.colour") == errno.ENODATA
        os.setxattr(behind, "user.colour", b"teal")
        poll(lambda: value("user.colour") == b"teal", 30, "an xattr set behind the mount")
        assert "user.colour" in os.listxattr(readme)
        # Through a second name of the inode, made behind the mount.
        os.link(behind, m.src / "notes" / "second.md")
        assert value("user.shape") == errno.ENODATA
        os.setxattr(m.src / "notes" / "second.md", "user.shape", b"round")
        poll(lambda: value("user.shape") == b"round", 30, "an xattr set through another link")
        os.removexattr(behind, "user.colour")
        poll(lambda: value("user.colour") == errno.ENODATA, 30, "an xattr removed behind")
        # Through the mount: at once.
        os.setxattr(readme, "user.size", b"large")
        assert value("user.size") == b"large"
        os.removexattr(readme, "user.size")
        assert value("user.size") == errno.ENODATA
        # A file written through the mount (the kernel asks for
        # security.capability before each write) keeps its bytes and names.
        with open(readme, "a") as f:
            for i in range(20):
                f.write(f"line {i}\n")
                f.flush()
        assert behind.read_text().endswith("line 19\n")
        assert value("user.shape") == b"round"
        assert value("security.capability") in (errno.ENODATA, errno.EOPNOTSUPP)


# -- a read of a stale view waits for its re-parse -----------------------------------


def _letter(src: Path) -> None:
    import docx

    doc = docx.Document()
    doc.add_paragraph("Dear tenant, the rent is due on the first.")
    doc.save(str(src / "letter.docx"))


@pytest.mark.timeout(120)
def test_grep_right_after_a_python_docx_save_finds_the_new_sentence() -> None:
    import docx

    with workspace(populate=_letter) as m:
        parsed = m.mnt / ".parsed"
        before = subprocess.run(
            ["grep", "-rn", "rent is due", str(parsed)], capture_output=True, text=True, timeout=60
        )
        assert "letter.docx" in before.stdout
        doc = docx.Document(str(m.mnt / "letter.docx"))
        doc.add_paragraph("Marisol signed the lease on Tuesday.")
        doc.save(str(m.mnt / "letter.docx"))
        found = subprocess.run(
            ["grep", "-rn", "Marisol signed", str(parsed)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert found.returncode == 0, found
        assert "letter.docx/" in found.stdout
        unit = next((parsed / "letter.docx").iterdir())
        assert 'freshness="current"' in header(unit)


@pytest.mark.timeout(120)
def test_stale_serve_keeps_serving_the_prior_view_at_once() -> None:
    def populate(src: Path) -> None:
        (src / "notes.slow").write_text("first version\n")

    with workspace(["--stale=serve"], populate=populate) as m:
        unit = m.mnt / ".parsed" / "notes.slow" / "content.txt"
        assert "first version" in unit.read_text()
        (m.mnt / "notes.slow").write_text("second version\n")
        text = unit.read_text()  # the slow parser takes 2 s: the prior view, marked
        assert 'freshness="stale"' in text.partition("\n")[0]
        assert "first version" in text


@pytest.mark.timeout(120)
def test_a_stale_read_past_the_bound_is_served_marked() -> None:
    def populate(src: Path) -> None:
        (src / "notes.gated").write_text("first version\n")
        (src / "notes.gated.go").write_text("")

    with workspace(["--stale-wait", "0.5"], populate=populate) as m:
        unit = m.mnt / ".parsed" / "notes.gated" / "content.txt"
        assert "first version" in unit.read_text()
        (m.src / "notes.gated.go").unlink()  # the next parse waits for the test
        (m.mnt / "notes.gated").write_text("second version\n")
        text = unit.read_text()
        assert 'freshness="stale"' in text.partition("\n")[0]
        assert "first version" in text
        (m.src / "notes.gated.go").write_text("")
        swfs("sync", m.mnt)
        assert "second version" in unit.read_text()


# -- pending views answer at once ----------------------------------------------------


def _in_time(fn: Callable[[], object], bound: float = 60) -> object:
    """``fn()``'s result, failing if it blocks for ``bound`` seconds (a read
    that waited for the parse would block for the mount's --wait-timeout)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=bound)
    finally:
        pool.shutdown(wait=False)


@pytest.mark.timeout(200)
def test_a_pending_view_lists_and_opens_at_once_and_stays_readable() -> None:
    with workspace(["--wait-timeout", "600", "--parse-timeout", "600"], sync=False) as m:
        (m.mnt / "report.gated").write_text("the report\n")
        view = m.mnt / ".parsed" / "report.gated"
        poll(view.exists, 60, "the pending view appears")
        assert _in_time(lambda: os.listdir(view)) == ["pending.md"]
        pending = view / "pending.md"
        text = str(_in_time(pending.read_text))
        first, _, body = text.partition("\n")
        assert 'freshness="pending"' in first
        assert "swfs has not parsed report.gated yet" in body
        assert "parsing since" in body or "queued" in body
        assert "the report" not in body
        # Listed while pending; the parse ends before the open: still readable.
        assert os.listdir(view) == ["pending.md"]
        (m.src / "report.gated.go").write_text("")
        poll(
            lambda: os.getxattr(m.mnt / "report.gated", "user.sw.freshness") == b"current",
            60,
            "the parse ends",
        )
        note = pending.read_text()
        assert "since this folder was listed" in note
        assert "content.txt" in note
        assert os.listdir(view) == ["content.txt"]
        assert (view / "content.txt").read_text().endswith("the report\n")


# -- .versions stays out of recursive searches --------------------------------------


def _contract(src: Path) -> None:
    (src / "contract.txt").write_text("tenant: Marisol Ortega\n")


@pytest.mark.timeout(120)
def test_versions_are_hidden_from_the_root_listing_but_work_by_path() -> None:
    # Every write its own version (no bursts): the old ones are what a
    # recursive grep must not find.
    with workspace(["--version-interval", "0"], populate=_contract) as m:
        for i in range(3):
            (m.mnt / "contract.txt").write_text(f"tenant: Marisol Ortega, revision {i}\n")
        swfs("sync", m.mnt)
        names = os.listdir(m.mnt)
        assert ".versions" not in names
        assert {".parsed", ".review", "contract.txt"} <= set(names)
        kept = os.listdir(m.mnt / ".versions" / "contract.txt")
        # The first version and one per write.  (Under load a rescan that
        # overlapped a write once stored its older finding as a fifth.)
        assert len(kept) == 4, (sorted(kept), m.log()[-3000:])
        ls = subprocess.run(
            ["ls", str(m.mnt / ".versions" / "contract.txt")], capture_output=True, text=True
        )
        assert ls.returncode == 0
        assert sorted(ls.stdout.split()) == sorted(kept)
        cd = subprocess.run(["ls"], cwd=m.mnt / ".versions", capture_output=True, text=True)
        assert "contract.txt" in cd.stdout.split()
        hits = subprocess.run(
            ["grep", "-rn", "Marisol", "."], cwd=m.mnt, capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
        assert hits
        assert not [h for h in hits if h.startswith("./.versions/")]
        assert [h for h in hits if h.startswith("./contract.txt:")]
        assert [h for h in hits if h.startswith("./.parsed/contract.txt/")]
        assert all("revision 2" in h for h in hits if not h.startswith("./.review/"))


@pytest.mark.timeout(120)
def test_versions_visible_lists_them_at_the_root() -> None:
    with workspace(["--versions=visible"], populate=_contract) as m:
        assert ".versions" in os.listdir(m.mnt)
        hits = subprocess.run(
            ["grep", "-rln", "Marisol", "."], cwd=m.mnt, capture_output=True, text=True, timeout=60
        ).stdout.splitlines()
        assert [h for h in hits if h.startswith("./.versions/contract.txt/")]


@pytest.mark.timeout(120)
def test_a_reader_opening_a_file_midway_through_a_write_records_no_torn_version() -> None:
    # A writer has truncated the file (`> f`, write_text) and not yet written;
    # a reader opens it then.  The reader's open sees a file unlike its record
    # but must leave the recording to the writer: the empty file is no version.
    with workspace(["--version-interval", "0"], populate=_contract) as m:
        path = m.mnt / "contract.txt"
        with open(path, "w") as writer:
            with open(path) as reader:
                assert reader.read() == ""
            writer.write("tenant: Marisol Ortega, signed\n")
        swfs("sync", m.mnt)
        kept = sorted(os.listdir(m.mnt / ".versions" / "contract.txt"))
        assert len(kept) == 2, kept  # the first version and the write's
        empty = "af1349b9f5f9a1a6"  # blake3 of no bytes
        assert not [k for k in kept if empty in k], kept
