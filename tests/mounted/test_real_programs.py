"""What everyday programs do in a workspace, on each mount kind (default,
``--staged``, ``--passthrough=off``), each compared with a plain folder of
the backing file system: running files by path (a script, a copied binary, a
venv's entry point), the ``f*`` calls on a file that is open but unlinked,
and saving by rename while other processes open the file (issue 36)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

KINDS = {
    "default": (),
    "staged": ("--staged",),
    "passthrough-off": ("--passthrough", "off"),
}


@pytest.fixture(scope="module", params=list(KINDS))
def mounted(request: pytest.FixtureRequest) -> Iterator[Mount]:
    def populate(src: Path) -> None:
        # A script SRC has already: a staged mount runs it from SRC's layer.
        (src / "old.sh").write_text("#!/bin/sh\necho old $1\n")
        (src / "old.sh").chmod(0o755)

    with workspace(KINDS[request.param], populate=populate) as m:
        (m.root / "plain").mkdir()
        yield m


_serial = iter(range(10**6))


@pytest.fixture
def pair(mounted: Mount) -> tuple[Path, Path]:
    """A fresh folder in the mount and its twin on the backing file system."""
    n = f"t{next(_serial)}"
    a, b = mounted.mnt / n, mounted.root / "plain" / n
    a.mkdir()
    b.mkdir()
    return a, b


def run(*cmd: str | Path, cwd: Path | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    return proc.returncode, proc.stdout + proc.stderr


# -- running files by path


def test_a_script_runs_by_path(pair: tuple[Path, Path], mounted: Mount) -> None:
    for d in pair:
        script = d / "hello.sh"
        script.write_text('#!/bin/sh\necho "hello $1"\n')
        script.chmod(0o755)
        assert run(script, "there") == (0, "hello there\n")
        assert run("./hello.sh", "here", cwd=d) == (0, "hello here\n")
    # A file SRC had before the mount, never written through it.
    assert run(mounted.mnt / "old.sh", "x") == (0, "old x\n")


def test_a_copied_binary_runs_by_path(pair: tuple[Path, Path]) -> None:
    true, echo = shutil.which("true"), shutil.which("echo")
    assert true is not None
    assert echo is not None
    for d in pair:
        shutil.copy2(true, d / "true")
        shutil.copy2(echo, d / "echo")
        assert run(d / "true") == (0, "")
        assert run(d / "echo", "from", "the", "mount") == (0, "from the mount\n")


def test_no_x_bit_is_refused_as_natively(pair: tuple[Path, Path]) -> None:
    got = []
    for d in pair:
        script = d / "noexec.sh"
        script.write_text("#!/bin/sh\necho ran\n")
        script.chmod(0o644)
        try:
            subprocess.run([str(script)], capture_output=True, check=False, timeout=60)
        except OSError as exc:
            got.append(exc.errno)
        else:
            got.append(0)
    assert got == [errno.EACCES, errno.EACCES]


def test_a_venv_entry_point_runs(pair: tuple[Path, Path]) -> None:
    for d in pair:
        venv = d / "venv"
        code, out = run(sys.executable, "-m", "venv", "--without-pip", venv)
        assert code == 0, out
        # An entry point as pip writes one: the venv's python on the #! line.
        tool = venv / "bin" / "tool"
        tool.write_text(
            f"#!{venv}/bin/python\nimport sys\nprint('tool', sys.prefix == {str(venv)!r})\n"
        )
        tool.chmod(0o755)
        assert run(tool) == (0, "tool True\n")
        assert run(venv / "bin" / "python", "-c", "print(6 * 7)") == (0, "42\n")


# -- a file open but unlinked


def _unlinked_calls(d: Path) -> list[tuple[str, object]]:
    """Each f* call on a file after its only name is gone: its result, or
    the name of its errno."""
    path = d / "gone"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    out: list[tuple[str, object]] = []

    def call(name: str, fn: Callable[[], object]) -> None:
        try:
            out.append((name, fn()))
        except OSError as exc:
            out.append((name, errno.errorcode.get(exc.errno or 0, exc.errno)))

    try:
        os.write(fd, b"hello, world")
        os.unlink(path)
        call("exists", lambda: path.exists())
        call("ftruncate", lambda: os.ftruncate(fd, 5))
        call("size", lambda: os.fstat(fd).st_size)
        call("fchmod", lambda: os.fchmod(fd, 0o600))
        call("mode", lambda: oct(os.fstat(fd).st_mode))
        call("fchown", lambda: os.fchown(fd, os.getuid(), os.getgid()))
        call("futimens", lambda: os.utime(fd, ns=(1_000_000_000, 2_000_000_000)))
        call("mtime", lambda: os.fstat(fd).st_mtime_ns)
        call("fsetxattr", lambda: os.setxattr(fd, "user.kept", b"yes"))
        call("fgetxattr", lambda: os.getxattr(fd, "user.kept"))
        call("flistxattr", lambda: [n for n in os.listxattr(fd) if not n.startswith("user.sw.")])
        call("fgetxattr absent", lambda: os.getxattr(fd, "user.none"))
        call("fremovexattr", lambda: os.removexattr(fd, "user.kept"))
        call("write", lambda: os.pwrite(fd, b"!", 5))
        call("fsync", lambda: os.fsync(fd))
        call("read", lambda: os.pread(fd, 100, 0))
        call("ftruncate 0", lambda: os.ftruncate(fd, 0))
        call("size 0", lambda: os.fstat(fd).st_size)
    finally:
        os.close(fd)
    return out


def test_f_calls_on_an_unlinked_open_file(pair: tuple[Path, Path]) -> None:
    mine, plain = (_unlinked_calls(d) for d in pair)
    assert mine == plain
    assert ("ftruncate", None) in plain  # what ext4 (or tmpfs) allows


def test_f_calls_after_the_name_is_renamed_over(pair: tuple[Path, Path]) -> None:
    """The other way a file loses its last name: replaced by a rename."""

    def replaced(d: Path) -> list[object]:
        fd = os.open(d / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"old bytes")
            (d / "new").write_bytes(b"new")
            os.rename(d / "new", d / "f")
            os.ftruncate(fd, 3)
            os.fchmod(fd, 0o640)
            os.setxattr(fd, "user.a", b"1")
            return [
                os.pread(fd, 100, 0),
                oct(os.fstat(fd).st_mode),
                os.getxattr(fd, "user.a"),
                (d / "f").read_bytes(),
                oct((d / "f").stat().st_mode & 0o777),
            ]
        finally:
            os.close(fd)

    mine, plain = (replaced(d) for d in pair)
    assert mine == plain


# -- saving by rename while others open the file


def _save_while_reading(d: Path, *, saves: int, readers: int) -> tuple[int, dict[str, int]]:
    """``saves`` temp-then-rename saves of one file while ``readers`` threads
    open and read it in a loop: how many reads, and each error's count
    (a read of anything but one whole version counts as "torn")."""
    target = d / "config.json"
    target.write_bytes(b"v-1\n")
    done = threading.Event()
    errors: Counter[str] = Counter()
    reads = [0] * readers

    def read(i: int) -> None:
        while not done.is_set():
            try:
                data = target.read_bytes()
            except OSError as exc:
                errors[errno.errorcode.get(exc.errno or 0, str(exc.errno))] += 1
                continue
            lines = set(data.splitlines())
            if len(lines) != 1 or not data.startswith(b"v"):
                errors["torn"] += 1
            reads[i] += 1

    threads = [threading.Thread(target=read, args=(i,)) for i in range(readers)]
    for t in threads:
        t.start()
    try:
        for n in range(saves):
            tmp = d / f".config.json.{n}.tmp"
            tmp.write_bytes(f"v{n}\n".encode() * 20)
            os.rename(tmp, target)
    finally:
        done.set()
        for t in threads:
            t.join()
    return sum(reads), dict(errors)


@pytest.mark.parametrize("readers", [1, 2])
def test_rename_over_a_file_is_atomic_for_readers(pair: tuple[Path, Path], readers: int) -> None:
    """An editor's, git's or a config writer's save: every open of the
    target finds the old file or the new one, never no file (nor a stale
    handle); as in a plain folder."""
    for d in pair:
        reads, errors = _save_while_reading(d, saves=200, readers=readers)
        assert errors == {}, d
        assert reads > 0
        assert (d / "config.json").read_bytes() == b"v199\n" * 20
