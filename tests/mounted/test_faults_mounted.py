"""Faults on a real mount: the daemon killed mid-burst, the store's filesystem
full, many agents at once, and parse workers that crash, hang or exhaust memory.

Worker processes are this module run as a script (``python -m
tests.mounted.test_faults_mounted writer|agent ...``): each appends what it has
closed to a journal outside the mount, which the test checks afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.mountutil import (
    REPO,
    Mount,
    descendants,
    errno_of,
    fill_disk,
    free_bytes,
    full_src_mount,
    full_store_mount,
    lazy_unmount,
    needs_fuse,
    report_count,
    start_mount,
    swfs,
    vm_rss_kib,
    wait_until,
    workspace,
)

pytestmark = [pytest.mark.mount, needs_fuse]

RSS_CAP_KIB = 500 * 1024


def blake3_hex(data: bytes) -> str:
    from blake3 import blake3

    return blake3(data).hexdigest()


# -- worker processes ----------------------------------------------------------------------


def _journal(journal_path: str, /, **entry: object) -> None:
    with open(journal_path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()


def writer(mnt: str, journal: str, wid: int, seconds: float) -> None:
    """New files, rewrites of one file, and slow re-parses, until the mount goes."""
    rng = random.Random(wid)
    deadline = time.monotonic() + seconds
    k = 0
    try:
        while time.monotonic() < deadline:
            k += 1
            data = f"writer {wid} file {k}\n".encode() + rng.randbytes(rng.randrange(1, 20000))
            name = f"w{wid}-{k:04d}.txt"
            with open(os.path.join(mnt, name), "wb") as f:
                f.write(data)
            _journal(journal, op="new", path=name, hash=blake3_hex(data))
            shared = f"shared-{wid}.slow" if k % 3 else f"shared-{wid}.csv"
            data = f"rev,{k}\n".encode() * rng.randrange(1, 200)
            _journal(journal, op="begin", path=shared, hash=blake3_hex(data))
            with open(os.path.join(mnt, shared), "wb") as f:
                f.write(data)
            _journal(journal, op="done", path=shared, hash=blake3_hex(data))
            if k % 4 == 0:  # in place: the engine copies the old bytes out first
                big = os.path.join(mnt, f"big-{wid}.bin")
                with open(big, "r+b" if os.path.exists(big) else "w+b") as f:
                    f.seek(rng.randrange(2 * 1024 * 1024))
                    f.write(rng.randbytes(4096))
                    f.seek(0)
                    _journal(journal, op="inplace", path=f"big-{wid}.bin")
    except OSError as exc:  # the daemon was killed: ENOTCONN and friends
        _journal(journal, op="stopped", errno=exc.errno)


def agent(mnt: str, journal: str, wid: int, seconds: float) -> None:
    """An agent at work: writes, editor-style saves, reads of every synthetic tree."""
    rng = random.Random(1000 + wid)
    deadline = time.monotonic() + seconds
    k = 0
    while time.monotonic() < deadline:
        k += 1
        name = f"agent{wid}/doc-{k % 4}.txt"
        data = f"agent {wid} edit {k}\n".encode() * rng.randrange(1, 50)
        target = os.path.join(mnt, name)
        if k % 3 == 0:  # save by writing a temp file and renaming it over
            tmp = os.path.join(mnt, f"agent{wid}/.doc-{k % 4}.txt.tmp")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        else:
            with open(target, "wb") as f:
                f.write(data)
        _journal(journal, op="closed", path=name, hash=blake3_hex(data))
        if k % 5 == 0:
            os.rename(target, os.path.join(mnt, f"agent{wid}/moved-{k}.txt"))
            _journal(journal, op="moved", path=name, to=f"agent{wid}/moved-{k}.txt")
        unit = os.path.join(mnt, ".parsed", name, "content.txt")
        with contextlib.suppress(FileNotFoundError), open(unit, "rb") as f:
            f.read()
        with open(os.path.join(mnt, ".review", "SUMMARY.md"), "rb") as f:
            f.read()
        vdir = os.path.join(mnt, ".versions", name)
        with contextlib.suppress(FileNotFoundError):
            for v in os.listdir(vdir)[-3:]:
                with open(os.path.join(vdir, v), "rb") as f:
                    f.read()
    _journal(journal, op="finished", ops=k)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=("writer", "agent"))
    p.add_argument("mnt")
    p.add_argument("journal")
    p.add_argument("wid", type=int)
    p.add_argument("seconds", type=float)
    a = p.parse_args()
    (writer if a.role == "writer" else agent)(a.mnt, a.journal, a.wid, a.seconds)


def spawn(role: str, m: Mount, journal: Path, wid: int, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.mounted.test_faults_mounted", role, str(m.mnt), str(journal)]
        + [str(wid), str(seconds)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_journal(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- kill -9 during a burst ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_kill_9_during_a_burst_of_writes_and_reparses(request: pytest.FixtureRequest) -> None:
    # Every version shown must survive: none may be folded into a later one
    # by the burst policy (swfs.versioning, tested on its own).
    with workspace(["--version-interval", "0"]) as m:
        journals = [m.root / f"journal-{i}.jsonl" for i in range(4)]
        procs = [spawn("writer", m, j, i, 30) for i, j in enumerate(journals)]
        try:
            # Kill once writes and re-parses are in full swing: poll for it (on
            # a loaded machine the writers may take seconds to start).
            # Every version the daemon shows then must survive the kill.
            recorded: dict[tuple[str, str], str] = {}
            deadline = time.monotonic() + 60
            while True:
                for i in range(4):
                    for name in (
                        f"shared-{i}.slow",
                        f"shared-{i}.csv",
                        f"w{i}-0001.txt",
                        f"big-{i}.bin",
                    ):
                        vdir = m.mnt / ".versions" / name
                        with contextlib.suppress(FileNotFoundError):
                            for v in os.listdir(vdir):
                                recorded[(name, v)] = os.getxattr(vdir / v, "user.sw.hash").decode()
                # Counted as text: a writer may be mid-line.
                closed = sum(
                    j.read_text().count('"op": "new"') + j.read_text().count('"op": "done"')
                    for j in journals
                    if j.exists()
                )
                if (len(recorded) >= 8 and closed > 40) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            os.kill(m.proc.pid, signal.SIGKILL)
            m.proc.wait(10)
            lazy_unmount(m.mnt)
        finally:
            for proc in procs:
                try:
                    proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
        assert recorded, "no versions recorded before the kill"
        entries = [e for j in journals for e in read_journal(j)]
        closed = [e for e in entries if e["op"] in ("new", "done")]
        assert len(closed) > 20
        # Native files: whatever was written and closed is there, byte for byte.
        last: dict[str, dict[str, object]] = {}
        for e in entries:
            if e["op"] in ("new", "begin", "done"):
                last[str(e["path"])] = e
        for e in closed:
            path = str(e["path"])
            if e["op"] == "new" or last[path]["op"] == "done":
                got = blake3_hex((m.src / path).read_bytes())
                if e["op"] == "new" or e is last[path]:
                    assert got == e["hash"], f"{path}: closed content lost"
        # The store as the kill left it, unmounted, checks clean; then remount it:
        # check is clean again, old versions readable and right.
        swfs("check", m.src)
        m2 = start_mount(m.src, m.mnt)
        try:
            swfs("sync", m.mnt, timeout=120)
            swfs("check", m.mnt)
            for (name, v), want in recorded.items():
                entry = m.mnt / ".versions" / name / v
                assert os.getxattr(entry, "user.sw.hash").decode() == want, entry
                assert blake3_hex(entry.read_bytes()) == want, entry
            report_count(request.config, "kill -9: versions verified after remount", len(recorded))
            report_count(request.config, "kill -9: closed writes verified", len(closed))
        finally:
            m2.stop()


# -- the store on a full filesystem ------------------------------------------------------


@pytest.mark.timeout(120)
def test_store_on_a_full_filesystem_fails_writes_loudly(request: pytest.FixtureRequest) -> None:
    with full_store_mount(5) as (m, original):
        src, mnt = m.src, m.mnt
        failed_with = 0
        try:
            with open(mnt / "big.bin", "r+b") as f:
                f.seek(1024)
                f.write(b"overwritten in place" * 1000)
        except OSError as exc:
            failed_with = exc.errno or -1
        assert m.alive(), m.log()[-2000:]
        outcome = errno.errorcode.get(failed_with, "write succeeded") if failed_with else "ok"
        report_count(request.config, f"full store: in-place overwrite -> {outcome}", 1)
        if failed_with:
            assert failed_with == errno.ENOSPC, errno.errorcode.get(failed_with)
            # Nothing was overwritten that history could not keep.
            assert (src / "big.bin").read_bytes() == original
        else:
            # The write went through: then the old bytes must be kept somewhere.
            hashes = [
                os.getxattr(v, "user.sw.hash").decode()
                for v in (mnt / ".versions" / "big.bin").iterdir()
            ]
            want = blake3_hex(original)
            assert want in hashes
            kept = next(v for v in (mnt / ".versions" / "big.bin").iterdir() if want in str(v))
            assert blake3_hex(kept.read_bytes()) == want
        # The mount still answers, small writes still work, the store checks clean.
        assert (mnt / "small.txt").read_text() == "small\n"
        (mnt / "other.txt").write_text("still writable\n")
        assert os.listdir(mnt / ".versions")
        swfs("check", mnt)


@pytest.mark.timeout(300)
def test_a_full_disk_can_be_freed_through_the_mount(request: pytest.FixtureRequest) -> None:
    """SRC's own disk full (the store on it): deleting and truncating go on,
    keeping the bytes where the store's reserve allows and recording the
    loss where not; history reads with no free space; gc frees space; an
    in-place write that cannot keep the old bytes still fails."""
    r = random.Random(36)
    big1, big2, big3 = r.randbytes(4 << 20), r.randbytes(4 << 20), r.randbytes(2 << 20)
    small_kept, old_v1, old_v2 = (
        r.randbytes(128 << 10),
        r.randbytes(100 << 10),
        r.randbytes(90 << 10),
    )
    # Every close a version (no bursts folded): old.bin's first bytes are a blob.
    with full_src_mount("48m", "--version-interval", "0") as m:
        src, mnt = m.src, m.mnt
        for name, data in (
            ("big1.bin", big1),
            ("big2.bin", big2),
            ("big3.bin", big3),
            ("kept.bin", small_kept),
        ):
            (mnt / name).write_bytes(data)
        (mnt / "old.bin").write_bytes(old_v1)
        (mnt / "old.bin").write_bytes(old_v2)
        swfs("sync", mnt)
        old_dir = mnt / ".versions" / "old.bin"
        first = next(p for p in old_dir.iterdir() if p.name.startswith("0001-"))

        fill_disk(mnt, "filler1")
        full = free_bytes(src)
        report_count(request.config, "full SRC: free bytes after filling", full)
        assert full < 1 << 20

        # History reads with no free space (the chunked blob is not reassembled
        # into a file first).
        assert first.read_bytes() == old_v1

        # An in-place edit that cannot keep the old bytes fails; the file is intact.
        fd = os.open(mnt / "big1.bin", os.O_WRONLY)
        try:
            failed = errno_of(lambda: os.pwrite(fd, b"overwritten in place" * 1000, 4096))
        finally:
            os.close(fd)
        assert failed == errno.ENOSPC, errno.errorcode.get(failed)
        assert (src / "big1.bin").read_bytes() == big1

        # A delete whose bytes fit in the reserve keeps them.
        subprocess.run(["rm", str(mnt / "kept.bin")], check=True, timeout=60)
        kept = list((mnt / ".versions" / "kept.bin").iterdir())
        assert [p.read_bytes() for p in kept] == [small_kept], kept

        # A truncate whose bytes cannot be kept goes on and says so.
        before = free_bytes(src)
        subprocess.run(["truncate", "-s", "0", str(mnt / "big1.bin")], check=True, timeout=60)
        assert (src / "big1.bin").stat().st_size == 0
        freed = free_bytes(src) - before
        report_count(request.config, "full SRC: bytes freed by truncate -s 0 of 4 MiB", freed)
        assert freed > 2 << 20
        out = swfs("versions", mnt, "big1.bin").stdout
        assert "bytes not kept: disk full" in out, out + m.log()[-3000:]
        notes = [p for p in (mnt / ".versions" / "big1.bin").iterdir() if p.suffix == ".not-kept"]
        assert len(notes) == 1, notes
        assert "bytes not kept: disk full" in notes[0].read_text()
        assert os.getxattr(notes[0], "user.sw.not_kept") == b"disk full"

        # So does a shell's truncating redirection (an O_TRUNC open).
        fill_disk(mnt, "filler1b")
        subprocess.run(["sh", "-c", f": > '{mnt}/big3.bin'"], check=True, timeout=60)
        assert (src / "big3.bin").stat().st_size == 0
        assert "bytes not kept: disk full" in swfs("versions", mnt, "big3.bin").stdout

        # A delete whose bytes cannot be kept goes on and says so.
        fill_disk(mnt, "filler2")
        before = free_bytes(src)
        subprocess.run(["rm", str(mnt / "big2.bin")], check=True, timeout=60)
        assert not (src / "big2.bin").exists()
        freed = free_bytes(src) - before
        report_count(request.config, "full SRC: bytes freed by rm of 4 MiB", freed)
        assert freed > 2 << 20
        log = swfs("log", mnt, "--kind", "state").stdout
        lost = [line for line in log.splitlines() if "not-kept" in line]
        assert any("path=big1.bin" in line for line in lost), log
        assert any("path=big2.bin" in line and "disk full" in line for line in lost), log
        assert "bytes not kept: disk full" in swfs("versions", mnt, "big2.bin").stdout

        # gc frees space on a full disk: kept.bin's and old.bin's old bytes.
        fill_disk(mnt, "filler3")

        def free_and_reserve() -> int:  # gc may top the reserve up from what it frees
            return free_bytes(src) + (src / ".swfs" / "reserve").stat().st_blocks * 512

        before = free_and_reserve()
        swfs("gc", "--keep", "0", mnt)
        freed = free_and_reserve() - before
        report_count(request.config, "full SRC: bytes freed by swfs gc --keep 0", freed)
        assert freed >= len(small_kept) + len(old_v1), freed

        assert m.alive(), m.log()[-2000:]
        for name in ("filler1", "filler1b", "filler2", "filler3"):
            os.unlink(mnt / name)
        # While the disk was full the access journal said "failing" and kept
        # its events in memory; it stores them at its next flush once there
        # is space again, and the store then checks clean.
        with contextlib.suppress(AssertionError):
            wait_until(
                "the access journal stores again",
                lambda: swfs("check", mnt, check=False).returncode == 0,
                timeout=60,
            )
        swfs("check", mnt)


# -- many agents at once -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_many_agents_at_once(request: pytest.FixtureRequest) -> None:
    seconds = float(os.environ.get("SWFS_AGENT_SECONDS", "30"))
    n = 5
    # Every close must be a version here: no bursts folded (swfs.versioning
    # is tested on its own).
    with workspace(["--version-interval", "0"]) as m:
        for i in range(n):
            (m.mnt / f"agent{i}").mkdir()
        rss_before = vm_rss_kib(m.proc.pid)
        journals = [m.root / f"agent-{i}.jsonl" for i in range(n)]
        procs = [spawn("agent", m, j, i, seconds) for i, j in enumerate(journals)]
        failures = []
        for i, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                failures.append(f"agent {i} hung (deadlock?): {err[-1000:]}")
                continue
            if proc.returncode != 0:
                failures.append(f"agent {i} exit {proc.returncode}: {err[-1500:]}")
        assert failures == [], "\n".join(failures)
        assert m.alive()
        swfs("sync", m.mnt, timeout=120)
        rss_after = vm_rss_kib(m.proc.pid)
        # Every hash an agent closed is a version of the file it was closed under.
        entries = [e for j in journals for e in read_journal(j)]
        closed = [e for e in entries if e["op"] == "closed"]
        by_path: dict[str, set[str]] = {}
        aliases: dict[str, set[str]] = {}  # a path and every name it was renamed to
        for e in closed:
            by_path.setdefault(str(e["path"]), set()).add(str(e["hash"]))
        for e in entries:
            if e["op"] == "moved":
                aliases.setdefault(str(e["path"]), set()).add(str(e["to"]))

        def versions_of(path: str) -> set[str]:
            proc = swfs("versions", m.mnt, path, "--json", check=False)
            if proc.returncode != 0:
                assert "no recorded versions" in proc.stderr, proc.stderr
                return set()
            return {json.loads(line)["hash"] for line in proc.stdout.splitlines() if line}

        def kept_under(alias: str) -> set[str]:  # cheaper than the CLI for the many aliases
            vdir = m.mnt / ".versions" / alias
            return {os.getxattr(vdir / v, "user.sw.hash").decode() for v in os.listdir(vdir)}

        with ThreadPoolExecutor(4) as pool:
            cli = dict(zip(by_path, pool.map(versions_of, by_path), strict=True))
        lost = []
        for path, hashes in by_path.items():
            known = set(cli[path])
            for alias in aliases.get(path, ()):
                known |= kept_under(alias)
            lost += [f"{path}: {h[:16]}" for h in hashes - known]
        assert lost == [], f"{len(lost)} closed versions missing: {lost[:10]}"
        swfs("check", m.mnt)
        ops = sum(int(str(e["ops"])) for e in entries if e["op"] == "finished")
        report_count(request.config, "many agents: agent iterations", ops)
        report_count(request.config, "many agents: closed writes verified", len(closed))
        report_count(request.config, "many agents: daemon VmRSS after (KiB)", rss_after)
        assert rss_before < RSS_CAP_KIB
        assert rss_after < RSS_CAP_KIB, f"daemon VmRSS {rss_after} KiB"


# -- parse workers that crash, hang or exhaust memory ---------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bad_parse_workers_fail_only_their_file() -> None:
    evil = {
        "boom.crash": "segfaults",
        "stuck.hang": "never returns",
        "greedy.hog": "allocates without bound",
        "buggy.bug": "raises KeyError",
    }

    def populate(src: Path) -> None:
        for name in evil:
            (src / name).write_text(f"{name}\n")
        for i in range(6):
            (src / f"good-{i}.txt").write_text(f"good file {i}\n")

    extra = ("--parse-timeout", "5", "--parse-memory", "1024", "--workers", "2")
    with workspace(extra, populate=populate, sync=False) as m:
        swfs("sync", m.mnt, timeout=150)
        assert m.alive(), m.log()[-3000:]
        for name in evil:
            assert os.getxattr(m.mnt / name, "user.sw.freshness") == b"failed", name
            error = m.mnt / ".parsed" / name / "error.md"
            text = error.read_text()
            assert text.strip(), name
            assert os.getxattr(error, "user.sw.freshness") == b"failed"
        for i in range(6):
            good = m.mnt / f"good-{i}.txt"
            assert os.getxattr(good, "user.sw.freshness") == b"current"
            unit = (m.mnt / ".parsed" / f"good-{i}.txt" / "content.txt").read_text()
            assert f"good file {i}" in unit
        # The daemon goes on: new work parses, workers' memory is bounded.
        (m.mnt / "after.txt").write_text("parsed after the storm\n")
        swfs("sync", m.mnt, timeout=60)
        assert "after the storm" in (m.mnt / ".parsed" / "after.txt" / "content.txt").read_text()
        for pid in [m.proc.pid, *descendants(m.proc.pid)]:
            assert vm_rss_kib(pid) < RSS_CAP_KIB * 3, pid
        status = json.loads(swfs("status", m.mnt, "--json").stdout)
        assert status["failed"] == len(evil)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_panics_aborts_and_unprintable_errors_settle_and_sync_returns(tmp_path: Path) -> None:
    """Issue 41: a parser that panics through pyo3 (python-calamine on a
    fuzzed .xls, both uncaught and through swfs's own .xls reader), one that
    aborts the process, one whose exception can be neither pickled nor
    printed: `swfs sync` returns, each file is failed with a one-line reason,
    none is left pending."""
    from tests import panicgen

    fuzzed = panicgen.fuzzed_xls(tmp_path / "gen")
    assert panicgen.panics_calamine(fuzzed)
    evil = ("native.calpanic", "fuzzed.xls", "bound.panic", "gone.abort", "odd.unprintable")

    def populate(src: Path) -> None:
        (src / "native.calpanic").write_bytes(fuzzed.read_bytes())
        (src / "fuzzed.xls").write_bytes(fuzzed.read_bytes())
        for name in evil[2:]:
            (src / name).write_text(f"{name}\n")
        (src / "good.txt").write_text("good file\n")

    extra = ("--parse-timeout", "60", "--workers", "2")
    with workspace(extra, populate=populate, sync=False) as m:
        done = swfs("sync", m.mnt, timeout=240)
        assert done.returncode == 0
        assert m.alive(), m.log()[-3000:]
        for name in evil:
            assert os.getxattr(m.mnt / name, "user.sw.freshness") == b"failed", name
            error = (m.mnt / ".parsed" / name / "error.md").read_text()
            assert error.strip(), name
        reasons = {name: (m.mnt / ".parsed" / name / "error.md").read_text() for name in evil}
        assert "PanicException: range start index" in reasons["native.calpanic"]
        assert "calamine panicked" in reasons["fuzzed.xls"]
        assert "SIGABRT" in reasons["gone.abort"]
        assert "could not be read" in reasons["odd.unprintable"]
        assert os.getxattr(m.mnt / "good.txt", "user.sw.freshness") == b"current"
        status = json.loads(swfs("status", m.mnt, "--json").stdout)
        assert status["failed"] == len(evil)
        assert status.get("pending", 0) == 0, status


if __name__ == "__main__":
    main()
