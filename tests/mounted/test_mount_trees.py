"""The generated trees through a real mount: .parsed, .review, .versions."""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest

from tests.conftest import MountFactory
from tests.mountutil import Mount, as_user, ensure_test_user, errno_of, swfs

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240)]


def h(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


def test_grep_locates_evidence_in_parsed(mount_tree: MountFactory) -> None:
    m = mount_tree({"notes.txt": "alpha\nbudget 1200\n", "sub/deep.md": "# t\nbudget 9\n"})
    out = subprocess.run(
        ["grep", "-rn", "budget", ".parsed"], cwd=m.mnt, capture_output=True, text=True, check=True
    ).stdout
    assert ".parsed/notes.txt/content.txt:3:budget 1200" in out
    assert ".parsed/sub/deep.md/content.txt:3:budget 9" in out
    unit = m.mnt / ".parsed/notes.txt/content.txt"
    text = unit.read_bytes()
    assert text.startswith(b'<!-- swfs source="notes.txt"')
    assert unit.stat().st_size == len(text)
    assert os.getxattr(unit, "user.sw.freshness") == b"current"
    assert os.getxattr(unit, "user.sw.source") == b"notes.txt"
    assert os.getxattr(unit, "user.sw.source_hash").decode() == h(b"alpha\nbudget 1200\n")
    assert os.getxattr(unit, "user.sw.locator") == b"notes.txt#content"
    assert os.getxattr(unit, "user.sw.parser").startswith(b"text@")
    assert errno_of(lambda: os.getxattr(unit, "user.sw.error")) == errno.ENODATA
    d = m.mnt / ".parsed/notes.txt"
    assert "user.sw.freshness" in os.listxattr(d)
    assert "user.sw.locator" not in os.listxattr(d)
    assert sorted(os.listdir(m.mnt / ".parsed")) == ["notes.txt", "sub"]


def test_generated_trees_are_read_only(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "a\n"})
    unit = m.mnt / ".parsed/a.txt/content.txt"
    version = next((m.mnt / ".versions/a.txt").iterdir())
    summary = m.mnt / ".review/SUMMARY.md"
    for target in (unit, version, summary):
        assert errno_of(functools.partial(open, target, "ab")) == errno.EROFS
        assert errno_of(functools.partial(os.truncate, target, 0)) == errno.EROFS
        assert errno_of(functools.partial(os.chmod, target, 0o777)) == errno.EROFS
        assert errno_of(functools.partial(os.unlink, target)) == errno.EROFS
        assert errno_of(functools.partial(os.rename, target, m.mnt / "x")) == errno.EROFS
        assert errno_of(functools.partial(os.setxattr, target, "user.x", b"1")) in (
            errno.EROFS,
            errno.EPERM,
        )
    for d in (".parsed", ".review", ".versions", ".parsed/a.txt"):
        assert errno_of(functools.partial(os.mkdir, m.mnt / d / "new")) == errno.EROFS
        new = m.mnt / d / "new.txt"
        assert errno_of(functools.partial(new.write_text, "x")) == errno.EROFS
    assert errno_of(functools.partial(os.rename, m.mnt / "a.txt", m.mnt / ".parsed/b")) in (
        errno.EROFS,
        errno.EXDEV,
    )
    assert (m.src / "a.txt").read_text() == "a\n"


def _gated(src: Path, name: str, *, go: bool) -> None:
    """``name`` is parsed by tests/evilparsers.py's gated parser, which
    finishes only once ``name.go`` exists beside it."""
    if go:
        (src / f"{name}.go").touch()
    else:
        (src / f"{name}.go").unlink(missing_ok=True)


def _make_stale(m: Mount, name: str, text: str) -> None:
    """Rewrite ``name`` (parsed once already) with its next parse held back."""
    _gated(m.src, name, go=False)
    with open(m.mnt / name, "w") as f:
        f.write(text)
    poll(lambda: os.getxattr(m.mnt / name, "user.sw.freshness") == b"stale", what="stale")


def poll(ok: Callable[[], bool], *, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout} s")
        time.sleep(0.05)


def test_pending_view_waits_and_stale_view_is_marked(mount_tree: MountFactory) -> None:
    def setup(src: Path) -> None:
        _gated(src, "stale.gated", go=True)

    m = mount_tree({"stale.gated": "old text\n"}, setup=setup)
    _make_stale(m, "stale.gated", "new\n")
    # A pending view: reading a unit by name waits for the parse (2 s here).
    (m.src / "later.slow").write_text("fresh words\n")
    poll(lambda: "later.slow" in os.listdir(m.mnt / ".parsed"), what="listed")
    text = (m.mnt / ".parsed/later.slow/content.txt").read_text()
    assert 'freshness="current"' in text
    assert "fresh words" in text
    assert ["wait_view", "later.slow"] in m.calls("wait_view")
    # A stale view is served at once (this mount serves stale views), marked.
    stale = (m.mnt / ".parsed/stale.gated/content.txt").read_text()
    assert 'freshness="stale"' in stale
    assert "old text" in stale
    assert "new" not in stale.partition("\n")[2]
    assert os.getxattr(m.mnt / ".parsed/stale.gated", "user.sw.freshness") == b"stale"
    assert ["wait_view", "stale.gated"] not in m.calls("wait_view")
    _gated(m.src, "stale.gated", go=True)
    poll(
        lambda: "new" in (m.mnt / ".parsed/stale.gated/content.txt").read_text(),
        what="re-parsed",
    )


def test_listing_parsed_does_not_wait_for_each_view(mount_tree: MountFactory) -> None:
    m = mount_tree({"b.txt": "b\n"})
    m.clear_calls()
    (m.src / "pending.gated").write_text("fresh\n")
    poll(lambda: "pending.gated" in os.listdir(m.mnt / ".parsed"), what="listed")
    assert sorted(os.listdir(m.mnt / ".parsed")) == ["b.txt", "pending.gated"]
    subprocess.run(["ls", "-l", str(m.mnt / ".parsed")], check=True, capture_output=True)
    assert m.calls("wait_view") == []
    # Listing a pending view's own folder waits for it, briefly: past that it
    # lists pending.md, which opens at once and says how far the parse got.
    assert os.listdir(m.mnt / ".parsed/pending.gated") == ["pending.md"]
    assert m.calls("wait_view") == [["wait_view", "pending.gated"]]
    note = (m.mnt / ".parsed/pending.gated/pending.md").read_text()
    assert 'freshness="pending"' in note
    assert "has not parsed pending.gated yet" in note
    _gated(m.src, "pending.gated", go=True)
    poll(lambda: os.listdir(m.mnt / ".parsed/pending.gated") == ["content.txt"], what="parsed")
    assert "fresh" in (m.mnt / ".parsed/pending.gated/content.txt").read_text()


def test_stale_wait_policy(mount_tree: MountFactory) -> None:
    m = mount_tree({"stale.slow": "old\n"}, args=["--stale", "wait"])
    with open(m.mnt / "stale.slow", "w") as f:
        f.write("new words\n")
    # The re-parse takes 2 s; the read waits for it (up to --stale-wait, 2 s,
    # then the stale view is served, marked): poll for the current text.
    poll(
        lambda: 'freshness="current"' in (m.mnt / ".parsed/stale.slow/content.txt").read_text(),
        what="current",
    )
    text = (m.mnt / ".parsed/stale.slow/content.txt").read_text()
    assert "new words" in text
    assert ["wait_view", "stale.slow"] in m.calls("wait_view")


def test_parsed_view_follows_writes(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "one\n"})
    unit = m.mnt / ".parsed/a.txt/content.txt"
    assert unit.read_text().endswith("one\n")
    before = unit.stat().st_mtime_ns
    with open(m.mnt / "a.txt", "a") as f:
        f.write("two and more\n")
    # This mount serves stale views at once: the old text, marked, until the
    # re-parse lands.
    first = unit.read_text()
    assert first.endswith("one\ntwo and more\n") or 'freshness="stale"' in first
    poll(lambda: 'freshness="current"' in unit.read_text(), what="current")
    text = unit.read_text()
    assert text.endswith("one\ntwo and more\n")
    assert unit.stat().st_size == len(text.encode())
    assert unit.stat().st_mtime_ns > before


def test_review_tree(mount_tree: MountFactory) -> None:
    m = mount_tree({"a.txt": "one\n", "gone.txt": "bye\n", "d/keep.txt": "k\n"})
    with open(m.mnt / "a.txt", "a") as f:
        f.write("two\n")
    (m.mnt / "gone.txt").unlink()
    (m.mnt / "d/new.txt").write_text("hi\n")
    names = sorted(os.listdir(m.mnt / ".review"))
    assert names == ["ALL.diff", "LINEAGE.md", "SUMMARY.md", "a.txt.diff", "d", "gone.txt.diff"]
    assert os.listdir(m.mnt / ".review/d") == ["new.txt.diff"]
    diff = (m.mnt / ".review/a.txt.diff").read_text()
    assert "+two" in diff
    summary = (m.mnt / ".review/SUMMARY.md").read_text()
    assert "| modified | a.txt |" in summary
    assert "| deleted | gone.txt |" in summary
    assert "| added | d/new.txt |" in summary
    assert "+two" in (m.mnt / ".review/ALL.diff").read_text()
    d = m.mnt / ".review/a.txt.diff"
    assert os.getxattr(d, "user.sw.status") == b"modified"
    assert os.getxattr(d, "user.sw.baseline_hash").decode() == h(b"one\n")
    assert os.getxattr(d, "user.sw.current_hash").decode() == h(b"one\ntwo\n")
    assert errno_of(
        lambda: os.getxattr(m.mnt / ".review/d/new.txt.diff", "user.sw.baseline_hash")
    ) == (errno.ENODATA)


def test_versions_tree(mount_tree: MountFactory) -> None:
    m = mount_tree({"r.txt": "v1\n", "noblob.txt": "cur\n", "Makefile": "all:\n"})
    swfs("snapshot", m.mnt, "start")
    (m.mnt / "r.txt").write_text("v2\n")
    vdir = m.mnt / ".versions/r.txt"
    names = sorted(os.listdir(vdir))
    v1, v2 = h(b"v1\n")[:16], h(b"v2\n")[:16]
    assert names == [f"0001-{v1}.txt", f"0002-{v2}.txt"]
    first = vdir / names[0]
    assert first.read_bytes() == b"v1\n"
    assert first.stat().st_size == 3
    out = subprocess.run(["cp", str(first), str(m.mnt / "restored.txt")], check=True)
    assert out.returncode == 0
    assert (m.src / "restored.txt").read_bytes() == b"v1\n"
    assert os.getxattr(first, "user.sw.hash").decode() == h(b"v1\n")
    assert os.getxattr(first, "user.sw.cause") == b"baseline"
    assert os.getxattr(vdir / names[1], "user.sw.cause") == b"write"
    assert os.getxattr(first, "user.sw.recorded_at").decode().startswith("20")
    mk = h(b"all:\n")[:16]
    assert os.listdir(m.mnt / ".versions/Makefile") == [f"0001-{mk}"]
    # A current version whose bytes were never preserved (never overwritten)
    # is served from the native file.
    (cur,) = os.listdir(m.mnt / ".versions/noblob.txt")
    assert (m.mnt / ".versions/noblob.txt" / cur).read_bytes() == b"cur\n"
    # Snapshots.
    assert os.listdir(m.mnt / ".versions/@snapshots") == ["start"]
    assert (m.mnt / ".versions/@snapshots/start/r.txt").read_bytes() == b"v1\n"
    assert (m.mnt / ".versions/@snapshots/start/noblob.txt").read_bytes() == b"cur\n"


def test_unreadable_sources_stay_unreadable(mount_tree: MountFactory) -> None:
    user = ensure_test_user()
    if user is None:
        pytest.skip("needs root to create a test user")

    def setup(src: Path) -> None:
        (src / "private.txt").chmod(0o600)

    m = mount_tree({"private.txt": "secret words\n", "public.txt": "open words\n"}, setup=setup)
    swfs("snapshot", m.mnt, "start")
    ok = as_user(user, "cat", f"{m.mnt}/.parsed/public.txt/content.txt")
    assert ok.returncode == 0, ok.stderr
    assert b"open words" in ok.stdout
    for path in (
        f"{m.mnt}/private.txt",
        f"{m.mnt}/.parsed/private.txt/content.txt",
        f"{m.mnt}/.versions/@snapshots/start/private.txt",
    ):
        denied = as_user(user, "cat", path)
        assert denied.returncode != 0, path
        assert b"Permission denied" in denied.stderr
    (vname,) = os.listdir(m.mnt / ".versions/private.txt")
    denied = as_user(user, "cat", f"{m.mnt}/.versions/private.txt/{vname}")
    assert denied.returncode != 0
    grep = as_user(user, "grep", "-rn", "words", f"{m.mnt}/.parsed")
    assert b"open words" in grep.stdout
    assert b"secret" not in grep.stdout
    # root still can (the kernel's default_permissions lets root through).
    assert b"secret" in (m.mnt / ".parsed/private.txt/content.txt").read_bytes()


def test_engine_faults_answer_eio_and_the_daemon_survives(mount_tree: MountFactory) -> None:
    m = mount_tree({"boom.txt": "x\n", "ok.txt": "fine\n"})
    assert errno_of(lambda: os.getxattr(m.mnt / "boom.txt", "user.sw.hash")) == errno.EIO
    # Listing asks no engine (swfs's names are not listed on native files).
    assert os.listxattr(m.mnt / "boom.txt") == []
    assert errno_of(lambda: (m.mnt / ".parsed/boom.txt/content.txt").read_bytes()) == errno.EIO
    # Native bytes do not depend on the engine.
    assert (m.mnt / "boom.txt").read_bytes() == b"x\n"
    assert (m.mnt / "ok.txt").read_text() == "fine\n"
    assert m.proc.poll() is None
    assert "injected engine fault on boom.txt" in m.log()
    # A failed record does not fail the writer's close(): the bytes are on disk.
    with open(m.mnt / "boom.txt", "a") as f:
        f.write("more\n")
    assert (m.src / "boom.txt").read_bytes() == b"x\nmore\n"
    # Its record is made off the close's reply path (queued).
    poll(lambda: "record_write('boom.txt') failed" in m.log(), what="the failed record logged")


def test_preserve_failure_fails_the_write(mount_tree: MountFactory) -> None:
    m = mount_tree({"nospace.txt": "keep me\n"})
    fd = os.open(m.mnt / "nospace.txt", os.O_WRONLY | os.O_APPEND)
    try:
        assert errno_of(functools.partial(os.write, fd, b"more\n")) == errno.ENOSPC
    finally:
        os.close(fd)
    assert (m.src / "nospace.txt").read_text() == "keep me\n"
    r = subprocess.run(["sh", "-c", f"echo more >> {m.mnt}/nospace.txt"], check=False)
    assert r.returncode != 0
    # A truncate that frees space goes on all the same (swfs.reserve): here
    # the store can keep the bytes after all.
    assert errno_of(functools.partial(os.truncate, m.mnt / "nospace.txt", 0)) == 0
    assert (m.src / "nospace.txt").read_text() == ""
    assert m.calls("preserve", "preserve_freeing")[-2:] == [
        ["preserve", "nospace.txt"],
        ["preserve_freeing", "nospace.txt"],
    ]
    first = sorted((m.mnt / ".versions" / "nospace.txt").iterdir())[0]
    assert first.read_text() == "keep me\n"


def test_a_long_pdf_lists_and_reads_its_pages_while_it_is_parsed(
    mount_tree: MountFactory,
) -> None:
    """A long PDF is parsed range by range (swfs.ranged); its ranges after
    the first are held by tests/evilparsers.py's GatedPdfParser (``.gpdf``)."""
    from parsers import registry
    from parsers._base import ParseOptions
    from parsers.pdf import PdfParser
    from tests import docgen

    pages = 300
    m = mount_tree({"b.txt": "b\n"}, args=["--wait-timeout", "1"])
    data = docgen.pdf_bytes(pages, fact_page=3)
    (m.mnt / "long.gpdf").write_bytes(data)
    view = m.mnt / ".parsed/long.gpdf"
    names = [f"page-{n:04d}.md" for n in range(1, pages + 1)]
    # The view is there once the close's record is made (queued, off its
    # reply path); the listing shows the real units once the first range is in.
    poll(view.exists, what="the new file's view", timeout=120)
    poll(lambda: sorted(os.listdir(view)) == names, what="listed by page", timeout=120)
    listed = subprocess.run(["ls", str(view)], capture_output=True, text=True, check=True)
    assert listed.stdout.split() == names
    first = subprocess.run(
        ["cat", str(view / "page-0003.md")], capture_output=True, text=True, check=True
    ).stdout
    head, _, body = first.partition("\n")
    assert 'freshness="current"' in head
    assert f'hash="b3:{h(data)[:16]}"' in head
    assert docgen.FACT in body
    assert os.getxattr(view / "page-0003.md", "user.sw.freshness") == b"current"
    # A page whose range is held: read after --wait-timeout, saying it is pending.
    last = (view / f"page-{pages:04d}.md").read_text()
    head, _, body = last.partition("\n")
    assert 'freshness="pending"' in head
    assert 'hash="none"' in head
    assert "has not parsed" in body
    assert os.getxattr(view / f"page-{pages:04d}.md", "user.sw.freshness") == b"pending"
    assert os.getxattr(view, "user.sw.freshness") == b"pending"
    _gated(m.src, "long.gpdf", go=True)
    poll(
        lambda: os.getxattr(view, "user.sw.freshness") == b"current",
        what="parsed",
        timeout=120,
    )
    assert sorted(os.listdir(view)) == names
    whole = PdfParser().parse(
        str(m.src / "long.gpdf"),
        registry.file_info(str(m.src / "long.gpdf"), "long.gpdf"),
        ParseOptions(),
    )
    for unit in whole:
        text = (view / unit.name).read_text()
        head, _, body = text.partition("\n")
        assert 'freshness="current"' in head, unit.name
        assert body == unit.text, unit.name
    swfs("check", m.mnt)
