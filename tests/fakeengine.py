"""An in-memory EngineAPI for testing the daemon without the real engine.

It scans SRC on open (every regular file becomes version 1, its bytes kept in
``store/blobs``), parses text files into one ``content.txt`` unit, and diffs
the tree against that baseline.  Every engine hook is appended to a JSON-lines
call log so tests (in another process) can check the daemon's call sequence.

Names steer its behaviour, so a test picks it by naming a file:
``boom*``   file_state / check_file / parsed_view raise RuntimeError
``nospace*`` preserve raises ENOSPC
``pending*`` the view is pending until wait_view
``stale*``   the view is stale (older text) until wait_view
``noblob*``  the current version's bytes are not kept (served from the file)
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import trio
import trio.lowlevel

from swfs.api import (
    Access,
    Cause,
    ChangeStatus,
    FileState,
    Freshness,
    Hash,
    ParsedView,
    RelPath,
    RenderedUnit,
    ReviewEntry,
    Version,
)

TEXT_EXTS = frozenset({".txt", ".md", ".csv", ".py", ".json"})


def _hash(data: bytes) -> Hash:
    return Hash(blake3.blake3(data).hexdigest())


@dataclass
class _Record:
    versions: list[Version] = field(default_factory=list)
    viewed: set[str] = field(default_factory=set)  # 'pending'/'stale' flags already satisfied

    @property
    def hash(self) -> Hash | None:
        return self.versions[-1].hash if self.versions else None


class FakeEngine:
    def __init__(
        self,
        src: Path,
        store: Path | None = None,
        *,
        calls: Path | None = None,
        crash_after: float | None = None,
    ) -> None:
        self.crash_after = crash_after
        self._src = Path(src).resolve()
        self._store = Path(store) if store is not None else self._src / ".swfs"
        (self._store / "blobs").mkdir(parents=True, exist_ok=True)
        self.calls_file = calls
        self.calls: list[list[str]] = []
        self._listeners: list[Callable[[RelPath], None]] = []
        self._files: dict[str, _Record] = {}
        self._gone: dict[str, _Record] = {}  # deleted paths keep their history
        self._access: dict[str, Access] = {}
        self._baseline: dict[str, Hash] = {}
        self._snapshots: dict[str, dict[RelPath, Hash]] = {}
        for rel in self._walk():
            data = self._read(rel)
            if data is not None:
                self._add_version(rel, data, Cause.BASELINE)
                self._baseline[rel] = _hash(data)
        self._snapshots["start"] = {RelPath(r): h for r, h in self._baseline.items()}

    @property
    def src(self) -> Path:
        return self._src

    @property
    def store_dir(self) -> Path:
        return self._store

    @classmethod
    @contextmanager
    def open(
        cls,
        src: Path,
        store: Path | None = None,
        *,
        calls: Path | None = None,
        crash_after: float | None = None,
    ) -> Iterator[FakeEngine]:
        yield cls(src, store, calls=calls, crash_after=crash_after)

    # -- plumbing

    def _log(self, *call: str) -> None:
        self.calls.append(list(call))
        if self.calls_file is not None:
            with self.calls_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps(list(call)) + "\n")

    def _notify(self, rel: str) -> None:
        for fn in self._listeners:
            fn(RelPath(rel))

    def _walk(self) -> Iterable[str]:
        for dirpath, dirnames, filenames in os.walk(self._src):
            rel_dir = os.path.relpath(dirpath, self._src)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d != ".swfs"]
                rel_dir = ""
            for name in filenames:
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if stat.S_ISREG(os.lstat(self._src / rel).st_mode):
                    yield rel

    def _read(self, rel: str) -> bytes | None:
        try:
            fd = os.open(self._src / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        finally:
            os.close(fd)

    def _add_version(self, rel: str, data: bytes, cause: Cause) -> None:
        rec = self._files.setdefault(rel, _Record())
        h = _hash(data)
        if rec.hash == h:
            return
        if not os.path.basename(rel).startswith("noblob"):
            (self._store / "blobs" / h).write_bytes(data)
        rec.versions.append(Version(len(rec.versions) + 1, h, time.time(), cause, True, len(data)))
        rec.viewed.clear()
        self._remember_access(rel)

    def _remember_access(self, rel: str) -> None:
        try:
            st = os.lstat(self._src / rel) if rel else os.stat(self._src)
        except OSError:
            return
        self._access[rel] = Access(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))

    @staticmethod
    def _fault(rel: str) -> None:
        if os.path.basename(rel).startswith("boom"):
            raise RuntimeError(f"fake engine fault on {rel}")

    # -- native files

    def freshness(self, rel: RelPath) -> Freshness | None:
        state = self.file_state(rel)
        return None if state is None else state.freshness

    def file_state(self, rel: RelPath) -> FileState | None:
        self._fault(rel)
        rec = self._files.get(rel)
        if rec is None:
            return None
        return FileState(
            rel, rec.hash, self._freshness(rel, rec), len(rec.versions), self._baseline.get(rel)
        )

    def check_file(self, rel: RelPath) -> FileState | None:
        self._log("check_file", rel)
        self._fault(rel)
        data = self._read(rel)
        if data is None:
            return None
        rec = self._files.get(rel)
        if rec is None or rec.hash != _hash(data):
            self._add_version(rel, data, Cause.EXTERNAL)
            self._notify(rel)
        return self.file_state(rel)

    def scan(self) -> None:
        """The rescan: records what changed in every file there is now."""
        self._log("scan")
        for rel in list(self._walk()):
            data = self._read(rel)
            rec = self._files.get(rel)
            if data is not None and (rec is None or rec.hash != _hash(data)):
                self._add_version(RelPath(rel), data, Cause.EXTERNAL)
                self._notify(rel)

    def preserve(self, rel: RelPath) -> None:
        self._log("preserve", rel)
        if os.path.basename(rel).startswith("nospace"):
            raise OSError(errno.ENOSPC, "fake engine: no space to preserve", rel)

    def preserve_inode(self, rel: RelPath) -> None:
        self._log("preserve_inode", rel)

    def record_write(self, rel: RelPath) -> FileState | None:
        self._log("record_write", rel)
        data = self._read(rel)
        if data is None:
            return None
        self._add_version(rel, data, Cause.WRITE)
        self._notify(rel)
        return self.file_state(rel)

    def record_rename(self, old: RelPath, new: RelPath) -> None:
        self._log("record_rename", old, new)
        prefix = old + "/"
        for rel in list(self._files):
            if rel == old or rel.startswith(prefix):
                moved = new + rel[len(old) :]
                rec = self._files.pop(rel)
                target = self._files.get(moved)
                if target is not None and rec.versions:
                    # A save by rename: one more version of the target.
                    v = rec.versions[-1]
                    if v.hash != target.hash:
                        n = len(target.versions) + 1
                        target.versions.append(
                            Version(n, v.hash, v.recorded_at, Cause.WRITE, v.available, v.size)
                        )
                    rec = target
                self._files[moved] = rec
                self._remember_access(moved)
                self._notify(rel)
                self._notify(moved)
        self._notify(old)
        self._notify(new)

    def record_unlink(self, rel: RelPath) -> None:
        self._log("record_unlink", rel)
        rec = self._files.pop(rel, None)
        if rec is not None:
            self._gone[rel] = rec
        self._notify(rel)

    def access(self, rel: RelPath) -> Access | None:
        self._remember_access(rel)
        return self._access.get(rel)

    # -- .parsed

    def _freshness(self, rel: str, rec: _Record) -> Freshness:
        base = os.path.basename(rel)
        if os.path.splitext(rel)[1] not in TEXT_EXTS:
            return Freshness.UNSUPPORTED
        if base.startswith("pending") and "wait" not in rec.viewed:
            return Freshness.PENDING
        if base.startswith("stale") and "wait" not in rec.viewed:
            return Freshness.STALE
        return Freshness.CURRENT

    def parsed_paths(self) -> Iterable[RelPath]:
        return sorted(RelPath(r) for r in self._files if os.path.splitext(r)[1] in TEXT_EXTS)

    def parsed_view(self, rel: RelPath) -> ParsedView | None:
        self._fault(rel)
        rec = self._files.get(rel)
        if rec is None or os.path.splitext(rel)[1] not in TEXT_EXTS:
            return None
        fresh = self._freshness(rel, rec)
        if fresh is Freshness.PENDING:
            # As the real engine: one pending.md until the parse is done.
            header = f'<!-- swfs source="{rel}" unit="pending.md" freshness="pending" -->\n'
            note = RenderedUnit(
                "pending.md", f"{rel}#pending", header.encode() + b"not parsed yet\n"
            )
            return ParsedView(rel, fresh, rec.hash, None, None, None, (note,))
        source: Hash | None
        if fresh is Freshness.STALE:
            text, source = b"old text\n", _hash(b"old text\n")
        else:
            text, source = self._read(rel) or b"", rec.hash
        header = (
            f'<!-- swfs source="{rel}" unit="content" hash="{source}" freshness="{fresh}" -->\n'
        )
        unit = RenderedUnit("content.txt", f"{rel}#content", header.encode() + text)
        return ParsedView(rel, fresh, rec.hash, source, "text@1", None, (unit,))

    # -- .review

    def _current(self) -> dict[str, Hash]:
        out = {}
        for rel in self._walk():
            data = self._read(rel)
            if data is not None:
                out[rel] = _hash(data)
        return out

    def review(self) -> Sequence[ReviewEntry]:
        cur = self._current()
        out = []
        for rel in sorted(set(cur) | set(self._baseline)):
            b, c = self._baseline.get(rel), cur.get(rel)
            if b == c:
                continue
            status = (
                ChangeStatus.ADDED
                if b is None
                else ChangeStatus.DELETED
                if c is None
                else ChangeStatus.MODIFIED
            )
            out.append(ReviewEntry(RelPath(rel), status, b, c))
        return out

    def review_summary(self) -> bytes:
        lines = ["# Changes since the baseline", ""]
        for e in self.review():
            lines.append(f"- {e.status}: {e.rel} ({e.baseline_hash} -> {e.current_hash})")
        return ("\n".join(lines) + "\n").encode()

    def review_all_diff(self) -> bytes:
        return b"".join(self.review_diff(e.rel) or b"" for e in self.review())

    def is_unchanged(self, rel: RelPath, st: os.stat_result) -> bool:
        return False  # always take the check_file path: the hook tests count it

    def review_access(self) -> Access:
        root = self.access(RelPath(""))
        assert root is not None
        return root

    def review_diff(self, rel: RelPath) -> bytes | None:
        b = self._baseline.get(rel)
        old = self._blob(b) if b is not None else b""
        new = self._read(rel) or b""
        if old == new and b is not None:
            return None
        diff = difflib.unified_diff(
            old.decode(errors="replace").splitlines(keepends=True),
            new.decode(errors="replace").splitlines(keepends=True),
            f"a/{rel}",
            f"b/{rel}",
        )
        return f"diff --git a/{rel} b/{rel}\n{''.join(diff)}".encode()

    def _blob(self, h: Hash) -> bytes:
        try:
            return (self._store / "blobs" / h).read_bytes()
        except OSError:
            return b""

    # -- .versions

    def versioned_paths(self) -> Iterable[RelPath]:
        return sorted(RelPath(r) for r in {*self._files, *self._gone})

    def versions(self, rel: RelPath) -> Sequence[Version]:
        rec = self._files.get(rel) or self._gone.get(rel)
        return tuple(rec.versions) if rec is not None else ()

    def version_file(self, rel: RelPath, number: int) -> str | None:
        for v in self.versions(rel):
            if v.number == number:
                return self.blob_path(v.hash)
        return None

    def snapshots(self) -> Sequence[str]:
        return sorted(self._snapshots)

    def snapshot_manifest(self, name: str) -> dict[RelPath, Hash]:
        return dict(self._snapshots.get(name, {}))

    def blob_path(self, h: Hash) -> str | None:
        path = self._store / "blobs" / h
        return str(path) if path.exists() else None

    def pin_version(self, rel: RelPath) -> None:
        pass  # the fake keeps every version

    def version_ref(self, rel: RelPath, number: int) -> str | None:
        return self.version_file(rel, number)

    def blob_ref(self, h: Hash) -> str | None:
        return self.blob_path(h)

    def blob_size(self, h: Hash) -> int | None:
        path = self._store / "blobs" / h
        return path.stat().st_size if path.exists() else None

    def open_blob(self, path: str) -> int:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)

    # -- background

    async def run_background(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        if self.crash_after is None:
            await trio.sleep_forever()
        await trio.sleep(self.crash_after)
        raise RuntimeError("fake engine: background work crashed")

    def add_listener(self, fn: Callable[[RelPath], None]) -> None:
        self._listeners.append(fn)

    async def wait_view(self, rel: RelPath, limit: float) -> None:
        self._log("wait_view", rel)
        await trio.lowlevel.checkpoint()
        rec = self._files.get(rel)
        if rec is not None:
            rec.viewed.add("wait")
            self._notify(rel)
