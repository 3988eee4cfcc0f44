"""LibreOffice headless conversion, bounded like any other parse.

Legacy and OpenDocument files (``.doc``, ``.ppt``, ``.rtf``, ``.odt``,
``.odp``) have no dependable pure-Python reader, so they are converted with
``soffice --headless --convert-to`` into OOXML and read by the docx and pptx
parsers.  This module runs that conversion inside the parse worker:

* **One profile per worker process.**  LibreOffice allows one running
  instance per user profile; a second ``soffice`` on the same profile hands
  its job to the first over a pipe and exits.  Each worker process gets its
  own ``-env:UserInstallation`` directory (reused across files, so only the
  first conversion pays for creating it), under
  ``$TMPDIR/swfs-soffice-<uid>/<pid>/``; directories of workers that are
  gone are removed when the next worker starts converting.
* **A time limit that kills the whole process group.**  soffice runs in a
  session of its own and is killed with ``killpg`` when it overruns
  ``timeout`` (or on any error), so no helper process outlives the parse.
  It also gets ``PR_SET_PDEATHSIG``: when the parse worker itself is killed
  (the pool's own timeout), the kernel kills soffice with it.
* **The worker's memory cap.**  soffice inherits the worker's ``RLIMIT_AS``
  (LibreOffice 7.4 converts documents under a 256 MB cap); a conversion that
  runs out of it dies, and the file fails with a reason naming the cap.
* **Temporary files cleaned up.**  The input copy, the output and
  LibreOffice's own temp files (``TMPDIR``) live in one directory that is
  removed when the conversion is done (or, if the worker was killed, with
  the worker's directory).

``SWFS_SOFFICE`` chooses the program: a path, or ``none`` to act as if
LibreOffice were not installed.  ``SWFS_SOFFICE_TIMEOUT`` is the time limit in
seconds (default 90, below the parse worker's 120).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import logging
import os
import pathlib
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

from parsers._base import ParseFailed

log = logging.getLogger(__name__)

PROGRAM_ENV = "SWFS_SOFFICE"
TIMEOUT_ENV = "SWFS_SOFFICE_TIMEOUT"
DEFAULT_TIMEOUT = 90.0
_DISABLED = frozenset({"", "none", "no", "off", "0", "false"})
_RESTART = 81  # soffice.bin's exit status after it created a fresh profile
_PR_SET_PDEATHSIG = 1
_STDERR_KEEP = 400


class SofficeMissing(Exception):
    """LibreOffice is not installed (or disabled by ``SWFS_SOFFICE=none``)."""


def program() -> str | None:
    """The LibreOffice executable to run, or None when there is none."""
    return _program(os.environ.get(PROGRAM_ENV), os.environ.get("PATH"))


@functools.lru_cache(maxsize=8)
def _program(choice: str | None, path: str | None) -> str | None:
    if choice is not None and choice.strip().lower() in _DISABLED:
        return None
    if choice:
        found = shutil.which(choice, path=path)
    else:
        found = shutil.which("soffice", path=path) or shutil.which("libreoffice", path=path)
    if found is None:
        return None
    # The ``soffice`` launcher is a shell script that starts oosplash, which
    # forks soffice.bin: a parent-death signal would reach only the first of
    # them.  Run soffice.bin directly where it sits next to the launcher.
    real = os.path.realpath(found)
    binary = os.path.join(os.path.dirname(real), "soffice.bin")
    if os.path.basename(real) in ("soffice", "libreoffice") and os.access(binary, os.X_OK):
        return binary
    return found


def timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", TIMEOUT_ENV, raw, DEFAULT_TIMEOUT)
        return DEFAULT_TIMEOUT
    return value if value > 0 else DEFAULT_TIMEOUT


def _base_dir() -> str:
    """``$TMPDIR/swfs-soffice-<uid>``, used only if it is a real folder of
    this uid closed to others (anyone may create that name first in a
    shared /tmp, or swap it for a link); otherwise a fresh private folder."""
    path = os.path.join(tempfile.gettempdir(), f"swfs-soffice-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        st = None
    if (
        st is not None
        and stat.S_ISDIR(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & 0o077
    ):
        return path
    log.warning("%s is not a private folder of uid %d; using a fresh one", path, os.getuid())
    return tempfile.mkdtemp(prefix=f"swfs-soffice-{os.getuid()}-")


@functools.cache
def _process_dir() -> str:
    """This process's directory: its LibreOffice profile and its conversions."""
    sweep_stale()
    path = os.path.join(_base_dir(), str(os.getpid()))
    os.makedirs(path, mode=0o700, exist_ok=True)
    # A worker that ends normally (idle) takes its profile with it; one
    # that is killed leaves it to sweep_stale().
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def sweep_stale() -> None:
    """Remove what workers that are gone left behind (a worker killed on its
    time limit cannot clean up after itself)."""
    base = _base_dir()
    for name in os.listdir(base):
        if name.isdigit() and int(name) != os.getpid() and not _alive(int(name)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def _prctl() -> Callable[..., int] | None:
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):  # not Linux: the killpg on timeout still holds
        return None


def _child_setup(prctl: Callable[..., int] | None, parent: int) -> Callable[[], None]:
    """What the child runs between fork and exec: die with the parse worker.

    Everything is looked up before the fork; the child only calls into libc.
    """

    def setup() -> None:
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the worker died before the call above
                os._exit(1)

    return setup


def _memory_cap() -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return ""
    return f" (memory cap {soft // (1024 * 1024)} MB)"


@contextlib.contextmanager
def converted(src: str, *, extension: str, infilter: str, target: str, kind: str) -> Iterator[str]:
    """Convert ``src`` (read as ``extension`` with LibreOffice's ``infilter``)
    to ``target`` (``docx:MS Word 2007 XML``...) and yield the output's path.

    ``kind`` names the format in error messages ("Word 97 document").  Raises
    SofficeMissing when there is no LibreOffice, ParseFailed when the
    conversion fails, times out or produces nothing.  Everything written is
    removed on exit.
    """
    exe = program()
    if exe is None:
        raise SofficeMissing("LibreOffice (soffice) is not installed")
    with tempfile.TemporaryDirectory(prefix="convert-", dir=_process_dir()) as work:
        source = os.path.join(work, "source" + extension)
        # A copy under a plain name: src may be /proc/self/fd/N, which means
        # nothing in another process, and the name's extension guides soffice.
        shutil.copyfile(src, source)
        outdir = os.path.join(work, "out")
        tmp = os.path.join(work, "tmp")
        os.mkdir(outdir)
        os.mkdir(tmp)
        _run(exe, source, outdir, tmp, infilter=infilter, target=target, kind=kind)
        produced = os.listdir(outdir)
        if len(produced) != 1:
            raise ParseFailed(f"LibreOffice could not read this {kind}")
        yield os.path.join(outdir, produced[0])


def _run(
    exe: str, source: str, outdir: str, tmp: str, *, infilter: str, target: str, kind: str
) -> None:
    profile = os.path.join(_process_dir(), "profile")
    argv = [
        exe,
        f"-env:UserInstallation={pathlib.Path(profile).as_uri()}",  # quoted: TMPDIR may have spaces
        "--headless",
        "--invisible",
        "--nologo",
        "--nodefault",
        "--norestore",
        "--nolockcheck",
        f"--infilter={infilter}",
        "--convert-to",
        target,
        "--outdir",
        outdir,
        source,
    ]
    env = dict(os.environ, TMPDIR=tmp, SAL_USE_VCLPLUGIN="svp")
    limit = timeout()
    deadline = time.monotonic() + limit  # one limit for both runs of a first start
    for attempt in range(2):
        status, stderr = _spawn(argv, env, deadline, limit, profile)
        if status == _RESTART and attempt == 0:
            continue  # the first start in a fresh profile initialises it and asks to be run again
        break
    if os.listdir(outdir):
        return
    if status != 0:
        # Whatever went wrong may have left the profile half-written: the
        # next conversion in this worker starts from a fresh one.
        shutil.rmtree(profile, ignore_errors=True)
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        raise ParseFailed(f"LibreOffice was killed by {name} converting this {kind}{_memory_cap()}")
    detail = " ".join(stderr.split())
    if "could not be loaded" in detail or status == 0:
        raise ParseFailed(
            f"LibreOffice could not read this {kind} (damaged or not really a {kind})"
        )
    raise ParseFailed(
        f"LibreOffice failed on this {kind}: exit status {status}"
        + (f": {detail[:_STDERR_KEEP]}" if detail else "")
        + _memory_cap()
    )


def _spawn(
    argv: list[str], env: dict[str, str], deadline: float, limit: float, profile: str
) -> tuple[int, str]:
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            preexec_fn=_child_setup(_prctl(), os.getpid()),
            close_fds=True,
        )
    except OSError as exc:
        raise ParseFailed(f"cannot start LibreOffice: {exc.strerror or exc}") from exc
    try:
        _, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        # A killed instance leaves its profile locked and half-written.
        shutil.rmtree(profile, ignore_errors=True)
        raise ParseFailed(f"LibreOffice conversion timed out after {limit:g} s") from None
    except BaseException:
        _kill_group(proc)
        raise
    _kill_group(proc)  # helpers it may have left in its session
    return proc.returncode, err.decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=10)
