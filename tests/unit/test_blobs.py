"""The blob store and the file helpers under it."""

from __future__ import annotations

import errno
import multiprocessing
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import blake3
import pytest

from swfs.store import blobs, fsutil
from swfs.store.blobs import BLOB_MODE, BlobStore, HashMismatch
from tests.tmpfs import small_tmpfs


def b3(data: bytes) -> str:
    return blake3.blake3(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


def temps(store: BlobStore) -> list[str]:
    return os.listdir(store.tmp)


# -- fsutil


def test_hash_small_and_big_agree_with_blake3(tmp_path: Path) -> None:
    small = b"hello\n"
    big = os.urandom(fsutil.SMALL_FILE + 12345)
    for data in (b"", small, big):
        p = tmp_path / "f"
        p.write_bytes(data)
        assert fsutil.hash_bytes(data) == b3(data)
        assert fsutil.hash_file(p) == b3(data)
        assert fsutil.hash_file(p, mmap=False) == b3(data)
        fd = os.open(p, os.O_RDONLY)
        try:
            os.lseek(fd, 3, os.SEEK_SET)  # the position must not matter
            assert fsutil.hash_fd(fd) == b3(data)
        finally:
            os.close(fd)


def test_save_file_replaces_atomically(tmp_path: Path) -> None:
    p = tmp_path / "params"
    fsutil.save_file(p, b"one")
    fsutil.save_file(p, b"two", mode=0o640)
    assert p.read_bytes() == b"two"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert os.listdir(tmp_path) == ["params"]


def test_save_file_failure_leaves_old_file(tmp_path: Path) -> None:
    p = tmp_path / "params"
    fsutil.save_file(p, b"old")
    with pytest.raises(TypeError):
        fsutil.save_file(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["params"]


def test_copy_fd_copies_everything(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.lseek(src, 100, os.SEEK_SET)
        assert fsutil.copy_fd(src, dst) == len(data)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == data


def _refuse(err: int) -> Callable[..., int]:
    def call(*_args: object) -> int:
        raise OSError(err, os.strerror(err))

    return call


@pytest.mark.parametrize("fallbacks", [["copy_file_range"], ["copy_file_range", "sendfile"]])
def test_copy_fd_fallbacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallbacks: list[str]
) -> None:
    for name in fallbacks:
        monkeypatch.setattr(
            os, name, _refuse(errno.EXDEV if name == "copy_file_range" else errno.EINVAL)
        )
    data = os.urandom(fsutil.CHUNK + 5)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert fsutil.copy_fd(src, dst) == len(data)
    finally:
        os.close(src)
        os.close(dst)
    assert (tmp_path / "dst").read_bytes() == data


def test_copy_fd_raises_real_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "copy_file_range", _refuse(errno.EIO))
    (tmp_path / "src").write_bytes(b"x")
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with pytest.raises(OSError, match="Input/output error"):
            fsutil.copy_fd(src, dst)
    finally:
        os.close(src)
        os.close(dst)


def test_reflink_answers_or_declines(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x" * 8192)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fsutil.reflink(src, dst):
            assert (tmp_path / "dst").read_bytes() == b"x" * 8192
        else:
            assert (tmp_path / "dst").read_bytes() == b""
    finally:
        os.close(src)
        os.close(dst)


def test_reflink_raises_real_errors(tmp_path: Path) -> None:
    (tmp_path / "src").write_bytes(b"x")
    src = os.open(tmp_path / "src", os.O_RDONLY)
    os.close(src)
    with pytest.raises(OSError, match="Bad file descriptor") as info:
        fsutil.reflink(src, src)
    assert info.value.errno == errno.EBADF


# -- the store


def test_put_bytes_dedups_and_lays_out(store: BlobStore) -> None:
    h = store.put_bytes(b"payload")
    assert h == b3(b"payload")
    assert store.put_bytes(b"payload") == h
    p = store.path(h)
    assert p == store.manifests / h[:2] / h[2:]
    assert store.read_bytes(h) == b"payload"
    assert stat.S_IMODE(p.stat().st_mode) == BLOB_MODE
    assert stat.S_IMODE(p.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.root.stat().st_mode) == 0o700
    assert list(store.iter_hashes()) == [h]
    assert store.has(h)
    assert store.size(h) == len(b"payload")
    assert store.total_bytes() == p.stat().st_blocks * 512  # inline: one file
    assert store.verify(h)
    assert temps(store) == []


def test_blob_is_not_rewritten(store: BlobStore) -> None:
    h = store.put_bytes(b"payload")
    ino = store.path(h).stat().st_ino
    store.put_bytes(b"payload")
    assert store.path(h).stat().st_ino == ino


def test_concurrent_store_keeps_first_blob(
    store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another writer stored the same bytes between our check and our commit.
    h = store.put_bytes(b"payload")
    ino = store.path(h).stat().st_ino
    monkeypatch.setattr(store, "has", lambda _h: False)
    assert store.put_bytes(b"payload") == h
    assert store.path(h).stat().st_ino == ino
    assert temps(store) == []


def test_bad_hash_names_are_refused(store: BlobStore) -> None:
    for bad in ("../etc/passwd", "AB" * 32, "ab", "g" * 64):
        with pytest.raises(ValueError, match="not a blake3"):
            store.path(bad)


def test_open_size_remove(store: BlobStore) -> None:
    h = store.put_bytes(b"abc")
    fd = store.open(h)
    try:
        assert os.read(fd, 10) == b"abc"
    finally:
        os.close(fd)
    store.remove(h)
    assert not store.has(h)
    assert not store.verify(h)
    store.remove(h)  # idempotent
    with pytest.raises(FileNotFoundError):
        store.open(h)


def test_put_fd_stores_and_verifies(store: BlobStore, tmp_path: Path) -> None:
    data = os.urandom(fsutil.SMALL_FILE * 2 + 1)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    fd = os.open(src, os.O_RDONLY)
    try:
        h = store.put_fd(fd, expected=b3(data))
        assert store.put_fd(fd) == h
    finally:
        os.close(fd)
    assert h == b3(data)
    assert store.read_bytes(h) == data
    assert store.verify(h)
    assert temps(store) == []


def test_put_fd_hash_mismatch_stores_nothing(store: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "f"
    src.write_bytes(b"actual bytes")
    fd = os.open(src, os.O_RDONLY)
    try:
        with pytest.raises(HashMismatch) as info:
            store.put_fd(fd, expected=b3(b"what the caller thought"))
    finally:
        os.close(fd)
    assert info.value.actual == b3(b"actual bytes")
    assert list(store.iter_hashes()) == []
    assert temps(store) == []


def test_verify_detects_corruption(store: BlobStore) -> None:
    h = store.put_bytes(b"good bytes")
    p = store.path(h)
    p.chmod(0o600)
    p.write_bytes(b"bad bytes!")
    assert not store.verify(h)


def test_link_in_keeps_bytes_after_unlink(store: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "doc.txt"
    f.write_bytes(b"version one")
    h = store.link_in(f, expected=b3(b"version one"))
    assert f.stat().st_nlink == 1  # chunked, not linked: the inode stays the file's
    f.unlink()
    assert store.read_bytes(h) == b"version one"
    assert store.verify(h)
    assert temps(store) == []


def test_link_in_rename_over(store: BlobStore, tmp_path: Path) -> None:
    # An editor's save: write a temp, rename it over the original.
    f = tmp_path / "doc.txt"
    f.write_bytes(b"old")
    (tmp_path / ".doc.txt.swp").write_bytes(b"new")
    h = store.link_in(f)
    os.rename(tmp_path / ".doc.txt.swp", f)
    assert f.read_bytes() == b"new"
    assert store.read_bytes(h) == b"old"


def test_link_in_with_other_links_copies(store: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "doc.txt"
    f.write_bytes(b"shared inode")
    os.link(f, tmp_path / "other-name.txt")
    h = store.link_in(f)
    assert store.path(h).stat().st_ino != f.stat().st_ino
    # Writing through the surviving name must not touch the blob.
    (tmp_path / "other-name.txt").write_bytes(b"changed")
    assert store.verify(h)
    assert store.read_bytes(h) == b"shared inode"


def test_link_in_mismatch_keeps_nothing(store: BlobStore, tmp_path: Path) -> None:
    f = tmp_path / "doc.txt"
    f.write_bytes(b"changed behind our back")
    with pytest.raises(HashMismatch, match="doc.txt"):
        store.link_in(f, expected=b3(b"recorded"))
    assert f.stat().st_nlink == 1
    assert list(store.iter_hashes()) == []
    assert temps(store) == []


def test_link_in_copy_path_checks_existing_blob(store: BlobStore, tmp_path: Path) -> None:
    recorded = store.put_bytes(b"recorded")
    f = tmp_path / "doc.txt"
    f.write_bytes(b"changed behind our back")
    os.link(f, tmp_path / "second-name.txt")  # forces the copy path
    with pytest.raises(HashMismatch, match="doc.txt"):
        store.link_in(f, expected=recorded)
    f.write_bytes(b"recorded")
    assert store.link_in(f, expected=recorded) == recorded
    assert list(store.iter_hashes()) == [recorded]


def test_link_in_existing_blob_dedups(store: BlobStore, tmp_path: Path) -> None:
    h = store.put_bytes(b"same")
    f = tmp_path / "doc.txt"
    f.write_bytes(b"same")
    assert store.link_in(f) == h
    assert f.stat().st_nlink == 1
    assert temps(store) == []


def test_cleanup_temp(store: BlobStore) -> None:
    # A pid that cannot be alive: above pid_max.
    (store.tmp / "99999999-deadbeef").write_bytes(b"partial")
    (store.tmp / "garbage").write_bytes(b"partial")
    mine = store.tmp / f"{os.getpid()}-cafe"
    mine.write_bytes(b"in progress")
    assert store.cleanup_temp() == 2
    assert temps(store) == [mine.name]


# -- disk full


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    with small_tmpfs(mnt, "1m"):
        yield mnt


def test_disk_full(tiny_tmpfs: Path, tmp_path: Path) -> None:
    store = BlobStore(tiny_tmpfs / "blobs")
    kept = [store.put_bytes(f"small blob {i}".encode() * 100) for i in range(5)]
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(4 * 1024 * 1024))

    fd = os.open(big, os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="No space left") as info:
            store.put_fd(fd)
    finally:
        os.close(fd)
    assert info.value.errno == errno.ENOSPC
    assert str(tiny_tmpfs) in str(info.value)

    with pytest.raises(OSError, match="No space left") as info:
        store.put_bytes(big.read_bytes())
    assert info.value.errno == errno.ENOSPC

    assert sorted(store.iter_hashes()) == sorted(kept)
    assert all(store.verify(h) for h in kept)
    assert temps(store) == []
    # The space is given back: small writes work again.
    assert store.verify(store.put_bytes(b"after the failure"))


def test_link_in_across_filesystems_copies(tiny_tmpfs: Path, tmp_path: Path) -> None:
    store = BlobStore(tiny_tmpfs / "blobs")
    f = tmp_path / "doc.txt"
    f.write_bytes(b"on another filesystem")
    h = store.link_in(f, expected=b3(b"on another filesystem"))
    f.unlink()
    assert store.read_bytes(h) == b"on another filesystem"
    assert stat.S_IMODE(store.path(h).stat().st_mode) == BLOB_MODE
    assert temps(store) == []


# -- keeping a file by reflink (clone_fd)


@pytest.fixture(params=["tmp", "reflink"])
def clone_root(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """tmp_path, and a folder on xfs or btrfs (tests/conftest.py ``reflink_dir``)."""
    if request.param == "tmp":
        return tmp_path
    where = request.getfixturevalue("reflink_dir")
    if isinstance(where, str):
        pytest.skip(where)
    d = Path(where) / f"clone-{os.getpid()}-{tmp_path.name}"
    d.mkdir(parents=True)
    _REFLINK_ROOTS.add(d)
    return d


_REFLINK_ROOTS: set[Path] = set()  # clone_root's folders on xfs or btrfs


def test_clone_fd_keeps_the_exact_bytes_or_declines(clone_root: Path) -> None:
    store = BlobStore(clone_root / "blobs")
    data = os.urandom(3 << 20) + b"\0" * (1 << 20) + b"tail"
    (clone_root / "f").write_bytes(data)
    fd = os.open(clone_root / "f", os.O_RDONLY)
    try:
        cloned = store.clone_fd(fd, expected=b3(data))
    finally:
        os.close(fd)
    assert temps(store) == []
    if not cloned:
        assert not store.has(b3(data))
        assert not _on_reflink_fs(clone_root), "declined on xfs"
        return
    assert store.has(b3(data))
    # The file changes in place afterwards: the blob does not (copy on write).
    with open(clone_root / "f", "r+b") as f:
        f.seek(1 << 20)
        f.write(b"changed")
    r = store.reader(b3(data))
    assert r.pread(len(data), 0) == data
    assert store.verify(b3(data))


def _on_reflink_fs(root: Path) -> bool:
    return any(root.is_relative_to(d) for d in _REFLINK_ROOTS)


def test_clone_fd_stores_a_chunk_manifest(clone_root: Path) -> None:
    """A clone is a blob like any other: a manifest naming chunks on a
    fixed grid (holes and zero pieces as nothing), read, verified and
    collected like chunks of put_fd; no whole-file blob of the old format."""
    store = BlobStore(clone_root / "blobs")
    piece = blobs.CLONE_CHUNK
    data = bytearray(os.urandom(piece)) + bytes(piece) + os.urandom(piece) + b"tail"
    f = clone_root / "f"
    f.write_bytes(data)
    with open(f, "r+b") as fh:  # a hole over the third piece
        fsutil.fallocate(
            fh.fileno(), fsutil.FALLOC_FL_PUNCH_HOLE | fsutil.FALLOC_FL_KEEP_SIZE, 2 * piece, piece
        )
    data[2 * piece : 3 * piece] = bytes(piece)
    data = bytes(data) + os.urandom(100)
    with open(f, "ab") as fh:
        fh.write(data[-100:])
    h = b3(data)
    fd = os.open(f, os.O_RDONLY)
    try:
        cloned = store.clone_fd(fd, expected=h)
    finally:
        os.close(fd)
    if not _on_reflink_fs(clone_root):
        assert not cloned
        assert not store.has(h)
        pytest.skip("no reflink here: the clone declined")
    assert cloned
    assert not (store.root / h[:2] / h[2:]).exists(), "a whole-file blob"
    m = store.manifest(h)
    assert m is not None
    assert m.size == len(data)
    assert [(e.offset, e.length) for e in m.extents] == [(0, piece), (3 * piece, 4 + 100)]
    assert all(e.chunk is not None for e in m.extents)
    raw = store.chunk_path(m.extents[0].chunk or "").read_bytes()
    assert raw[:1] == b"c"
    assert raw[blobs.CLONE_AT :] == data[:piece]
    # The file is written in place: the kept bytes are not.
    with open(f, "r+b") as fh:
        fh.write(b"overwritten" * 1000)
    assert store.read_bytes(h) == data
    assert store.verify(h)
    assert list(store.bad_chunks()) == []
    assert store.collect().chunks_removed == 0
    assert temps(store) == []


def test_clone_fd_leaves_small_files_to_put_fd(clone_root: Path) -> None:
    store = BlobStore(clone_root / "blobs")
    data = os.urandom(blobs.CLONE_MIN)
    (clone_root / "f").write_bytes(data)
    fd = os.open(clone_root / "f", os.O_RDONLY)
    try:
        assert not store.clone_fd(fd, expected=b3(data))
    finally:
        os.close(fd)
    assert not store.has(b3(data))
    assert temps(store) == []


def test_clone_fd_of_other_bytes_stores_nothing(clone_root: Path) -> None:
    store = BlobStore(clone_root / "blobs")
    (clone_root / "f").write_bytes(b"these bytes" * 200_000)  # past CLONE_MIN
    fd = os.open(clone_root / "f", os.O_RDONLY)
    try:
        try:
            cloned = store.clone_fd(fd, expected=b3(b"other bytes"))
        except HashMismatch:
            cloned = True
    finally:
        os.close(fd)
    assert not store.has(b3(b"other bytes"))
    assert temps(store) == []
    if _on_reflink_fs(clone_root):
        assert cloned  # raised, on a file system that clones


def _die_cloning(root: str, path: str, expected: str, linked: bool) -> None:
    store = BlobStore(Path(root))
    link_pending = store._link_pending

    def crash(*a: object, **_k: object) -> None:
        if linked:
            link_pending(*a)  # type: ignore[arg-type]
        os._exit(3)  # a crash: no cleanup of any kind

    store._link_pending = crash  # type: ignore[method-assign]
    fd = os.open(path, os.O_RDONLY)
    store.clone_fd(fd, expected=expected)
    os._exit(4)  # declined: nothing cloned, nothing to crash in


@pytest.mark.parametrize("linked", [False, True], ids=["clones-in-tmp", "clones-linked"])
def test_a_crash_while_cloning_leaves_only_litter(clone_root: Path, linked: bool) -> None:
    """Killed with the pieces cloned into temps, or linked as chunks but not
    yet named by a manifest: no blob, and what is left goes with
    ``cleanup_temp`` and ``collect``; cloning again works."""
    store = BlobStore(clone_root / "blobs")
    data = os.urandom(2 * blobs.CLONE_CHUNK + 5)
    f = clone_root / "f"
    f.write_bytes(data)
    proc = multiprocessing.get_context("fork").Process(
        target=_die_cloning, args=(str(store.root), str(f), b3(data), linked)
    )
    proc.start()
    proc.join(60)
    if not _on_reflink_fs(clone_root):
        assert proc.exitcode == 4
        pytest.skip("no reflink here: the clone declined")
    assert proc.exitcode == 3
    assert not store.has(b3(data))
    chunks = list(store.iter_chunks())
    assert len(chunks) == (3 if linked else 0)
    assert len(temps(store)) == (1 if linked else 4)  # and the manifest's temp
    store.cleanup_temp()
    assert temps(store) == []
    assert store.collect().chunks_removed == len(chunks)
    fd = os.open(f, os.O_RDONLY)
    try:
        assert store.clone_fd(fd, expected=b3(data))
    finally:
        os.close(fd)
    assert store.read_bytes(b3(data)) == data
