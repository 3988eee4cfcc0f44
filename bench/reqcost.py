"""Request-cost workloads (issue 16): what an agent's everyday commands cost
through the mount, next to peers measured in the same run.

Every metric is a ratio, mount / native, each round pairing the two.  Besides
swfs, the same operations run through peers, each its own column in the
peer table (and its own ``METRIC@PEER`` row in results.json):

* ``hp``: libfuse's C example ``passthrough_hp`` (libfuse 3.17, kernel
  passthrough of file data), built by ``bench/peer.sh`` outside the
  repository;
* ``hp_nopt``: the same with ``--nopassthrough``;
* ``pyfuse3``: the plain pyfuse3 passthrough of bench/refpassthrough.py;
* ``hp_same`` (``reqcost_tree``): ``hp`` serving a plain copy of the tree a
  walk from swfs's root meets (``.parsed`` and ``.review`` included), against
  the same native folder: the C peer with swfs's shape to serve.

In ``reqcost_parsed`` the peers serve the plain copy of the units that is the
native side there.

A peer that cannot be built or mounted gets its reason in its rows' note; the
run goes on.  One file system is mounted at a time (swfs keeps its store
outside the folder, with ``--store``), so the peers never see swfs's store
and nothing is written behind a mount's back.  The target of each swfs row is
the C passthrough's ratio in the same run; for ``find_root`` and
``grep_root``, walks from the root that in swfs also cover ``.parsed`` and
``.review``, twice ``hp_same``'s (``Plan.peer``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import gen
from bench.common import NATIVE, Ctx, MiB, run_tool, timed
from bench.mounter import (
    _LIVE,
    MOUNT_TIMEOUT,
    UMOUNT_TIMEOUT,
    BenchError,
    Mount,
    Mounter,
    SwfsMounter,
    Unsupported,
    _wait_mounted,
    fuse_daemon_pid,
    run_cmd,
)
from bench.report import Target, WorkloadResult

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
AGENT_LOG = HERE / "agentlog.sh"
SEARCH_WORD = "covenant"  # one of gen.WORDS, in many units of every parsed format
PEER_BUILD_TIMEOUT = 1800.0
FD_MARGIN = 1_000  # descriptors a passthrough needs beyond one per inode


@dataclass(frozen=True)
class ReqSizes:
    tree_files: int
    tree_dirs: int
    xattr_calls: int
    creates: int
    read_bytes: int
    cat_units: int

    @classmethod
    def for_ctx(cls, ctx: Ctx) -> ReqSizes:
        if ctx.quick:
            return cls(1_000, 10, 300, 200, 32 * MiB, 100)
        return cls(15_000, 150, 3_000, 2_000, 256 * MiB, 1_000)


# -- the peers


class CmdMounter(Mounter):
    """A FUSE file system run in the foreground as a child process, unmounted
    with ``fusermount3 -u``."""

    def __init__(self, name: str, argv: list[str], logdir: Path) -> None:
        self.name = name
        self.argv = argv
        self.logdir = logdir

    def mount(self, source: Path, mountpoint: Path) -> Mount:
        self.logdir.mkdir(parents=True, exist_ok=True)
        with open(self.logdir / f"peer-{self.name}.log", "ab") as logf:
            proc = subprocess.Popen(
                [*self.argv, str(source), str(mountpoint)],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                cwd=HERE.parent,
            )
        m = Mount(source, mountpoint, proc.pid, proc)
        _LIVE[mountpoint] = (self, m)
        try:
            _wait_mounted(mountpoint, MOUNT_TIMEOUT, proc)
        except BaseException:
            self.unmount(m)
            raise
        return m

    def _unmount(self, m: Mount) -> None:
        run_cmd(["fusermount3", "-u", m.mountpoint], timeout=UMOUNT_TIMEOUT)


class StoreSwfsMounter(SwfsMounter):
    """``swfs mount --store STORE``: the store outside the folder, so that the
    native folder (and the peers mounting it) hold only the user's files.
    ``SWFS_BENCH_MOUNT_ARGS`` adds options (to measure one, e.g.
    ``--cache-timeout 60``)."""

    def __init__(self, base: SwfsMounter, store: Path) -> None:
        super().__init__(sync_timeout=base.sync_timeout, exe=base.exe)
        self._commands = base._commands
        self.store = store

    def mount(self, source: Path, mountpoint: Path) -> Mount:
        self.require("mount", "umount")
        m = Mount(source, mountpoint)
        _LIVE[mountpoint] = (self, m)
        try:
            extra = os.environ.get("SWFS_BENCH_MOUNT_ARGS", "").split()
            self.cmd(
                "mount", "--store", self.store, *extra, source, mountpoint, timeout=MOUNT_TIMEOUT
            )
            _wait_mounted(mountpoint, 10.0, None)
            m.pid = fuse_daemon_pid(mountpoint)
        except BaseException:
            self.unmount(m)
            raise
        return m

    def settle(self, m: Mount) -> None:
        if self.has("sync"):
            self.cmd("sync", m.mountpoint, timeout=self.sync_timeout)


_HP: tuple[str | None, str] | None = None  # (binary, why not) once tried


def passthrough_hp(ctx: Ctx) -> tuple[str | None, str]:
    """The C peer's binary, built (or found cached) by bench/peer.sh; or None and
    the one-line reason it is missing."""
    global _HP
    if _HP is None:
        env_bin = os.environ.get("SWFS_BENCH_PASSTHROUGH_HP")
        if env_bin:
            _HP = (env_bin, "") if os.access(env_bin, os.X_OK) else (None, f"{env_bin}: absent")
            return _HP
        logf = ctx.workdir / "logs" / "peer-build.log"
        logf.parent.mkdir(parents=True, exist_ok=True)
        log.info("building the C peer (bench/peer.sh; log %s)", logf)
        try:
            with open(logf, "ab") as errf:
                cp = subprocess.run(
                    ["sh", str(HERE / "peer.sh")],
                    stdout=subprocess.PIPE,
                    stderr=errf,
                    stdin=subprocess.DEVNULL,
                    timeout=PEER_BUILD_TIMEOUT,
                )
            out = cp.stdout.decode(errors="replace").strip().splitlines()
            if cp.returncode == 0 and out and os.access(out[-1], os.X_OK):
                _HP = (out[-1], "")
            else:
                tail = [ln for ln in logf.read_text(errors="replace").splitlines() if ln.strip()]
                why = next((ln for ln in reversed(tail) if ln.startswith("peer.sh:")), None)
                _HP = (None, why or f"bench/peer.sh exit {cp.returncode} (see {logf.name})")
        except (OSError, subprocess.SubprocessError) as exc:
            _HP = (None, f"bench/peer.sh: {exc}")
    return _HP


@dataclass
class Side:
    """One column: a mounter (None for an unavailable peer, with the reason)."""

    name: str  # "" for swfs itself, else the peer's name
    mounter: Mounter | None
    why_not: str = ""
    source: Path | None = None  # what this side mounts, if not the workload's folder

    def metric_name(self, metric: str) -> str:
        return f"{metric}@{self.name}" if self.name else metric


def _too_many_inodes(tree: Path) -> str:
    """Why passthrough_hp cannot serve ``tree`` here, or "": it holds a
    descriptor per inode it has looked up."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return ""
    entries = sum(1 for _ in tree.rglob("*"))
    if entries + FD_MARGIN <= hard:
        return ""
    return (
        f"passthrough_hp keeps a descriptor per inode: {entries:,} entries,"
        f" the open-file limit is {hard:,}"
    )


def _hp_side(
    ctx: Ctx, name: str, extra: list[str], too_many: str, source: Path | None = None
) -> Side:
    """A C-peer side; ``too_many`` is `_too_many_inodes` of the tree it serves."""
    hp, why = passthrough_hp(ctx)
    if hp is None:
        return Side(name, None, f"passthrough_hp unavailable: {why}")
    if too_many:
        return Side(name, None, too_many)
    logdir = ctx.workdir / "logs"
    return Side(name, CmdMounter(name, [hp, "--foreground", *extra], logdir), source=source)


def sides(ctx: Ctx, store: Path, src: Path, same_tree: Path | None = None) -> list[Side]:
    """The peers first, then swfs (whose targets come from the C peer's ratios).

    ``same_tree``, a plain copy of everything a walk from swfs's root meets
    (``.parsed`` and ``.review`` included), adds the ``hp_same`` side: the C
    peer serving a tree of the shape swfs serves."""
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    logdir = ctx.workdir / "logs"
    too_many = _too_many_inodes(src)
    out = [
        _hp_side(ctx, "hp", [], too_many),
        _hp_side(ctx, "hp_nopt", ["--nopassthrough"], too_many),
    ]
    if same_tree is not None:
        out.append(_hp_side(ctx, "hp_same", [], _too_many_inodes(same_tree), source=same_tree))
    out.append(
        Side(
            "pyfuse3", CmdMounter("pyfuse3", [sys.executable, "-m", "bench.refpassthrough"], logdir)
        )
    )
    out.append(Side("", StoreSwfsMounter(ctx.mounter, store)))
    return out


# -- the round loop over sides

RoundFn = Callable[[Path, str, int], dict[str, float]]


@dataclass
class Plan:
    metrics: dict[str, float]  # metric -> factor on the C peer's ratio for swfs's target
    # metric -> the C side whose ratio sets the target, where not ``hp``
    peer: dict[str, str] = field(default_factory=dict)


def run_sides(
    ctx: Ctx,
    result: WorkloadResult,
    src: Path,
    mnt_name: str,
    plan: Plan,
    fn: RoundFn,
    *,
    store: Path,
    warm: Callable[[Path, str], None] | None = None,
    native_root: Path | None = None,
    swfs_only: bool = False,
    peers_only: bool = False,
    same_tree: Path | None = None,
    after_side: Callable[[], None] | None = None,
) -> None:
    """For each side: mount ``src`` (or the side's own source), warm both roots,
    then ``ctx.rounds`` paired rounds of ``fn(root, side, round)`` (native first
    on even rounds), unmount, then ``after_side()``.  ``fn`` returns
    {metric: seconds}."""
    all_sides = sides(ctx, store, src, same_tree)
    if swfs_only:
        all_sides = [s for s in all_sides if not s.name]
    if peers_only:
        all_sides = [s for s in all_sides if s.name]
    peer_ratio: dict[tuple[str, str], float] = {}  # (side, metric) -> its median ratio
    native = native_root or src
    for side in all_sides:
        for metric in plan.metrics:
            mt = result.metric(side.metric_name(metric), "s")
            if side.mounter is None:
                mt.note = side.why_not
        if side.mounter is None:
            continue
        label = side.name or "swfs"
        try:
            source = side.source or src
            with side.mounter.mounted(source, ctx.mountpoint(f"{mnt_name}-{label}")) as m:
                side.mounter.settle(m)
                if warm is not None:
                    warm(native, NATIVE)
                    warm(m.mountpoint, label)
                for r in range(ctx.rounds):
                    order = ((native, NATIVE), (m.mountpoint, label))
                    for root, who in order if r % 2 == 0 else order[::-1]:
                        values = fn(root, who, r)
                        side.mounter.settle(m)
                        for name, v in values.items():
                            mt = result.metric(side.metric_name(name), "s")
                            (mt.native if who == NATIVE else mt.mount).append(v)
                medians = {
                    k: result.metric(side.metric_name(k), "s").summary()["ratio_median"]
                    for k in plan.metrics
                }
                log.info(
                    "%s %s: %s",
                    result.name,
                    label,
                    ", ".join(f"{k} {v:.2f}x" for k, v in medians.items()),
                )
        except BenchError as exc:
            if not side.name:
                raise
            log.warning("%s: peer %s failed: %s", result.name, side.name, exc)
            for metric in plan.metrics:
                result.metric(side.metric_name(metric), "s").note = f"{side.name}: {exc}"
            continue
        finally:
            if after_side is not None:
                after_side()
        if side.name:
            for metric in plan.metrics:
                summary = result.metric(side.metric_name(metric), "s").summary()
                peer_ratio[(side.name, metric)] = summary["ratio_median"]
    set_targets(result, plan, peer_ratio)


def set_targets(
    result: WorkloadResult, plan: Plan, peer_ratio: dict[tuple[str, str], float]
) -> None:
    """swfs's target of each metric: the factor times the median ratio its C
    side (``plan.peer``, else ``hp``) got in this run, where it got one."""
    for metric, factor in plan.metrics.items():
        peer = plan.peer.get(metric, "hp")
        c = peer_ratio.get((peer, metric))
        if c is not None and c == c:
            who = "C" if peer == "hp" else f"C {peer}"
            text = f"<={c * factor:.3g}x ({who}{' x2' if factor != 1 else ''})"
            result.metric(metric, "s").target = Target("<=", c * factor, text)


# -- workloads


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in gen.iter_files(root))


def reqcost_tree(ctx: Ctx, result: WorkloadResult) -> None:
    """``find .``, ``ls -lR``, ``grep -r`` from the root, warm stat of every file
    and ``getxattr`` of an absent name, on 15,000 / 1,000 small text files in
    150 / 10 folders."""
    rs = ReqSizes.for_ctx(ctx)
    base = gen.file_tree(ctx.data, rs.tree_files, rs.tree_dirs)
    src = base / "tree"
    files = _files(src)
    probe = files[len(files) // 2]
    result.info.update(files=len(files), dirs=rs.tree_dirs, xattr_calls=rs.xattr_calls)
    # Walks from the root meet .parsed and .review too: their bar is twice the
    # C peer serving a plain copy of that same tree (issue 38), not of SRC.
    plan = Plan(
        {"find_root": 2.0, "ls_lR": 1.0, "grep_root": 2.0, "stat_warm": 1.0},
        peer={"find_root": "hp_same", "grep_root": "hp_same"},
    )
    plan.metrics["xattr_miss"] = 1.0
    lines: dict[str, set[int]] = {}

    def stat_all(root: Path) -> None:
        for f in files:
            os.stat(root / f)

    def xattrs(path: Path) -> None:
        for _ in range(rs.xattr_calls):
            try:  # noqa: SIM105 (contextlib.suppress adds its own cost to each call)
                os.getxattr(path, "user.bench.absent")
            except OSError:
                pass

    def warm(root: Path, who: str) -> None:
        for argv in (["find", "."], ["ls", "-lR"], ["grep", "-r", gen.NEEDLE, "."]):
            run_tool(argv, cwd=root)
        stat_all(root)

    def one(root: Path, who: str, r: int) -> dict[str, float]:
        t_find, _ = run_tool(["find", "."], cwd=root)
        t_ls, _ = run_tool(["ls", "-lR"], cwd=root)
        t_grep, out = run_tool(["grep", "-r", gen.NEEDLE, "."], cwd=root)
        lines.setdefault(who, set()).add(out.count(b"\n"))
        return {
            "find_root": t_find,
            "ls_lR": t_ls,
            "grep_root": t_grep,
            "stat_warm": timed(lambda: stat_all(root)),
            "xattr_miss": timed(lambda: xattrs(root / probe)),
        }

    with _store(ctx, "tree") as store:
        same = _same_tree(ctx, src, store, "rq-tree-copy")
        result.info["same_tree_entries"] = sum(1 for _ in same.rglob("*"))
        run_sides(ctx, result, src, "rq-tree", plan, one, store=store, warm=warm, same_tree=same)
    result.info["grep_lines"] = {k: sorted(v) for k, v in lines.items()}


def reqcost_io(ctx: Ctx, result: WorkloadResult) -> None:
    """Create 2,000 / 200 files of 100 bytes (binary, so swfs has nothing to
    parse: the file path only), then a 256 / 32 MiB file read in 1 MiB blocks,
    cold (caches dropped; n/a when not root) and warm."""
    rs = ReqSizes.for_ctx(ctx)
    src = gen.big_file(ctx.data, rs.read_bytes, seed=16)
    big = "big/data.bin"
    payload = b"\0bench\0" + bytes(range(93))
    result.info.update(creates=rs.creates, file_bytes=100, read_bytes=rs.read_bytes)
    plan = Plan({"create": 1.0, "read_cold": 1.0, "read_warm": 1.0})
    native_dir = ctx.native_scratch("reqcost-io")
    (native_dir / "big").mkdir()
    os.link(src / big, native_dir / big)

    def read_all(path: Path) -> None:
        buf = bytearray(MiB)
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass

    # Each round's files stay until the side is unmounted, then move aside,
    # and all are deleted at the end.  Deleting them between rounds made the
    # next round's creates pay for it: ext4 without a journal (this bench's
    # usual disk) will not reuse an inode freed in the last 60 s, and every
    # create in that block group walks past each one (``recently_deleted``
    # in fs/ext4/ialloc.c), by an amount that differs between sides.
    gone = ctx.native_scratch("reqcost-io-gone")
    made = itertools.count()

    def one(root: Path, who: str, r: int) -> dict[str, float]:
        d = root / f"churn-{who}-{next(made)}"
        paths = [d / f"f{i:05d}" for i in range(rs.creates)]

        def create() -> None:
            d.mkdir()
            for p in paths:
                with open(p, "wb") as f:
                    f.write(payload)

        os.sync()
        t_create = timed(create)
        cold = ctx.drop_caches()
        t_cold = timed(lambda: read_all(root / big)) if cold else float("nan")
        t_warm = timed(lambda: read_all(root / big))
        return {"create": t_create, "read_cold": t_cold, "read_warm": t_warm}

    def set_aside() -> None:
        """Move the unmounted side's churn out of both roots (a rename
        frees no inode); a later side's mount must not find it in ``src``."""
        for root in (src, native_dir):
            for d in root.glob("churn-*"):
                try:
                    d.rename(gone / d.name)
                except OSError:
                    shutil.rmtree(d, ignore_errors=True)

    try:
        with _store(ctx, "io") as store:
            run_sides(
                ctx,
                result,
                src,
                "rq-io",
                plan,
                one,
                store=store,
                native_root=native_dir,
                after_side=set_aside,
            )
    finally:
        set_aside()
        shutil.rmtree(native_dir, ignore_errors=True)
        shutil.rmtree(gone, ignore_errors=True)
    if ctx.can_drop_caches is False:
        for m in result.metrics:
            if m.name.startswith("read_cold"):
                m.note = "n/a: cannot drop caches (not root)"


def _same_tree(ctx: Ctx, src: Path, store: Path, mnt_name: str) -> Path:
    """A plain copy of what a walk from swfs's root meets: the native files and
    the generated trees it lists (``.parsed``, ``.review``; ``.versions`` is not
    listed), copied with ``cp -r`` (no extended attributes) from a mount of
    ``src`` over ``store``, once parsed."""
    dest = ctx.scratch(mnt_name) / "tree"
    sw = StoreSwfsMounter(_swfs(ctx), store)
    with sw.mounted(src, ctx.mountpoint(mnt_name)) as m:
        sw.settle(m)
        run_cmd(["cp", "-r", f"{m.mountpoint}/.", dest], timeout=1800)
    return dest


def _plain_copy(ctx: Ctx, parsed: Path) -> Path:
    plain = ctx.scratch("reqcost-parsed") / "parsed"
    shutil.copytree(parsed, plain)
    return plain


def reqcost_parsed(ctx: Ctx, result: WorkloadResult) -> None:
    """On the generated workspace (11,000 / 40 files): a walk of ``.parsed``
    (``find``, and ``ls -lR``), ``cat`` of 1,000 / 100 units, ``grep -r`` over
    ``.parsed``; the native side is the same units copied as plain files."""
    rs = ReqSizes.for_ctx(ctx)
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    plan = Plan({"parsed_find": 1.0, "parsed_ls_lR": 1.0, "cat_units": 1.0, "grep_parsed": 1.0})
    with _store(ctx, src.name, keep=True) as store:
        sw = StoreSwfsMounter(_swfs(ctx), store)
        with sw.mounted(src, ctx.mountpoint("rq-ws-copy")) as m:
            sw.settle(m)
            plain = _plain_copy(ctx, m.mountpoint / ".parsed")
        units = _files(plain)
        step = max(1, len(units) // rs.cat_units)
        pick = units[::step][: rs.cat_units]
        result.info.update(units=len(units), cat_units=len(pick), word=SEARCH_WORD)
        lines: dict[str, set[int]] = {}

        def one(root: Path, who: str, r: int) -> dict[str, float]:
            t_find, _ = run_tool(["find", "."], cwd=root)
            t_ls, _ = run_tool(["ls", "-lR"], cwd=root)
            t_cat, _ = run_tool(["cat", *pick], cwd=root)
            t_grep, out = run_tool(["grep", "-rn", SEARCH_WORD, "."], cwd=root)
            lines.setdefault(who, set()).add(out.count(b"\n"))
            return {
                "parsed_find": t_find,
                "parsed_ls_lR": t_ls,
                "cat_units": t_cat,
                "grep_parsed": t_grep,
            }

        def warm(root: Path, who: str) -> None:
            one(root, who, -1)

        # The swfs side's root is MNT/.parsed: mount the workspace, walk its .parsed.
        def one_sw(root: Path, who: str, r: int) -> dict[str, float]:
            return one(root if who == NATIVE else root / ".parsed", who, r)

        def warm_sw(root: Path, who: str) -> None:
            warm(root if who == NATIVE else root / ".parsed", who)

        # The peers serve the plain copy itself: what the same walk, cat and grep
        # of the same files cost any passthrough.
        run_sides(
            ctx,
            result,
            plain,
            "rq-units",
            plan,
            one,
            store=store,
            warm=warm,
            native_root=plain,
            peers_only=True,
        )
        run_sides(
            ctx,
            result,
            src,
            "rq-ws",
            plan,
            one_sw,
            store=store,
            warm=warm_sw,
            native_root=plain,
            swfs_only=True,
        )
    result.info["grep_lines"] = {k: sorted(v) for k, v in lines.items()}
    for name in plan.metrics:
        result.metric(name, "s").target = Target("<=", 2.0, "<=2x")


def agent_commands() -> list[str]:
    return [
        ln
        for ln in AGENT_LOG.read_text().splitlines()
        if ln.strip() and not ln.lstrip().startswith("#")
    ]


def reqcost_agent(ctx: Ctx, result: WorkloadResult) -> None:
    """The shell session of bench/agentlog.sh (grep, find, ls, cat, head, a Python
    script reading xlsx with openpyxl, the same over ``.parsed``) replayed in the
    workspace's root, every command to a pipe; one time for the whole log."""
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    commands = agent_commands()
    plan = Plan({"agent_loop": 1.0})
    result.info.update(commands=len(commands), log=AGENT_LOG.name)
    with _store(ctx, src.name, keep=True) as store:
        sw = StoreSwfsMounter(_swfs(ctx), store)
        with sw.mounted(src, ctx.mountpoint("rq-ws-copy")) as m:
            sw.settle(m)
            plain = _plain_copy(ctx, m.mountpoint / ".parsed")
        failures: set[str] = set()

        def replay(root: Path, who: str) -> None:
            env = dict(os.environ, PY=sys.executable, LC_ALL="C")
            env["PARSED"] = ".parsed" if who == "swfs" else str(plain)
            for cmd in commands:
                cp = subprocess.run(
                    ["sh", "-c", cmd],
                    cwd=root,
                    env=env,
                    capture_output=True,
                    stdin=subprocess.DEVNULL,
                    timeout=600,
                )
                if cp.returncode not in (0, 1):
                    err = cp.stderr.decode(errors="replace").strip().splitlines()[-1:]
                    failures.add(f"{who}: {cmd[:40]}: exit {cp.returncode} {' '.join(err)}")

        def one(root: Path, who: str, r: int) -> dict[str, float]:
            return {"agent_loop": timed(lambda: replay(root, who))}

        run_sides(ctx, result, src, "rq-agent", plan, one, store=store, warm=replay)
    if failures:
        result.add_note("; ".join(sorted(failures)[:3]))


def _swfs(ctx: Ctx) -> SwfsMounter:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    return ctx.mounter


@contextlib.contextmanager
def _store(ctx: Ctx, name: str, *, keep: bool = False) -> Iterator[Path]:
    """swfs's store for a data set, outside the folder; removed afterwards unless
    ``keep`` (the workspace's, whose first parse is the costly part)."""
    store = ctx.workdir / "stores" / f"reqcost-{name}"
    if not keep:
        shutil.rmtree(store, ignore_errors=True)
    store.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield store
    finally:
        if not keep:
            shutil.rmtree(store, ignore_errors=True)


def peer_table(results: list[WorkloadResult]) -> str:
    """Median ratios of every ``METRIC`` with ``METRIC@PEER`` rows, one column per
    side: the issue's table."""
    cols = ["hp", "hp_nopt", "hp_same", "pyfuse3", ""]
    heads = ["C passthrough_hp", "hp --nopassthrough", "hp, swfs's tree", "pyfuse3", "swfs"]
    rows: list[list[str]] = []
    for r in results:
        if r.name == "programs":  # its own table (bench/programs.py)
            continue
        by = {m.name: m for m in r.metrics}
        for m in r.metrics:
            if "@" in m.name:
                continue
            if not any(f"{m.name}@{c}" in by for c in cols if c):
                continue
            cells = [f"{r.name}.{m.name}"]
            for c in cols:
                mt = by.get(f"{m.name}@{c}" if c else m.name)
                v = mt.summary()["ratio_median"] if mt is not None else float("nan")
                cells.append("n/a" if v != v else f"{v:.2f}x")
            rows.append(cells)
    if not rows:
        return ""
    table = [["workload.metric", *heads], *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(heads) + 1)]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    )


WORKLOADS = {
    "reqcost_tree": reqcost_tree,
    "reqcost_io": reqcost_io,
    "reqcost_parsed": reqcost_parsed,
    "reqcost_agent": reqcost_agent,
}
