"""Real programs (issue 38): what an agent runs in its workspace, timed on a
plain folder, on libfuse's C ``passthrough_hp`` and on a swfs mount in the
same minutes.

The programs and their inputs are those of the real-programs test layer
(tests/mounted/test_programs.py, tests/programgen.py), at the issue's sizes:

* git: ``clone`` of a repository of 4,650 files (600 with ``--quick``),
  ``checkout`` of a commit 2,000 back (200) and back to ``main``,
  ``status``, ``gc``; the origin is a local bare repository made by
  ``programgen.git_origin``, nothing is fetched;
* ``tar -xzf`` of the same 4,650 files (``git archive`` of ``main``);
* ``rsync -a`` of the same tree (its files and folders) into the mount;
* sqlite in WAL and in rollback-journal mode: 4 writers x 300 transactions
  (40) of the tests' writer, each transaction counted when it gets
  ``database is locked`` instead of failing its writer;
* ``python -m venv``;
* one operation at a time on 100-byte files: create-write-close, setattr
  (chmod), link, rename, rename over an existing file, unlink, mkdir;
  each a median and a p90 in ms.

Each round mounts the C peer and swfs side by side, each over its own empty
folder (swfs with its store outside it), and runs every program on the
plain folder, on the peer and on swfs in turn (the order alternating each
round), each in a fresh folder, every run bounded by a timeout: a hang
costs one program's row (its note says so), not the benchmark.  After the
round, with swfs unmounted, ``swfs check`` runs on its store; its result is
in the note.

Rows: ``PROGRAM`` is swfs over plain, ``PROGRAM@hp`` the C peer over plain
(the peer table shows both), ``PROGRAM_vs_C`` swfs over the C peer (target
2x, the issue's).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import gen
from bench.common import NATIVE, Ctx
from bench.mounter import BenchError, Mount, Mounter, SwfsMounter, Unsupported, run_cmd
from bench.report import Target, WorkloadResult
from bench.reqcost import CmdMounter as _CmdMounter
from bench.reqcost import StoreSwfsMounter, passthrough_hp
from tests import programgen  # the real-programs test layer's inputs

log = logging.getLogger(__name__)

HP = "hp"
SWFS = "swfs"
PAYLOAD = b"\0bench\0" + bytes(range(93))  # 100 bytes, binary: nothing to parse
OPS = ("create", "setattr", "link", "rename", "rename_over", "unlink", "mkdir")

# The tests' sqlite writer (tests/mounted/test_programs.py WRITER), but a
# transaction that gets "database is locked" despite the busy timeout is
# rolled back and counted instead of ending its writer; it prints the count.
WRITER = """
import sqlite3, sys
db, writer, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c = sqlite3.connect(db, timeout=120, isolation_level=None)
c.execute("PRAGMA busy_timeout=120000")
locked = 0
for i in range(n):
    try:
        c.execute("BEGIN IMMEDIATE")
        c.executemany(
            "INSERT INTO t(writer, seq, k, payload) VALUES (?, ?, ?, ?)",
            [(writer, i, k, f"{writer}/{i}/{k}:" + "x" * (37 * k)) for k in range(5)],
        )
        c.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc):
            raise
        locked += 1
        if c.in_transaction:
            c.execute("ROLLBACK")
c.close()
print(locked)
"""
WRITERS = 4


@dataclass(frozen=True)
class ProgSizes:
    repo_files: int  # files at ``main``
    commits: int
    back: int  # the old commit is main~back
    transactions: int  # per sqlite writer
    ops: int  # files per single-operation loop
    timeout: float  # seconds, per program run

    @classmethod
    def for_ctx(cls, ctx: Ctx) -> ProgSizes:
        if ctx.quick:
            return cls(600, 250, 200, 40, 50, 300.0)
        return cls(4_650, 2_100, 2_000, 300, 200, 900.0)

    @property
    def first_files(self) -> int:
        """Files of the first commit such that ``main`` has ``repo_files``:
        git_origin adds two files a commit, removes one every fifth, and
        writes ``run.sh`` and ``latest`` besides."""
        later = self.commits - 1
        return self.repo_files - 2 - 2 * later + later // 5


class ProgramTimeout(BenchError):
    """One program run went over its timeout (and was killed)."""


@dataclass
class Inputs:
    bare: Path  # the origin, a bare repository
    tarball: Path  # git archive of main, gzip
    tree: Path  # the same files, extracted (rsync's source)
    entries: int  # files and folders of ``tree``
    files: int


def _env(home: Path) -> dict[str, str]:
    """A clean environment, as the tests give their programs."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "GIT_"))
    }
    env.update(programgen.GIT_ENV)
    env.update({"HOME": str(home), "LC_ALL": "C", "TZ": "UTC"})
    return env


def inputs(ctx: Ctx, ps: ProgSizes) -> Inputs:
    """The origin repository, its tarball and its tree, made once per size."""
    params: dict[str, object] = {
        "kind": "programs",
        "files": ps.repo_files,
        "commits": ps.commits,
        "gen": 1,
    }
    base = ctx.data / f"programs-{ps.repo_files}f-{ps.commits}c"

    def build(path: Path) -> None:
        work = path / "work"
        programgen.git_origin(work, files=ps.first_files, commits=ps.commits)
        run_cmd(["git", "clone", "-q", "--bare", work, path / "origin.git"], timeout=600)
        run_cmd(
            ["git", "-C", work, "archive", "--format=tar.gz", "-o", path / "tree.tar.gz", "main"],
            timeout=600,
        )
        (path / "tree").mkdir()
        run_cmd(["tar", "-xzf", path / "tree.tar.gz", "-C", path / "tree"], timeout=600)
        shutil.rmtree(work)

    gen._cached(base, params, build)
    tree = base / "tree"
    files = sum(len(f) for _, _, f in os.walk(tree))
    entries = sum(len(d) + len(f) for _, d, f in os.walk(tree))
    return Inputs(base / "origin.git", base / "tree.tar.gz", tree, entries, files)


# -- running one program


def _run(argv: list[str | Path], *, cwd: Path, env: dict[str, str], timeout: float) -> float:
    """Seconds ``argv`` took; ProgramTimeout past ``timeout`` (its process group
    killed), BenchError on a non-zero exit."""
    args = [str(a) for a in argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=60)  # a process stuck in a dead mount stays behind
        raise ProgramTimeout(f"{' '.join(args[:3])}: timed out after {timeout:.0f} s") from None
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = out.decode(errors="replace").strip().splitlines()[-2:]
        raise BenchError(f"{' '.join(args[:3])}: exit {proc.returncode}: {' | '.join(tail)}")
    return dt


def _rmtree(path: Path, timeout: float) -> None:
    """Remove a program's folder (not timed), bounded like the programs."""
    if path.exists():
        run_cmd(["rm", "-rf", path], timeout=timeout)


@dataclass
class Round:
    """One side's run of the suite: its values, locked counts and failures."""

    values: dict[str, float]
    locked: dict[str, int]
    failures: list[str]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(q * len(xs)) - 1)]


def _ops(d: Path, n: int) -> dict[str, float]:
    """Each single operation ``n`` times in the new folder ``d``; median and
    p90 in ms."""
    times: dict[str, list[float]] = {op: [] for op in OPS}
    clock = time.perf_counter

    def each(op: str, fn: Callable[[int], object]) -> None:
        for i in range(n):
            t0 = clock()
            fn(i)
            times[op].append((clock() - t0) * 1e3)

    def create(p: Path) -> None:
        with open(p, "wb") as f:
            f.write(PAYLOAD)

    each("create", lambda i: create(d / f"c{i}"))
    each("setattr", lambda i: os.chmod(d / f"c{i}", 0o600))
    each("link", lambda i: os.link(d / f"c{i}", d / f"l{i}"))
    each("rename", lambda i: os.rename(d / f"c{i}", d / f"r{i}"))
    for i in range(n):
        create(d / f"t{i}")  # the existing files to rename over (not timed)
    each("rename_over", lambda i: os.rename(d / f"r{i}", d / f"t{i}"))
    each("unlink", lambda i: os.unlink(d / f"t{i}"))
    each("mkdir", lambda i: os.mkdir(d / f"m{i}"))
    out: dict[str, float] = {}
    for op, xs in times.items():
        out[f"op_{op}_ms"] = statistics.median(xs)
        out[f"op_{op}_p90_ms"] = _pct(xs, 0.9)
    return out


def _sqlite(root: Path, mode: str, ps: ProgSizes, env: dict[str, str]) -> tuple[float, int]:
    """(seconds of 4 concurrent writers, transactions that got "locked")."""
    db = root / "app.db"
    with contextlib.closing(sqlite3.connect(db)) as c:
        c.execute(f"PRAGMA journal_mode={mode}")
        c.execute(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, writer INT, seq INT, k INT, payload TEXT)"
        )
        c.execute("CREATE INDEX t_writer ON t(writer, seq)")
        c.commit()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), str(w), str(ps.transactions)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for w in range(WRITERS)
    ]
    locked = 0
    deadline = t0 + ps.timeout
    failed: list[str] = []
    try:
        for w, p in enumerate(procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                raise ProgramTimeout(f"sqlite {mode}: timed out after {ps.timeout:.0f} s") from None
            text = out.decode(errors="replace").strip()
            if p.returncode != 0:
                failed.append(f"writer {w} exit {p.returncode}: {text.splitlines()[-1:]}")
            else:
                locked += int(text.splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, 9)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=60)
    dt = time.perf_counter() - t0
    if failed:
        raise BenchError(f"sqlite {mode}: {'; '.join(failed)}")
    with contextlib.closing(sqlite3.connect(db)) as c:
        ok = c.execute("PRAGMA integrity_check").fetchall()
    if ok != [("ok",)]:
        raise BenchError(f"sqlite {mode}: integrity_check {ok}")
    return dt, locked


PROGRAMS = (
    "git_clone",
    "git_checkout_old",
    "git_checkout_back",
    "git_status",
    "git_gc",
    "tar_xzf",
    "rsync_a",
    "sqlite_wal",
    "sqlite_rollback",
    "venv",
)


def _steps(
    inp: Inputs, ps: ProgSizes, env: dict[str, str]
) -> list[tuple[str, Callable[[Path], dict[str, float]], tuple[str, ...]]]:
    """(name, fn(folder) -> {metric: value}, metrics it gives); each fn
    works in its own new folder, removed afterwards."""
    t = ps.timeout

    def git(d: Path) -> dict[str, float]:
        out: dict[str, float] = {}
        w = d / "w"
        out["git_clone"] = _run(
            ["git", "clone", "-q", "--no-hardlinks", f"file://{inp.bare}", w],
            cwd=d,
            env=env,
            timeout=t,
        )
        for name, args in (
            ("git_checkout_old", ["checkout", "-q", f"main~{ps.back}"]),
            ("git_checkout_back", ["checkout", "-q", "main"]),
            ("git_status", ["status", "--porcelain"]),
            ("git_gc", ["gc", "-q", "--prune=now"]),
        ):
            out[name] = _run(["git", "-C", w, *args], cwd=d, env=env, timeout=t)
        return out

    def tar(d: Path) -> dict[str, float]:
        return {"tar_xzf": _run(["tar", "-xzf", inp.tarball, "-C", d], cwd=d, env=env, timeout=t)}

    def rsync(d: Path) -> dict[str, float]:
        return {"rsync_a": _run(["rsync", "-a", f"{inp.tree}/", d], cwd=d, env=env, timeout=t)}

    def venv(d: Path) -> dict[str, float]:
        return {"venv": _run([sys.executable, "-m", "venv", d / "v"], cwd=d, env=env, timeout=t)}

    return [
        ("git", git, PROGRAMS[:5]),
        ("tar", tar, ("tar_xzf",)),
        ("rsync", rsync, ("rsync_a",)),
        ("sqlite_wal", lambda d: {}, ("sqlite_wal",)),  # run by the caller (locked counts)
        ("sqlite_rollback", lambda d: {}, ("sqlite_rollback",)),
        ("venv", venv, ("venv",)),
        (
            "ops",
            lambda d: _ops(d, ps.ops),
            tuple(f"op_{o}{p}_ms" for o in OPS for p in ("", "_p90")),
        ),
    ]


# -- the sides


@contextlib.contextmanager
def _mounts(
    ctx: Ctx, hp: str | None, sw: SwfsMounter, r: int
) -> Iterator[tuple[dict[str, Path], dict[str, tuple[Mounter, Mount]], Path, Path]]:
    """This round's roots: a plain folder, the C peer's and swfs's mounts,
    each over its own new empty folder; yields (roots, mounts, swfs's folder,
    its store).  Unmounts (and reaps) both on the way out."""
    base = ctx.workdir / "programs"
    for name in ("plain", "hp-src", "swfs-src", "store"):
        shutil.rmtree(base / name, ignore_errors=True)
        (base / name).mkdir(parents=True)
    roots: dict[str, Path] = {NATIVE: base / "plain"}
    mounts: dict[str, tuple[Mounter, Mount]] = {}
    store = base / "store" / f"r{r}"
    try:
        if hp is not None:
            cm = _CmdMounter(HP, [hp, "--foreground"], ctx.workdir / "logs")
            mnt = ctx.mountpoint("programs-hp")
            mnt.mkdir(parents=True, exist_ok=True)
            try:
                mounts[HP] = (cm, cm.mount(base / "hp-src", mnt))
                roots[HP] = mnt
            except BenchError as exc:
                log.warning("programs: the C peer did not mount: %s", exc)
        smo = StoreSwfsMounter(sw, store)
        mnt = ctx.mountpoint("programs-swfs")
        mnt.mkdir(parents=True, exist_ok=True)
        mounts[SWFS] = (smo, smo.mount(base / "swfs-src", mnt))
        roots[SWFS] = mnt
        yield roots, mounts, base / "swfs-src", store
    finally:
        for mounter, m in mounts.values():
            mounter.unmount(m)


def _settle(mount: tuple[Mounter, Mount] | None) -> None:
    """Let swfs finish what a program left it (not timed)."""
    if mount is not None:
        mount[0].settle(mount[1])


def _check(sw: SwfsMounter, src: Path, store: Path) -> tuple[int, str]:
    """``swfs check`` of swfs's folder and store, unmounted: (exit, last line)."""
    cp = run_cmd([sw.exe, "check", "--store", store, src], timeout=1800, check=False)
    text = (cp.stdout + cp.stderr).strip().splitlines()
    return cp.returncode, text[-1] if text else ""


def programs(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync", "check")
    for tool in ("git", "tar", "rsync"):
        if shutil.which(tool) is None:
            raise Unsupported(f"needs {tool}")
    ps = ProgSizes.for_ctx(ctx)
    rounds = max(1, min(ctx.rounds, ctx.sizes.program_rounds))
    inp = inputs(ctx, ps)
    hp, why = passthrough_hp(ctx)
    home = Path(tempfile.mkdtemp(prefix="programs-home-", dir=ctx.workdir))
    env = _env(home)
    steps = _steps(inp, ps, env)
    result.info.update(
        repo_files=ps.repo_files,
        commits=ps.commits,
        checkout_back=ps.back,
        tar_files=inp.files,
        rsync_entries=inp.entries,
        sqlite=f"{WRITERS} writers x {ps.transactions} transactions",
        op_files=ps.ops,
        timeout_s=ps.timeout,
        rounds=rounds,
    )
    names = [m for _, _, ms in steps for m in ms]
    for name in names:
        unit = "ms" if name.endswith("_ms") else "s"
        result.metric(name, unit, note="swfs / plain")
    for name in names:
        unit = "ms" if name.endswith("_ms") else "s"
        mt = result.metric(f"{name}@{HP}", unit, note="C passthrough_hp / plain")
        if hp is None:
            mt.note = f"passthrough_hp unavailable: {why}"
    for name in names:
        unit = "ms" if name.endswith("_ms") else "s"
        result.metric(
            f"{name}_vs_C", unit, target=Target("<=", 2.0, "<=2x"), note="swfs / C passthrough_hp"
        )
    locked: dict[str, dict[str, list[int]]] = {}
    tps: dict[str, dict[str, list[float]]] = {}
    failures: list[str] = []
    checks: list[str] = []
    try:
        for r in range(rounds):
            order = [NATIVE, HP, SWFS] if r % 2 == 0 else [SWFS, HP, NATIVE]
            with _mounts(ctx, hp, sw, r) as (roots, mounts, swfs_src, store):
                order = [s for s in order if s in roots]
                got: dict[str, dict[str, float]] = {s: {} for s in order}
                for step, fn, metrics in steps:
                    for side in order:
                        d = roots[side] / f"{step}-{r}"
                        d.mkdir()
                        try:
                            if step.startswith("sqlite_"):
                                mode = "wal" if step == "sqlite_wal" else "delete"
                                dt, n_locked = _sqlite(d, mode, ps, env)
                                got[side][step] = dt
                                locked.setdefault(step, {}).setdefault(side, []).append(n_locked)
                                tps.setdefault(step, {}).setdefault(side, []).append(
                                    round(WRITERS * ps.transactions / dt, 1)
                                )
                            else:
                                got[side].update(fn(d))
                        except (BenchError, OSError, sqlite3.Error, ValueError) as exc:
                            failures.append(f"{side} {step}: {exc}")
                            log.warning("programs round %d %s %s: %s", r + 1, side, step, exc)
                        finally:
                            _settle(mounts.get(side))
                            _rmtree(d, ps.timeout)
                            _settle(mounts.get(side))
                    log.info(
                        "programs round %d/%d %s: %s",
                        r + 1,
                        rounds,
                        step,
                        ", ".join(
                            f"{s} {got[s][k]:.3g}"
                            for k in metrics[:1]
                            for s in order
                            if k in got[s]
                        ),
                    )
            # unmounted: the store as a remount would find it
            code, last = _check(sw, swfs_src, store)
            checks.append(f"round {r + 1}: swfs check exit {code}: {last}")
            result.info.setdefault("swfs_check", []).append({"exit": code, "last_line": last})
            for name in names:
                nat = got[NATIVE].get(name, math.nan)
                for side, metric in ((SWFS, name), (HP, f"{name}@{HP}")):
                    if side in got:
                        mt = result.metric(metric, "")
                        mt.native.append(nat)
                        mt.mount.append(got[side].get(name, math.nan))
                if HP in got:
                    mt = result.metric(f"{name}_vs_C", "")
                    mt.native.append(got[HP].get(name, math.nan))
                    mt.mount.append(got[SWFS].get(name, math.nan))
            shutil.rmtree(store, ignore_errors=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(ctx.workdir / "programs", ignore_errors=True)
    result.info.update(sqlite_locked=locked, sqlite_tx_per_s=tps)
    if failures:
        result.info["failures"] = failures
        result.add_note(
            "; ".join(failures[:4]) + (f" (+{len(failures) - 4})" if len(failures) > 4 else "")
        )
    for step, by_side in locked.items():
        total = {s: sum(v) for s, v in by_side.items()}
        if any(total.values()):
            result.add_note(f"{step} 'database is locked': {total}")
    result.add_note("; ".join(checks))


def table(results: list[WorkloadResult]) -> str:
    """The issue's table: each program's plain time, and swfs's and the C
    peer's as ratios (medians of the rounds)."""
    r = next((r for r in results if r.name == "programs" and r.metrics), None)
    if r is None:
        return ""
    by = {m.name: m.summary() for m in r.metrics}
    rows = [["program", "plain", "C hp / plain", "swfs / plain", "swfs / C hp"]]

    def x(v: float | None) -> str:
        return "n/a" if v is None or v != v else f"{v:.2f}x"

    for name, s in by.items():
        if "@" in name or name.endswith("_vs_C"):
            continue
        plain = s["native_median"]
        unit = "ms" if name.endswith("_ms") else "s"
        hp = by.get(f"{name}@{HP}", {})
        vs = by.get(f"{name}_vs_C", {})
        rows.append(
            [
                name,
                "n/a" if plain != plain else f"{plain:.3g} {unit}",
                x(hp.get("ratio_median")),
                x(s["ratio_median"]),
                x(vs.get("ratio_median")),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    extra = [
        f"{step} transactions/s {tx}, 'database is locked' {r.info['sqlite_locked'][step]}"
        for step, tx in r.info.get("sqlite_tx_per_s", {}).items()
    ]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ) + "".join(f"\n{line}" for line in extra)


WORKLOADS = {"programs": programs}
