"""Nobody in where they don't belong.

* Nothing outside SRC ever appears in a synthetic tree: symlinks inside SRC
  that point outside (to files and directories, at several depths, one named
  like a document) are never followed by the daemon, so their targets' text
  and bytes are in no ``.parsed``, ``.review`` or ``.versions`` file.
* With allow_other, an unprivileged user sees in the synthetic trees only what
  they could read natively.
* The store and its log are closed to other users.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mountd.launch import mounted_swfs
from tests import docgen
from tests.mountutil import (
    SWFS,
    Mount,
    daemon_env,
    lazy_unmount,
    needs_fuse,
    run_as,
    swfs,
    unprivileged_ids,
    workdir,
    workspace,
)

pytestmark = [pytest.mark.mount, pytest.mark.timeout(120), needs_fuse]

OUTSIDE = b"OUTSIDE-MARKER-7f3a"
SECRET = b"PAYROLL-MARKER-91c2"
HIDDEN = b"HIDDEN-DIR-MARKER-5d1e"
GROUP = b"GROUP-MARKER-44b0"
SYNTHETIC = (".parsed", ".review", ".versions")


def synthetic_bytes(mnt: Path) -> Iterator[tuple[Path, bytes]]:
    """Every regular file of the synthetic trees, read as root (no symlinks there)."""
    for top in SYNTHETIC:
        for dirpath, dirnames, filenames in os.walk(mnt / top):
            for name in filenames + dirnames:
                p = Path(dirpath) / name
                assert not p.is_symlink(), f"a symlink in a synthetic tree: {p}"
            for name in filenames:
                p = Path(dirpath) / name
                yield p, p.read_bytes()


@pytest.fixture
def outside() -> Iterator[Path]:
    d = workdir()
    (d / "secret.txt").write_bytes(OUTSIDE + b" plain text outside the workspace\n")
    (d / "report.pdf").write_bytes(docgen.pdf_bytes(2, fact_page=1, fact=OUTSIDE.decode()))
    (d / "dir").mkdir()
    (d / "dir" / "inner.txt").write_bytes(OUTSIDE + b" in a directory\n")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_symlinks_out_of_src_are_never_followed(outside: Path) -> None:
    def populate(src: Path) -> None:
        (src / "real.txt").write_text("an ordinary file\n")
        (src / "a" / "b" / "c").mkdir(parents=True)
        os.symlink("/etc/passwd", src / "evil.pdf")
        os.symlink("/etc/passwd", src / "passwd.txt")
        os.symlink(outside / "secret.txt", src / "a" / "leak.txt")
        os.symlink(outside / "report.pdf", src / "a" / "b" / "report.pdf")
        os.symlink(outside / "dir", src / "a" / "b" / "c" / "outdir")
        os.symlink(outside, src / "outroot")
        os.symlink("../../../../../../../../" + str(outside / "secret.txt"), src / "a" / "rel.md")
        os.symlink(".", src / "a" / "loop")
        os.symlink("real.txt", src / "alias.txt")

    with workspace(populate=populate) as m:
        # Changes through the mount and behind its back: a file replaced by a
        # symlink to the outside, and a symlink renamed to a document name.
        (m.mnt / "doc.txt").write_text("version one\n")
        swfs("sync", m.mnt)
        os.unlink(m.src / "doc.txt")
        os.symlink(outside / "secret.txt", m.src / "doc.txt")
        os.rename(m.mnt / "a" / "leak.txt", m.mnt / "a" / "leak2.docx")
        time.sleep(2.5)  # two rescans
        swfs("sync", m.mnt)
        # The native view shows the links as links (the kernel follows them, not swfs).
        assert os.readlink(m.mnt / "evil.pdf") == "/etc/passwd"
        passwd = Path("/etc/passwd").read_bytes()[:64]
        seen = 0
        for path, data in synthetic_bytes(m.mnt):
            seen += 1
            assert OUTSIDE not in data, path
            assert passwd not in data, path
        assert seen > 0
        for name in ("evil.pdf", "passwd.txt", "a/leak2.docx", "a/b/report.pdf", "doc.txt"):
            units = m.mnt / ".parsed" / name
            if units.is_dir():
                for unit in units.iterdir():
                    assert OUTSIDE not in unit.read_bytes()
        for sub in ("outroot", "a/b/c/outdir", "a/loop"):
            assert not (m.mnt / ".parsed" / sub / "secret.txt").exists()
            assert not (m.mnt / ".versions" / sub).exists()
        # The recorded version of doc.txt is its own old bytes, not the link's target.
        versions = m.mnt / ".versions" / "doc.txt"
        if versions.is_dir():
            for v in versions.iterdir():
                assert v.read_bytes() in (b"version one\n",), v
        grep = subprocess.run(
            ["grep", "-r", "-l", OUTSIDE.decode(), *SYNTHETIC],
            cwd=m.mnt,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert grep.stdout == b""
        show = swfs("show", m.mnt, "evil.pdf", check=False)
        assert OUTSIDE.decode() not in show.stdout
        assert "root:" not in show.stdout
        swfs("check", m.mnt)
        assert m.alive()


@pytest.fixture
def shared() -> Iterator[tuple[Mount, tuple[int, int]]]:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")

    def populate(src: Path) -> None:
        (src / "public.txt").write_text("public figures\n")

    with workspace(populate=populate) as m:
        mnt = m.mnt
        (mnt / "secret.txt").write_bytes(SECRET + b" root only\n")
        os.chmod(mnt / "secret.txt", 0o600)
        (mnt / "team.txt").write_bytes(GROUP + b" for the group\n")
        os.chown(mnt / "team.txt", 0, ids[1])
        os.chmod(mnt / "team.txt", 0o640)
        (mnt / "private").mkdir()
        os.chmod(mnt / "private", 0o700)
        (mnt / "private" / "inner.txt").write_bytes(HIDDEN + b" mode 0644 in a 0700 dir\n")
        os.chmod(mnt / "private" / "inner.txt", 0o644)
        # A second version of each, so .versions and .review hold old bytes too.
        for name in ("secret.txt", "team.txt", "private/inner.txt"):
            with open(mnt / name, "ab") as f:
                f.write(b"second line\n")
        swfs("sync", mnt)
        yield m, ids


def _user_grep(ids: tuple[int, int], mnt: Path, needle: bytes) -> bytes:
    """grep -r as the user over the synthetic trees: the matching text it saw.

    ALL.diff is left out here: its leak is test_review_all_diff_does_not_leak.
    """
    proc = subprocess.run(
        ["grep", "-r", "-a", "--exclude=ALL.diff", needle.decode(), *SYNTHETIC],
        cwd=mnt,
        capture_output=True,
        timeout=60,
        check=False,
        user=ids[0],
        group=ids[1],
        extra_groups=[],
    )
    return proc.stdout


def test_user_cannot_read_root_only_files_through_synthetic_trees(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    mnt = m.mnt
    assert run_as(ids, lambda: (mnt / "secret.txt").read_bytes()) == errno.EACCES
    unit = mnt / ".parsed" / "secret.txt" / "content.txt"
    assert unit.is_file()
    assert run_as(ids, lambda: unit.read_bytes()) == errno.EACCES
    versions = sorted((mnt / ".versions" / "secret.txt").iterdir())
    assert len(versions) >= 2
    for v in versions:
        assert run_as(ids, lambda v=v: v.read_bytes()) == errno.EACCES, v
    assert _user_grep(ids, mnt, SECRET) == b""
    # The public file stays readable, so the denial above is about permissions.
    public = mnt / ".parsed" / "public.txt" / "content.txt"
    assert run_as(ids, lambda: public.read_bytes()) == 0


def test_review_diffs_do_not_leak_unreadable_files(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    diff = m.mnt / ".review" / "secret.txt.diff"
    assert SECRET in diff.read_bytes()  # root sees it
    assert run_as(ids, lambda: diff.read_bytes()) == errno.EACCES
    assert _user_grep(ids, m.mnt, SECRET) == b""


def test_review_summary_does_not_name_hidden_files(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    summary = m.mnt / ".review" / "SUMMARY.md"
    assert "private/inner.txt" in summary.read_text()  # root sees it

    def read_as_user() -> None:
        if b"private/inner.txt" in summary.read_bytes():
            raise OSError(errno.EDOM, "leaked")

    assert run_as(ids, read_as_user) in (0, errno.EACCES)


def test_review_all_diff_does_not_leak(shared: tuple[Mount, tuple[int, int]]) -> None:
    m, ids = shared
    all_diff = m.mnt / ".review" / "ALL.diff"
    assert SECRET in all_diff.read_bytes()

    def read_as_user() -> None:
        data = all_diff.read_bytes()
        if SECRET in data or HIDDEN in data:
            raise OSError(errno.EDOM, "leaked")

    assert run_as(ids, read_as_user) in (0, errno.EACCES)


def test_files_in_a_closed_directory_stay_closed(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    mnt = m.mnt
    assert run_as(ids, lambda: (mnt / "private" / "inner.txt").read_bytes()) == errno.EACCES
    unit = mnt / ".parsed" / "private" / "inner.txt" / "content.txt"
    assert HIDDEN in unit.read_bytes()
    assert run_as(ids, lambda: unit.read_bytes()) == errno.EACCES
    for v in (mnt / ".versions" / "private" / "inner.txt").iterdir():
        assert run_as(ids, lambda v=v: v.read_bytes()) == errno.EACCES, v
    assert run_as(ids, lambda: (mnt / ".review" / "private" / "inner.txt.diff").read_bytes()) in (
        errno.EACCES,
        errno.ENOENT,
    )
    assert _user_grep(ids, mnt, HIDDEN) == b""


def test_group_readable_file_works_for_the_group(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    mnt = m.mnt
    assert run_as(ids, lambda: (mnt / "team.txt").read_bytes()) == 0
    unit = mnt / ".parsed" / "team.txt" / "content.txt"
    assert run_as(ids, lambda: unit.read_bytes()) == 0
    for v in (mnt / ".versions" / "team.txt").iterdir():
        assert run_as(ids, lambda v=v: v.read_bytes()) == 0, v
    assert GROUP in _user_grep(ids, mnt / ".parsed", GROUP) or GROUP in _user_grep(ids, mnt, GROUP)
    # Another group: denied, like the native file.
    other = (ids[0], 0)
    assert run_as(other, lambda: (mnt / "team.txt").read_bytes()) == errno.EACCES
    assert run_as(other, lambda: unit.read_bytes()) == errno.EACCES


def _store_is_closed(store: Path, ids: tuple[int, int] | None, *, top: bool = True) -> None:
    if top:
        assert stat.S_IMODE(os.stat(store).st_mode) == 0o700
    for child in store.iterdir():
        mode = stat.S_IMODE(os.lstat(child).st_mode)
        assert not mode & 0o077 or stat.S_ISSOCK(os.lstat(child).st_mode), f"{child}: {oct(mode)}"
    for dirpath, dirnames, filenames in os.walk(store):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            mode = stat.S_IMODE(os.lstat(p).st_mode)
            assert not mode & stat.S_IWOTH, f"{p} is world-writable ({oct(mode)})"
    if ids is not None:
        if top:
            assert run_as(ids, lambda: os.listdir(store)) == errno.EACCES
        files = [p for p in store.rglob("*") if p.is_file() and not p.is_socket()]
        assert files
        for f in files[:50]:
            assert run_as(ids, lambda f=f: f.read_bytes()) == errno.EACCES, f


def test_store_and_log_are_closed_to_others() -> None:
    """A daemonized mount (no -f): the store is 0700, daemon.log 0600, blobs unreadable."""
    ids = unprivileged_ids()
    root = workdir()
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "a.txt").write_text("first\n")
    try:
        proc = subprocess.run(
            [SWFS, "mount", "--rescan-interval", "1", str(src), str(mnt)],
            capture_output=True,
            text=True,
            timeout=60,
            env=daemon_env(),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert mounted_swfs(mnt)
        (mnt / "a.txt").write_text("second\n")
        os.unlink(mnt / "a.txt")  # preserved by hard link into the blob store
        swfs("sync", mnt)
        store = src / ".swfs"
        assert not (mnt / ".swfs").exists()
        assert ".swfs" not in os.listdir(mnt)
        log = store / "daemon.log"
        assert log.exists()
        assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
        _store_is_closed(store, ids)
    finally:
        subprocess.run([SWFS, "umount", str(mnt)], capture_output=True, timeout=60, check=False)
        _reap_daemon_of(mnt)
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


def _reap_daemon_of(mnt: Path) -> None:
    """The daemonized mount is not our child: find it by its mount point, end it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.fsencode(str(mnt)) in argv and any(b"swfs" in a for a in argv[:3]):
                pids.append(int(entry))
        if not pids:
            break
        if time.monotonic() > deadline - 5:
            for pid in pids:
                os.kill(pid, 9)
        time.sleep(0.2)
    if mounted_swfs(mnt):
        lazy_unmount(mnt)


def test_preexisting_store_directory_is_closed() -> None:
    """--store pointing at an existing 0755 directory: nothing in it is open to others.

    (swfs leaves the directory itself 0755; its subdirectories are 0700.)"""
    ids = unprivileged_ids()
    root = workdir()
    store = root / "store"
    store.mkdir()
    os.chmod(store, 0o755)
    src, mnt = root / "src", root / "mnt"
    src.mkdir()
    mnt.mkdir()
    (src / "a.txt").write_text("first\n")
    from tests.mountutil import start_mount

    m = start_mount(src, mnt, "--store", str(store))
    try:
        (mnt / "a.txt").write_text("second\n")
        os.unlink(mnt / "a.txt")  # preserved by hard link: a blob with the file's mode
        swfs("sync", mnt)
        _store_is_closed(store, ids, top=False)
    finally:
        m.stop()
        if not mounted_swfs(mnt):
            shutil.rmtree(root, ignore_errors=True)


def _until(deadline_s: float, fn: Callable[[], bool]) -> bool:
    end = time.monotonic() + deadline_s
    while True:
        if fn():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)


def test_permission_changes_reach_history_and_views(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    """A file made private later: its older views and versions close with it
    (at once when the chmod goes through the mount; see the next test)."""
    m, ids = shared
    mnt = m.mnt
    public = mnt / "public.txt"
    with open(public, "ab") as f:
        f.write(b"now with " + SECRET + b"\n")
    swfs("sync", mnt)
    unit = mnt / ".parsed" / "public.txt" / "content.txt"
    assert run_as(ids, lambda: unit.read_bytes()) == 0
    os.chmod(public, 0o600)
    assert run_as(ids, lambda: public.read_bytes()) == errno.EACCES
    assert _until(3, lambda: run_as(ids, lambda: unit.read_bytes()) == errno.EACCES)
    for v in (mnt / ".versions" / "public.txt").iterdir():
        assert _until(3, lambda v=v: run_as(ids, lambda: v.read_bytes()) == errno.EACCES), v
    diff = mnt / ".review" / "public.txt.diff"
    assert _until(3, lambda: run_as(ids, lambda: diff.read_bytes()) == errno.EACCES)
    assert _user_grep(ids, mnt, SECRET) == b""


def test_chmod_closes_parsed_view_at_once(shared: tuple[Mount, tuple[int, int]]) -> None:
    """The kernel keeps a generated file's attributes for 60 s: only the
    invalidation a chmod through the mount sends can close the view here."""
    m, ids = shared
    public = m.mnt / "public.txt"
    unit = m.mnt / ".parsed" / "public.txt" / "content.txt"
    assert run_as(ids, lambda: unit.read_bytes()) == 0  # the kernel caches its attributes now
    os.chmod(public, 0o600)
    assert run_as(ids, lambda: unit.read_bytes()) == errno.EACCES


def test_deleted_private_file_keeps_its_history_private(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    mnt = m.mnt
    os.unlink(mnt / "secret.txt")
    swfs("sync", mnt)
    versions = list((mnt / ".versions" / "secret.txt").iterdir())
    assert versions
    assert any(SECRET in v.read_bytes() for v in versions)  # root: history is kept
    for v in versions:
        assert run_as(ids, lambda v=v: v.read_bytes()) == errno.EACCES, v
    diff = mnt / ".review" / "secret.txt.diff"
    if diff.exists():
        assert run_as(ids, lambda: diff.read_bytes()) == errno.EACCES
    assert _user_grep(ids, mnt, SECRET) == b""


def test_snapshots_keep_each_file_private(shared: tuple[Mount, tuple[int, int]]) -> None:
    m, ids = shared
    swfs("snapshot", m.mnt, "s1")
    snap = m.mnt / ".versions" / "@snapshots" / "s1"
    assert SECRET in (snap / "secret.txt").read_bytes()
    assert run_as(ids, lambda: (snap / "secret.txt").read_bytes()) == errno.EACCES
    assert run_as(ids, lambda: (snap / "private" / "inner.txt").read_bytes()) == errno.EACCES
    assert run_as(ids, lambda: (snap / "public.txt").read_bytes()) == 0
    assert _user_grep(ids, m.mnt, SECRET) == b""
    assert _user_grep(ids, m.mnt, HIDDEN) == b""
