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

**Kept warm.**  Starting LibreOffice costs seconds, converting a small file
a few hundredths of one.  So a process that converts keeps one LibreOffice
running (``_Warm``), started on its first conversion and reused over UNO:
``soffice.bin --accept=pipe,name=...;urp;`` with the same options, profile
rules, parent-death signal and memory cap as a one-shot run, and a small
client (``parsers._unoclient``) run by the Python that has LibreOffice's
``uno`` module (Debian's ``python3-uno``; ``SWFS_UNO_PYTHON`` names
another), which loads each document hidden and read-only, with macros never
run and links never updated, and stores the conversion.  In the parse
sandbox (``swfs.views.sandbox``) both run inside the confined child, as it does,
and the pipe lives in its private ``/tmp``.  The instance is ended and a
fresh one started on the next conversion after a crash, a timeout (which
fails that file), ``SWFS_SOFFICE_MAX_DOCS`` documents (default 200) or when
it holds more than ``MAX_RSS`` of memory.  A crash during a conversion
gives that file one one-shot conversion, whose verdict stands.  When the
warm instance cannot start (no ``uno`` module, a stand-in program), that
process converts one-shot, as before; ``SWFS_SOFFICE_WARM=off`` forces that.

``SWFS_SOFFICE`` chooses the program: a path, or ``none`` to act as if
LibreOffice were not installed.  ``SWFS_SOFFICE_TIMEOUT`` is the time limit in
seconds (default 90, below the parse worker's 120).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import json
import logging
import os
import pathlib
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Collection, Iterator

from parsers._base import ParseFailed

log = logging.getLogger(__name__)

PROGRAM_ENV = "SWFS_SOFFICE"
TIMEOUT_ENV = "SWFS_SOFFICE_TIMEOUT"
DEFAULT_TIMEOUT = 90.0
_DISABLED = frozenset({"", "none", "no", "off", "0", "false"})
_RESTART = 81  # soffice.bin's exit status after it created a fresh profile
_PR_SET_PDEATHSIG = 1
_STDERR_KEEP = 400
WARM_ENV = "SWFS_SOFFICE_WARM"
UNO_PYTHON_ENV = "SWFS_UNO_PYTHON"
MAX_DOCS_ENV = "SWFS_SOFFICE_MAX_DOCS"
DEFAULT_MAX_DOCS = 200
MAX_RSS = 768 * 1024 * 1024  # a warm instance holding more is replaced between documents
START_LIMIT = 60.0  # seconds a warm instance may take to start
_UNO_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


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
def converted(
    src: str,
    *,
    extension: str,
    infilter: str,
    target: str,
    kind: str,
    detect: Collection[str] = (),
) -> Iterator[str]:
    """Convert ``src`` (read as ``extension`` with LibreOffice's ``infilter``)
    to ``target`` (``docx:MS Word 2007 XML``...) and yield the output's path.

    ``detect``: import filters LibreOffice may pick itself when ``infilter``
    cannot read the file (an older format version the forced filter refuses);
    a file it would read with any other filter (``Text``: a damaged binary
    shown as characters) fails all the same.  Only a warm instance can tell
    which filter it picked, so the one-shot path never retries.

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
        if not _convert_warm(exe, source, outdir, infilter, target, kind, detect):
            _run(exe, source, outdir, tmp, infilter=infilter, target=target, kind=kind)
        produced = os.listdir(outdir)
        if len(produced) != 1:
            raise ParseFailed(f"LibreOffice could not read this {kind}")
        yield os.path.join(outdir, produced[0])


# -- kept warm


class _Unavailable(Exception):
    """The warm instance cannot start, or died: convert one-shot."""


def warm_enabled() -> bool:
    return os.environ.get(WARM_ENV, "").strip().lower() not in _DISABLED - {""}


def _max_docs() -> int:
    raw = os.environ.get(MAX_DOCS_ENV, "")
    try:
        value = int(raw) if raw else DEFAULT_MAX_DOCS
    except ValueError:
        return DEFAULT_MAX_DOCS
    return value if value > 0 else DEFAULT_MAX_DOCS


def _uno_python() -> str | None:
    chosen = os.environ.get(UNO_PYTHON_ENV)
    if chosen:
        return shutil.which(chosen)
    for candidate in _UNO_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@functools.cache
def _client_source() -> str:
    return pathlib.Path(__file__).with_name("_unoclient.py").read_text(encoding="utf-8")


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return 0


class _Warm:
    """One LibreOffice of this process and its UNO client."""

    def __init__(self, exe: str, python: str) -> None:
        self.exe = exe
        self.python = python
        self.owner = os.getpid()
        self.office: subprocess.Popen[bytes] | None = None
        self.client: subprocess.Popen[bytes] | None = None
        self.docs = 0
        self.pipe = ""
        self._buf = b""
        self.dir = os.path.join(_process_dir(), "warm")

    @property
    def profile(self) -> str:
        return os.path.join(self.dir, "profile")

    def running(self) -> bool:
        return (
            self.office is not None
            and self.client is not None
            and self.office.poll() is None
            and self.client.poll() is None
        )

    def _spawn(self, argv: list[str], env: dict[str, str], **kw: object) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(  # type: ignore[call-overload]
                argv,
                env=env,
                start_new_session=True,
                preexec_fn=_child_setup(_prctl(), os.getpid()),
                close_fds=True,
                **kw,
            )
        except OSError as exc:
            raise _Unavailable(f"cannot start: {exc.strerror or exc}") from exc

    def _start_office(self, env: dict[str, str]) -> None:
        global starts
        argv = [
            self.exe,
            f"-env:UserInstallation={pathlib.Path(self.profile).as_uri()}",
            "--headless",
            "--invisible",
            "--nologo",
            "--nodefault",
            "--norestore",
            "--nolockcheck",
            f"--accept=pipe,name={self.pipe};urp;",
        ]
        self.office = self._spawn(
            argv,
            env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        starts += 1

    def start(self) -> None:
        """Start LibreOffice and connect the client (both in sessions of
        their own, dying with this process).  Raises _Unavailable."""
        deadline = time.monotonic() + START_LIMIT
        tmp = os.path.join(self.dir, "tmp")
        os.makedirs(tmp, mode=0o700, exist_ok=True)
        self.pipe = f"swfs-{os.getpid()}-{secrets.token_hex(8)}"
        self._buf = b""
        self.docs = 0
        env = dict(os.environ, TMPDIR=tmp, SAL_USE_VCLPLUGIN="svp")
        self.client = self._spawn(
            [self.python, "-I", "-c", _client_source(), self.pipe, str(START_LIMIT)],
            env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            hello = self._answer(deadline)
            if hello is None or not hello.get("hello"):
                raise _Unavailable("no uno module")
            self._start_office(env)
            restarted = False
            while True:
                assert self.office is not None
                status = self.office.poll()
                if status == _RESTART and not restarted:
                    # The first start in a fresh profile initialises it and
                    # asks to be run again, as in a one-shot conversion.
                    restarted = True
                    self._start_office(env)
                    continue
                if status is not None:
                    raise _Unavailable(f"LibreOffice exited with status {status} on start")
                ready = self._answer(min(deadline, time.monotonic() + 0.2), partial=True)
                if ready is None:
                    if time.monotonic() >= deadline:
                        raise _Unavailable("LibreOffice did not answer in time")
                    continue
                if not ready.get("ready"):
                    raise _Unavailable("the UNO client could not connect")
                global instances
                instances += 1
                return
        except (_Unavailable, EOFError, TimeoutError, ValueError) as exc:
            self.stop(clean=False)
            if isinstance(exc, _Unavailable):
                raise
            raise _Unavailable(f"no UNO client ({type(exc).__name__})") from exc

    def _answer(self, deadline: float, partial: bool = False) -> dict[str, object] | None:
        """The client's next line as JSON.  EOFError when it ended,
        TimeoutError past ``deadline`` (None then, if ``partial``)."""
        assert self.client is not None
        assert self.client.stdout is not None
        fd = self.client.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                if partial:
                    return None
                raise TimeoutError
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError("not an object")
        return value

    def convert(
        self, source: str, dest: str, infilter: str, target: str, deadline: float
    ) -> dict[str, object]:
        """One conversion: the client's answer.  TimeoutError (the instance
        is ended) past ``deadline``; _Unavailable when it died."""
        _, _, rest = target.partition(":")
        name, _, options = rest.partition(":")
        request = {
            "src": source,
            "dst": dest,
            "infilter": infilter,
            "filter": name,
            "options": options,
        }
        assert self.client is not None
        assert self.client.stdin is not None
        try:
            self.client.stdin.write(json.dumps(request).encode() + b"\n")
            self.client.stdin.flush()
            answer = self._answer(deadline)
        except TimeoutError:
            self.stop(clean=False)
            raise
        except (OSError, EOFError, ValueError) as exc:
            self.stop(clean=False)
            raise _Unavailable(f"LibreOffice died ({type(exc).__name__})") from exc
        assert answer is not None
        self.docs += 1
        if not answer.get("ok") and self._died():
            # The client's verdict was the office going away under it.
            self.stop(clean=False)
            raise _Unavailable("LibreOffice died")
        return answer

    def _died(self) -> bool:
        if self.office is None:
            return True
        try:
            self.office.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return False
        return True

    def worn(self) -> bool:
        """Past its number of documents or its memory: to be replaced."""
        if self.docs >= _max_docs():
            return True
        return self.office is not None and _rss(self.office.pid) > MAX_RSS

    def stop(self, clean: bool = True) -> None:
        """End both processes.  ``clean``: ask LibreOffice to quit first (its
        profile stays usable); otherwise, or if it does not quit, kill it
        and drop its profile, which a killed instance may leave half-written."""
        office, client = self.office, self.client
        self.office = self.client = None
        if office is not None and clean and client is not None and client.stdin is not None:
            try:
                client.stdin.write(b'{"quit": true}\n')
                client.stdin.flush()
                office.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                clean = False
        for proc in (client, office):
            if proc is not None:
                _kill_group(proc)
        if self.pipe:
            # A killed instance leaves its socket behind (outside the
            # sandbox, in the host's /tmp; mode 0755: only this uid connects).
            with contextlib.suppress(OSError):
                os.unlink(f"/tmp/OSL_PIPE_{os.getuid()}_{self.pipe}")
        if not clean:
            shutil.rmtree(self.profile, ignore_errors=True)


starts = 0  # LibreOffice processes this process started for warm instances
instances = 0  # warm instances this process started and connected to
_warm: _Warm | None = None
# (pid, program) where the warm instance could not start: that process
# converts one-shot with that program.
_warm_broken: tuple[int, str] | None = None


def _warm_office(exe: str) -> _Warm | None:
    """This process's warm instance (started if need be), or None: convert one-shot."""
    global _warm, _warm_broken
    if not warm_enabled() or _warm_broken == (os.getpid(), exe):
        return None
    warm = _warm
    if warm is not None and (warm.owner != os.getpid() or warm.exe != exe):
        if warm.owner == os.getpid():
            warm.stop()
        warm = None  # a forked copy of the parent's: never touched
    if warm is None:
        python = _uno_python()
        if python is None:
            _warm_broken = (os.getpid(), exe)
            return None
        warm = _Warm(exe, python)
        if _warm is None:
            atexit.register(stop_warm)  # a process that ends normally ends it too
        _warm = warm
    if not warm.running():
        if warm.office is not None or warm.client is not None:
            warm.stop(clean=False)  # died between documents
        try:
            warm.start()
        except _Unavailable as exc:
            log.info("LibreOffice kept warm is unavailable here (%s); converting one-shot", exc)
            _warm_broken = (os.getpid(), exe)
            _warm = None
            return None
    return warm


def stop_warm() -> None:
    """End this process's warm instance, if any."""
    global _warm
    warm = _warm
    _warm = None
    if warm is not None and warm.owner == os.getpid():
        warm.stop()


def _convert_warm(
    exe: str,
    source: str,
    outdir: str,
    infilter: str,
    target: str,
    kind: str,
    detect: Collection[str],
) -> bool:
    """Convert with this process's warm instance: True when the output is
    in ``outdir``, False to convert one-shot.  Raises ParseFailed."""
    warm = _warm_office(exe)
    if warm is None:
        return False
    limit = timeout()
    deadline = time.monotonic() + limit
    dest = os.path.join(outdir, "source." + target.partition(":")[0])
    try:
        answer = warm.convert(source, dest, infilter, target, deadline)
        if answer.get("error") == "load" and detect:
            answer = warm.convert(source, dest, "", target, deadline)
            if answer.get("ok") and answer.get("detected") not in detect:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(dest)
                answer = {"error": "load", "detail": f"read as {answer.get('detected')}"}
    except TimeoutError:
        raise ParseFailed(f"LibreOffice conversion timed out after {limit:g} s") from None
    except _Unavailable as exc:
        # Perhaps this file, perhaps not: it gets a one-shot conversion,
        # whose verdict stands; the next file a fresh instance.
        log.info("warm LibreOffice died converting a %s (%s); converting one-shot", kind, exc)
        return False
    finally:
        if warm.running() and warm.worn():
            warm.stop()
    if answer.get("ok"):
        return True
    if answer.get("error") == "load":
        raise ParseFailed(
            f"LibreOffice could not read this {kind} (damaged or not really a {kind})"
        )
    detail = " ".join(str(answer.get("detail", "")).split())
    raise ParseFailed(
        f"LibreOffice failed on this {kind}"
        + (f": {detail[:_STDERR_KEEP]}" if detail else "")
        + _memory_cap()
    )


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
