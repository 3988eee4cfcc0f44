"""Real mounts for tests: a daemon in a subprocess, ``wait_for_mount``, and a
teardown that never leaves a stale mount behind.

``python -m tests.mountutil SRC MNT [--calls FILE] [--stale wait]`` serves SRC
at MNT in the foreground with the real engine, its hook calls logged to FILE
(tests/enginewrap.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from mountd.launch import mount, mounted_swfs
from mountd.options import MountOptions
from swfs.api import EngineAPI

REPO = Path(__file__).resolve().parent.parent
TEST_USER = "swfs-test"


class MountFailed(Exception):
    pass


def errno_of(fn: Callable[[], object]) -> int:
    """The errno ``fn()`` fails with (0 if it does not fail)."""
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return 0


def wait_until(what: str, fn: Callable[[], bool], timeout: float = 90) -> None:
    """Poll ``fn`` until it holds (a busy machine gets the whole ``timeout``);
    fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def wait_for_mount(mnt: Path, proc: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Until ``mnt`` is an swfs mount that answers; fail early if the daemon dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise MountFailed(f"daemon exited with {proc.returncode} before mounting")
        if mounted_swfs(mnt):
            os.stat(mnt)  # the first request: the kernel has finished INIT
            return
        time.sleep(0.05)
    raise MountFailed(f"{mnt} not mounted after {timeout} s")


def lazy_unmount(mnt: Path) -> None:
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)


@dataclass
class Mount:
    src: Path
    mnt: Path
    calls_file: Path
    log_file: Path
    proc: subprocess.Popen[bytes]

    def calls(self, *names: str) -> list[list[str]]:
        """The engine hooks called so far (only those named, if any)."""
        try:
            lines = self.calls_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line]
        return [c for c in out if not names or c[0] in names]

    def clear_calls(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.calls_file.unlink()

    def log(self) -> str:
        try:
            return self.log_file.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Unmount and reap the daemon, whatever state it is in."""
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: a clean unmount
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if mounted_swfs(self.mnt):
            lazy_unmount(self.mnt)


def workdir() -> Path:
    """A fresh directory any user can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="swfs-test-"))
    d.chmod(0o755)
    return d


def start(
    src: Path,
    mnt: Path,
    *,
    args: Sequence[str] = (),
    timeout: float = 120.0,  # generous: a loaded machine starts Python slowly
    env: dict[str, str] | None = None,
) -> Mount:
    calls = src.parent / "calls.jsonl"
    log_file = src.parent / "daemon.log"
    cmd = [
        sys.executable,
        "-m",
        "tests.mountutil",
        str(src),
        str(mnt),
        "--calls",
        str(calls),
        *args,
    ]
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    m = Mount(src, mnt, calls, log_file, proc)
    try:
        wait_for_mount(mnt, proc, timeout)
    except BaseException:
        m.stop()
        raise
    return m


def cleanup_dir(d: Path) -> None:
    if not any(mounted_swfs(p) for p in (d / "mnt",)):
        shutil.rmtree(d, ignore_errors=True)


def ensure_test_user() -> str | None:
    """Create the unprivileged test user (root only); None when impossible."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        return None
    if subprocess.run(["id", TEST_USER], capture_output=True, check=False).returncode != 0:
        proc = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/bin/sh", TEST_USER],
            capture_output=True,
            check=False,
        )
        if proc.returncode not in (0, 9):  # 9: exists (a concurrent test made it)
            return None
    return TEST_USER


def as_user(user: str, *cmd: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *cmd], capture_output=True, check=False, timeout=30
    )


def _engine_factory(
    src: Path, calls: Path | None, crash_after: float | None
) -> AbstractContextManager[EngineAPI]:
    """The real engine, watched (hook calls logged, faults injected by name:
    see tests/enginewrap.py)."""
    from swfs.engine import Engine
    from tests.enginewrap import watched

    return watched(lambda: Engine.open(src), calls=calls, crash_after=crash_after)()  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.mountutil")
    p.add_argument("src", type=Path)
    p.add_argument("mnt", type=Path)
    p.add_argument("--calls", type=Path)
    p.add_argument("--stale", choices=("serve", "wait"), default="serve")
    p.add_argument("--debug", action="store_true")
    p.add_argument("--crash-after", type=float, help="background work crashes after N seconds")
    p.add_argument("--wait-timeout", type=float, help="seconds a read of a pending unit waits")
    a = p.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if a.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    waits = {} if a.wait_timeout is None else {"pending_wait": a.wait_timeout}
    mount(
        lambda: _engine_factory(a.src, a.calls, a.crash_after),
        a.src,
        a.mnt,
        MountOptions(stale=a.stale, debug=a.debug, **waits),
        foreground=True,
        log_file=None,
    )


if __name__ == "__main__":
    main()
