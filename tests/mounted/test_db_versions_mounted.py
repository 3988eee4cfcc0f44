"""Programs that fsync through the mount: a database's commits are
versions at the pace of work, not of fsync, and a daemon killed during a
database load or a git checkout loses nothing that was fsynced.

Writers are this module run as a script (``python -m
tests.mounted.test_db_versions_mounted writer DB LOG WID N``): each runs
``N`` transactions against one SQLite database in WAL mode, and appends the
id of each committed one to a log outside the mount (after ``commit``
returned: with ``synchronous=FULL`` the WAL was fsynced by then).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swfs.history import versioning
from tests import programgen
from tests.mountutil import (
    REPO,
    Mount,
    abort_connection,
    lazy_unmount,
    needs_fuse,
    report_count,
    start_mount,
    swfs,
    wait_until,
    workspace,
)

pytestmark = [pytest.mark.mount, needs_fuse]

WRITERS = 4


def writer(db: str, log: str, wid: int, n: int) -> None:
    con = sqlite3.connect(db, timeout=120, isolation_level=None)
    con.execute("PRAGMA busy_timeout = 120000")
    con.execute("PRAGMA synchronous = FULL")
    with open(log, "a", encoding="utf-8") as out:
        try:
            for k in range(n):
                con.execute("BEGIN IMMEDIATE")
                con.execute("INSERT INTO t (wid, k, body) VALUES (?, ?, ?)", (wid, k, "x" * 200))
                con.execute("COMMIT")
                out.write(f"{wid} {k}\n")
                out.flush()
        except (sqlite3.Error, OSError) as exc:  # the daemon was killed
            out.write(f"stopped {exc!r}\n")
    con.close()


def _create(db: Path) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("CREATE TABLE t (wid INTEGER, k INTEGER, body TEXT, PRIMARY KEY (wid, k))")
    con.close()


def _spawn(db: Path, log: Path, wid: int, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.mounted.test_db_versions_mounted", "writer"]
        + [str(db), str(log), str(wid), str(n)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _committed(logs: list[Path]) -> set[tuple[int, int]]:
    out = set()
    for log in logs:
        if log.exists():
            for line in log.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    out.add((int(parts[0]), int(parts[1])))
    return out


def _rows(db: Path) -> set[tuple[int, int]]:
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return {(int(w), int(k)) for w, k in con.execute("SELECT wid, k FROM t")}
    finally:
        con.close()


def _versions(m: Mount, name: str) -> int:
    with contextlib.suppress(FileNotFoundError):
        return len(os.listdir(m.mnt / ".versions" / name))
    return 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_database_commits_are_not_a_version_each(request: pytest.FixtureRequest) -> None:
    """4 writers x 150 transactions, each fsynced: the database and its WAL
    keep at most one version per ``--version-interval`` of the run, not one
    per commit, every commit is in the database, and check is clean."""
    n = 150
    with workspace() as m:
        db = m.mnt / "app.db"
        _create(db)
        logs = [m.root / f"log-{i}" for i in range(WRITERS)]
        start = time.monotonic()
        procs = [_spawn(db, log, i, n) for i, log in enumerate(logs)]
        for proc in procs:
            _, err = proc.communicate(timeout=540)
            assert proc.returncode == 0, err
        elapsed = time.monotonic() - start
        committed = _committed(logs)
        assert len(committed) == WRITERS * n, [log.read_text()[-300:] for log in logs]
        assert _rows(db) == committed
        swfs("sync", m.mnt, timeout=120)
        db_versions, wal_versions = _versions(m, "app.db"), _versions(m, "app.db-wal")
        report_count(request.config, "sqlite WAL 4x150: versions of app.db", db_versions)
        report_count(request.config, "sqlite WAL 4x150: versions of app.db-wal", wal_versions)
        # A burst per interval while the load lasts (a close or an fsync
        # just past an interval starts the next one, so allow two), and a
        # few more for the creation, the WAL's deletion at the last close
        # and the sync: far below one per commit (600).
        bound = 2 * math.ceil(elapsed / versioning.DEFAULT_INTERVAL) + 8
        assert 0 < db_versions <= bound, (db_versions, elapsed)
        assert wal_versions <= bound, (wal_versions, elapsed)
        assert db_versions + wal_versions < WRITERS * n  # not one per commit
        swfs("check", m.mnt)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_during_a_database_load_loses_no_commit(request: pytest.FixtureRequest) -> None:
    """The daemon killed while 4 writers commit: every transaction whose
    commit returned is in the database afterwards, and the store checks
    clean, unmounted and after a remount."""
    with workspace() as m:
        db = m.mnt / "app.db"
        _create(db)
        logs = [m.root / f"log-{i}" for i in range(WRITERS)]
        procs = [_spawn(db, log, i, 100_000) for i, log in enumerate(logs)]
        try:
            wait_until("commits under way", lambda: len(_committed(logs)) >= 200, timeout=300)
            os.kill(m.proc.pid, signal.SIGKILL)
            abort_connection(m.mnt)
            m.proc.wait(30)
            lazy_unmount(m.mnt)
        finally:
            for proc in procs:
                try:
                    proc.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
        committed = _committed(logs)
        # Read from a copy: opening the database would recover it in SRC.
        copy = m.root / "copy"
        copy.mkdir()
        for name in ("app.db", "app.db-wal"):
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(m.src / name, copy / name)
        rows = _rows(copy / "app.db")
        assert committed <= rows, sorted(committed - rows)[:10]
        report_count(request.config, "kill -9 sqlite: commits verified", len(committed))
        swfs("check", m.src)
        m2 = start_mount(m.src, m.mnt)
        try:
            swfs("sync", m2.mnt, timeout=120)
            swfs("check", m2.mnt)
            assert committed <= _rows(m2.mnt / "app.db")
        finally:
            m2.stop()


def _git(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **programgen.GIT_ENV}
    return subprocess.run(
        ["git", *map(str, args)], env=env, capture_output=True, text=True, timeout=300, check=check
    )


def _recorded_versions(m: Mount, names: list[str]) -> dict[tuple[str, str], str]:
    out = {}
    for name in names:
        vdir = m.mnt / ".versions" / name
        with contextlib.suppress(FileNotFoundError):
            for v in os.listdir(vdir):
                out[(name, v)] = os.getxattr(vdir / v, "user.sw.hash").decode()
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_kill_9_during_a_git_checkout_loses_nothing_fsynced(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Checkouts back and forth (git fsyncing what it writes) until the
    daemon is killed: the repository's objects and refs are whole, every
    version shown before the kill reads back byte for byte after a remount,
    and the store checks clean once remounted."""
    from blake3 import blake3

    origin = programgen.git_origin(tmp_path / "origin")
    with workspace() as m:
        w = m.mnt / "w"
        _git("clone", "-q", "--no-hardlinks", f"file://{origin}", w)
        _git("-C", w, "config", "core.fsync", "all")
        names = [f"w/{p}" for p in _git("-C", w, "ls-files").stdout.split()[:40]]
        log = m.root / "checkouts"
        script = (
            'while :; do git checkout -q main~40 && echo old >>"$1" && '
            'git checkout -q main && echo main >>"$1" || exit 0; done'
        )
        env = {**os.environ, **programgen.GIT_ENV}
        proc = subprocess.Popen(
            ["sh", "-c", script, "sh", str(log)],
            cwd=w,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(
                "checkouts under way",
                lambda: log.exists() and len(log.read_text().split()) >= 3,
                timeout=400,
            )
            recorded = _recorded_versions(m, names)
            os.kill(m.proc.pid, signal.SIGKILL)
            abort_connection(m.mnt)
            m.proc.wait(30)
            lazy_unmount(m.mnt)
        finally:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert recorded
        # What git fsynced: its objects and refs.
        fsck = _git("-C", m.src / "w", "fsck", "--no-dangling", "--connectivity-only", check=False)
        assert fsck.returncode == 0, fsck.stderr
        for ref in ("main", "main~40"):
            _git("-C", m.src / "w", "rev-parse", "--verify", f"{ref}^{{tree}}")
        # Checked unmounted too, but only reported: a daemon killed between
        # git's unlink reaching SRC and its record leaves a view that claims
        # a file which is gone (check's "views"), which the remount's rescan
        # records.  The store must check clean once mounted again (below).
        unmounted = swfs("check", m.src, check=False)
        report_count(
            request.config, "kill -9 git checkout: unmounted check exit", unmounted.returncode
        )
        if unmounted.returncode:
            print(f"unmounted check after kill -9: {unmounted.stdout[-2000:]}")
        m2 = start_mount(m.src, m.mnt)
        try:
            swfs("sync", m2.mnt, timeout=120)
            swfs("check", m2.mnt)
            verified = 0
            for (name, v), want in recorded.items():
                entry = m2.mnt / ".versions" / name / v
                if not entry.exists():
                    # Only a burst's last version may go, replaced by a later
                    # state: under its own number (the burst went on) or a
                    # later one.
                    later = [x for x in os.listdir(entry.parent) if x[:4] >= v[:4] and x != v]
                    assert later, f"{entry}: gone, and no later version replaced it"
                    continue
                assert os.getxattr(entry, "user.sw.hash").decode() == want, entry
                assert blake3(entry.read_bytes()).hexdigest() == want, entry
                verified += 1
            assert verified
            report_count(request.config, "kill -9 git checkout: versions verified", verified)
        finally:
            m2.stop()


def main() -> None:
    role, db, log, wid, n = sys.argv[1:6]
    assert role == "writer"
    writer(db, log, int(wid), int(n))


if __name__ == "__main__":
    main()
