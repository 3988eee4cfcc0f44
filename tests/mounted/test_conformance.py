"""Differential conformance: the same random operation sequences applied to a
directory inside the mount and to a plain directory beside SRC on the backing
filesystem; every result (value or errno) and the whole resulting tree (types,
contents, sizes, modes, link counts, listings, user.* xattrs) must agree.

Run as root, and as an unprivileged user (the operations execute in a forked
child that dropped to the test user; the mount has allow_other).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.mountutil import ensure_test_user, needs_fuse, report_count, workspace

pytestmark = [pytest.mark.mount, needs_fuse]

_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2

NAMES = ["a", "b", "c", "d", "d/a", "d/e", "d/e/a", "e", "e/b"]
OPEN_FLAGS = {
    "creat_excl": os.O_CREAT | os.O_EXCL | os.O_WRONLY,
    "creat_trunc": os.O_CREAT | os.O_TRUNC | os.O_WRONLY,
    "append": os.O_APPEND | os.O_WRONLY,
    "creat_append": os.O_CREAT | os.O_APPEND | os.O_RDWR,
    "rdonly": os.O_RDONLY,
    "rdwr": os.O_RDWR,
    "trunc_rdonly": os.O_TRUNC | os.O_RDONLY,
    "directory": os.O_RDONLY | os.O_DIRECTORY,
    "wronly": os.O_WRONLY,
    "nofollow": os.O_RDONLY | os.O_NOFOLLOW,
}
MODES = [0o644, 0o600, 0o755, 0o000, 0o444, 0o4755, 0o2755, 0o1777, 0o700]
XNAMES = ["user.one", "user.two", "user.sw.mine"]


def renameat2(old: str, new: str, flags: int) -> None:
    if _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def apply(base: str, op: dict[str, Any]) -> tuple[str, Any]:
    """Run one operation below ``base``: ("ok", value) or ("err", errno name)."""
    p = os.path.join(base, op["path"]) if "path" in op else ""
    q = os.path.join(base, op["dst"]) if "dst" in op else ""
    kind = op["op"]
    data = bytes.fromhex(op.get("data", ""))
    try:
        value: Any = None
        if kind == "create":
            with open(p, "wb") as f:
                f.write(data)
        elif kind == "open":
            fd = os.open(p, OPEN_FLAGS[op["flags"]], 0o640)
            try:
                if data and OPEN_FLAGS[op["flags"]] & (os.O_WRONLY | os.O_RDWR):
                    value = os.write(fd, data)
                elif not OPEN_FLAGS[op["flags"]] & os.O_DIRECTORY:
                    value = os.read(fd, 64).hex()
            finally:
                os.close(fd)
        elif kind == "pwrite":
            fd = os.open(p, os.O_WRONLY)
            try:
                value = os.pwrite(fd, data, op["offset"])
            finally:
                os.close(fd)
        elif kind == "truncate":
            os.truncate(p, op["size"])
        elif kind == "rename":
            renameat2(p, q, op["flags"])
        elif kind == "link":
            os.link(p, q)
        elif kind == "unlink":
            os.unlink(p)
        elif kind == "mkdir":
            os.mkdir(p, op["mode"])
        elif kind == "rmdir":
            os.rmdir(p)
        elif kind == "symlink":
            os.symlink(op["target"], p)
        elif kind == "chmod":
            os.chmod(p, op["mode"])
        elif kind == "utimens":
            os.utime(p, ns=(op["atime"], op["mtime"]))
            st_ = os.stat(p)
            value = [st_.st_atime_ns, st_.st_mtime_ns]
        elif kind == "setxattr":
            os.setxattr(p, op["name"], data, op["flags"])
        elif kind == "removexattr":
            os.removexattr(p, op["name"])
        elif kind == "getxattr":
            value = os.getxattr(p, op["name"]).hex()
        elif kind == "readdir":
            value = sorted(os.listdir(p))
        else:
            raise AssertionError(kind)
        return ("ok", value)
    except OSError as exc:
        return ("err", errno.errorcode.get(exc.errno or 0, str(exc.errno)))


def snapshot(base: str) -> dict[str, Any]:
    """Everything observable about the tree below ``base`` that must agree."""
    out: dict[str, Any] = {}

    def walk(rel: str) -> None:
        path = os.path.join(base, rel) if rel else base
        st_ = os.lstat(path)
        entry: dict[str, Any] = {
            "type": stat.S_IFMT(st_.st_mode),
            "mode": oct(stat.S_IMODE(st_.st_mode)),
            "nlink": st_.st_nlink,
            "uid": st_.st_uid,
            "gid": st_.st_gid,
        }
        if stat.S_ISLNK(st_.st_mode):
            entry["target"] = os.readlink(path)
        else:
            names = sorted(n for n in os.listxattr(path) if not n.startswith("user.sw."))
            entry["xattrs"] = {n: os.getxattr(path, n).hex() for n in names}
        if stat.S_ISREG(st_.st_mode):
            entry["size"] = st_.st_size
            with open(path, "rb") as f:
                entry["data"] = f.read().hex()
        out[rel or "."] = entry
        if stat.S_ISDIR(st_.st_mode):
            names = sorted(os.listdir(path))
            entry["list"] = names
            for n in names:
                walk(os.path.join(rel, n) if rel else n)

    walk("")
    return out


# -- running as another user: a forked child executing ops from a pipe ---------------------


class Runner:
    """Applies each op to (mount dir, native dir), in process or in a child."""

    def __init__(self, bases: tuple[str, str], uid: int | None, gid: int | None) -> None:
        self.bases = bases
        self.conn: Connection | None = None
        self.pid = 0
        if uid is None:
            return
        parent, child = Pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                parent.close()
                assert gid is not None
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                os.umask(0o022)
                while True:
                    op = child.recv()
                    if op is None:
                        break
                    child.send([apply(b, op) for b in bases])
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        child.close()
        self.conn, self.pid = parent, pid

    def __call__(self, op: dict[str, Any]) -> list[tuple[str, Any]]:
        if self.conn is None:
            return [apply(b, op) for b in self.bases]
        self.conn.send(op)
        if not self.conn.poll(30):
            raise AssertionError(f"op {op} did not answer in 30 s (hung mount?)")
        result: list[tuple[str, Any]] = self.conn.recv()
        return result

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            self.conn.close()
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)


# -- the state machine ---------------------------------------------------------------------


class Context:
    runner: Runner
    ops = 0
    succeeded = 0
    mismatch_log: list[str] = []


CTX = Context()

paths = st.sampled_from(NAMES)
small = st.binary(max_size=48)


class Conformance(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        for base in CTX.runner.bases:  # root empties both dirs between examples
            for name in os.listdir(base):
                p = os.path.join(base, name)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.unlink(p)

    def run(self, **op: Any) -> None:
        CTX.ops += 1
        mnt_res, nat_res = CTX.runner(op)
        CTX.succeeded += nat_res[0] == "ok"
        assert mnt_res == nat_res, f"{op}: mount {mnt_res} != native {nat_res}"

    @initialize()
    def seed_tree(self) -> None:
        """Start from a small tree, so that most operations meet something."""
        for d in ("d", "e", "d/e"):
            self.run(op="mkdir", path=d, mode=0o755)
        for f in ("a", "d/a", "e/b"):
            self.run(op="create", path=f, data=f"seed {f}\n".encode().hex())

    @rule(path=paths, data=small)
    def create(self, path: str, data: bytes) -> None:
        self.run(op="create", path=path, data=data.hex())

    @rule(path=paths, flags=st.sampled_from(sorted(OPEN_FLAGS)), data=small)
    def open_flags(self, path: str, flags: str, data: bytes) -> None:
        self.run(op="open", path=path, flags=flags, data=data.hex())

    @rule(path=paths, offset=st.integers(0, 300), data=small)
    def pwrite(self, path: str, offset: int, data: bytes) -> None:
        self.run(op="pwrite", path=path, offset=offset, data=data.hex())

    @rule(path=paths, size=st.integers(0, 400))
    def truncate(self, path: str, size: int) -> None:
        self.run(op="truncate", path=path, size=size)

    @rule(
        path=paths,
        dst=paths,
        flags=st.sampled_from([0, 0, RENAME_NOREPLACE, RENAME_EXCHANGE]),
    )
    def rename(self, path: str, dst: str, flags: int) -> None:
        self.run(op="rename", path=path, dst=dst, flags=flags)

    @rule(path=paths, dst=paths)
    def link(self, path: str, dst: str) -> None:
        self.run(op="link", path=path, dst=dst)

    @rule(path=paths)
    def unlink(self, path: str) -> None:
        self.run(op="unlink", path=path)

    @rule(path=paths, mode=st.sampled_from([0o755, 0o700, 0o1777]))
    def mkdir(self, path: str, mode: int) -> None:
        self.run(op="mkdir", path=path, mode=mode)

    @rule(path=paths)
    def rmdir(self, path: str) -> None:
        self.run(op="rmdir", path=path)

    @rule(path=paths, to=st.sampled_from(["a", "b", "missing", "e/b", "d"]))
    def symlink(self, path: str, to: str) -> None:
        self.run(op="symlink", path=path, target=to)

    @rule(path=paths, mode=st.sampled_from(MODES))
    def chmod(self, path: str, mode: int) -> None:
        self.run(op="chmod", path=path, mode=mode)

    @rule(
        path=paths,
        atime=st.integers(0, 2**33).map(lambda s: s * 1_000_000_000 + 123),
        mtime=st.integers(0, 2**33).map(lambda s: s * 1_000_000_000 + 456_789),
    )
    def utimens(self, path: str, atime: int, mtime: int) -> None:
        self.run(op="utimens", path=path, atime=atime, mtime=mtime)

    @rule(
        path=paths,
        name=st.sampled_from(XNAMES),
        data=small,
        flags=st.sampled_from([0, os.XATTR_CREATE, os.XATTR_REPLACE]),
    )
    def setxattr(self, path: str, name: str, data: bytes, flags: int) -> None:
        if name.startswith("user.sw."):
            return  # reserved for swfs on the mount side
        self.run(op="setxattr", path=path, name=name, data=data.hex(), flags=flags)

    @rule(path=paths, name=st.sampled_from(XNAMES[:2]))
    def removexattr(self, path: str, name: str) -> None:
        self.run(op="removexattr", path=path, name=name)

    @rule(path=paths, name=st.sampled_from(XNAMES[:2]))
    def getxattr(self, path: str, name: str) -> None:
        self.run(op="getxattr", path=path, name=name)

    @rule(path=st.sampled_from([".", "d", "e", "d/e"]))
    def readdir(self, path: str) -> None:
        self.run(op="readdir", path=path)

    @invariant()
    def trees_agree(self) -> None:
        mnt, nat = (snapshot(b) for b in CTX.runner.bases)
        assert mnt == nat


def _run(request: pytest.FixtureRequest, uid: int | None, gid: int | None, label: str) -> None:
    def setup(src: Path) -> None:
        (src / "keep.txt").write_text("a workspace file\n")

    with workspace(populate=setup) as m:
        native = m.root / "native"
        native.mkdir()
        inside = m.mnt / "conf"
        inside.mkdir()
        os.chmod(native, 0o755)
        os.chmod(inside, 0o755)
        if uid is not None:
            assert gid is not None
            os.chown(native, uid, gid)
            os.chown(inside, uid, gid)
        CTX.runner = Runner((str(inside), str(native)), uid, gid)
        CTX.ops = CTX.succeeded = 0
        try:
            run_state_machine_as_test(
                Conformance,
                settings=settings(
                    max_examples=int(os.environ.get("SWFS_CONFORMANCE_EXAMPLES", "100")),
                    stateful_step_count=30,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                ),
            )
        finally:
            CTX.runner.close()
            report_count(request.config, f"conformance operations ({label})", CTX.ops)
            report_count(
                request.config, f"conformance operations ({label}) that succeeded", CTX.succeeded
            )
        assert m.alive(), m.log()[-2000:]
        if uid is not None:  # the operations really ran as the user, on both sides
            for base in (inside, native):
                owners = {
                    os.lstat(os.path.join(top, n)).st_uid
                    for top, dirs, files in os.walk(base)
                    for n in dirs + files
                }
                assert owners <= {uid}, (base, owners)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: 100 examples take minutes on a loaded machine
def test_conformance_as_root(request: pytest.FixtureRequest) -> None:
    _run(request, None, None, "root")


@pytest.mark.slow
@pytest.mark.timeout(900)  # a hang guard: 100 examples take minutes on a loaded machine
def test_conformance_as_unprivileged_user(request: pytest.FixtureRequest) -> None:
    user = ensure_test_user()
    if user is None:
        pytest.skip("cannot create an unprivileged user here")
    import pwd

    pw = pwd.getpwnam(user)
    _run(request, pw.pw_uid, pw.pw_gid, "unprivileged")
