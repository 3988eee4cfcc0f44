"""The parse sandbox: parsers and renderers run in a confined child process.

Every file swfs parses or renders may be hostile: a mail attachment, a
download, a file another user dropped into a shared folder.  MuPDF,
LibreOffice, expat, lxml and calamine are native code, so a memory-safety bug
in any of them must not become code running as the daemon's user (root, in
a shared machine's set-up).  So a parse or render worker never runs a parser
itself.  It opens, copies and hashes the file, and hands the copy, as an
open descriptor, to a *confined child* it forked.  Before the child runs
any parser code it:

* leaves the host's mount, network, IPC and UTS namespaces (a new network
  namespace has only a loopback device, which is down: nothing can be
  reached, not even 127.0.0.1);
* pivots into a read-only tmpfs root that holds only what parsers need:
  the system's program and library folders, a few files of ``/etc``,
  Python's install and the folders of the modules it imported, a private
  ``/proc``, five devices and a private writable ``/tmp``.  Nothing of SRC,
  the store, ``/root`` (beyond Python's own folder when it lives there) or
  ``/home`` is in it;
* as root: becomes ``nobody`` (uid and gid 65534, no supplementary groups),
  which leaves it no capabilities; as an ordinary user (a user mount): does
  the above inside a new user namespace and drops every capability;
* sets ``no_new_privs``, a parent-death signal and limits on memory, CPU
  time, file size, open files and processes;
* closes every descriptor it inherited but its socket and stderr, so it
  cannot reach the worker's channel to the daemon.

Where namespaces are refused (a container without them), the child still
closes descriptors and sets ``no_new_privs`` and the limits; ``swfs status``
names the level it got (``level()``).

The child answers over a socket with JSON and byte blobs, checked field by
field by the worker: nothing a child sends is ever unpickled.  The worker
writes every cache file itself.

**One child serves several files.**  A fork per file costs a few ms of CPU
for every small office file (copy-on-write faults of a big CPython
process), which the issue's throughput budget does not allow.  A child is
therefore kept for up to ``MAX_JOBS`` files *of one owner* that only that
owner can write: a parser bug exploited by one file can then at most change
the parsed text of later files of the same owner, who could write those
files anyway.  A file that anyone but its owner may write gets a child of
its own.  A child is replaced after any failure, crash or timeout, and
when its memory has grown.

``SWFS_SANDBOX=off`` runs the child unconfined (for debugging; never in
production).  ``SWFS_SANDBOX_BIND`` adds read-only folders to the view
(colon-separated), for a parser's tool installed somewhere unusual.
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import platform
import resource
import signal
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

ENV = "SWFS_SANDBOX"
BIND_ENV = "SWFS_SANDBOX_BIND"
NOBODY = 65534
MAX_JOBS = 64  # files one child parses before a fresh one takes over
MAX_HEADER = 64 * 1024 * 1024
MAX_BLOBS = 1 << 20
TMP_SIZE = "2g"  # the child's private /tmp (LibreOffice's profile and conversions)
NPROC = 512  # processes of the sandbox's uid at once (soffice starts a few)
NOFILE = 4096
FSIZE = 4 * 1024**3

FULL = "full"  # namespaces, uid nobody
USERNS = "user namespace"  # namespaces inside a user namespace; the daemon's own uid
MINIMAL = "minimal"  # no_new_privs and limits only
OFF = "off"

# Linux constants (stable ABI).
_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(platform.machine())
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91}.get(platform.machine())
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_ST_FLAGS = os.ST_NOSUID | os.ST_NODEV | os.ST_NOEXEC  # kept on a read-only remount

_ETC = (
    "alternatives",
    "fonts",
    "group",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "libreoffice",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "passwd",
    "timezone",
)
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/var/cache/fontconfig")
_DEVICES = ("null", "zero", "full", "random", "urandom")


class SandboxError(Exception):
    """The child could not be started or answered out of protocol."""


def mode() -> str:
    """``off`` when ``SWFS_SANDBOX`` turns the sandbox off, else ``on``."""
    value = os.environ.get(ENV, "").strip().lower()
    return OFF if value in ("off", "0", "no", "false", "none") else "on"


# -- libc


_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc.unshare.argtypes = [ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _c().mount(
            None if src is None else src.encode(),
            dst.encode(),
            None if fstype is None else fstype.encode(),
            flags,
            None if data is None else data.encode(),
        ),
        f"mount {dst}",
    )


def _prctl(option: int, arg: int) -> None:
    _check(_c().prctl(option, arg, 0, 0, 0), f"prctl {option}")


# -- the view


@dataclass(frozen=True)
class _Entry:
    path: str  # absolute, in both the host and the view
    kind: str  # 'dir', 'file' or 'link'
    target: str = ""  # a link's target


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def view_entries() -> list[_Entry]:
    """What the child's root holds, besides /proc, /dev and /tmp: computed in
    the worker (which may see everything) before the child is forked."""
    paths: list[str] = []
    paths += list(_SYSTEM)
    paths += [f"/etc/{name}" for name in _ETC]
    python = {sys.base_prefix, sys.prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths += sorted(python)
    roots = sorted(python) + list(_SYSTEM)
    # Modules imported from elsewhere (an editable install of swfs itself):
    # the folder of each top-level package, at the path Python imports it by.
    for name in list(sys.modules):
        top = sys.modules.get(name.partition(".")[0])
        file = getattr(top, "__file__", None)
        found = (
            [os.path.dirname(file) if os.path.basename(file) == "__init__.py" else file]
            if (file and os.path.isabs(file))
            else [p for p in getattr(top, "__path__", []) if os.path.isabs(p)]
        )
        for path in found:
            if not _under(path, roots) and not _under(os.path.realpath(path), roots):
                paths.append(path)
                roots.append(path)
    # A LibreOffice installed outside /usr (/opt/libreoffice7.x).
    try:
        from parsers import soffice

        exe = soffice.program()
    except ImportError:
        exe = None
    if exe is not None:
        real = os.path.realpath(exe)
        if not _under(real, roots):
            paths.append(os.path.dirname(os.path.dirname(real)))
    paths += [p for p in os.environ.get(BIND_ENV, "").split(":") if os.path.isabs(p)]
    out: list[_Entry] = []
    seen: set[str] = set()
    for path in paths:
        path = os.path.normpath(path)
        if path in seen or path in ("/", "/proc", "/dev", "/tmp"):
            continue
        seen.add(path)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append(_Entry(path, "link", os.readlink(path)))
        elif stat.S_ISDIR(st.st_mode):
            out.append(_Entry(path, "dir"))
        elif stat.S_ISREG(st.st_mode):
            out.append(_Entry(path, "file"))
    # Parents before children, so a bind inside a bind lands on top.
    out.sort(key=lambda e: (e.path.count("/"), e.path))
    return out


def _make_parents(root: str, path: str) -> None:
    parent = os.path.dirname(path)
    if parent and parent != "/":
        os.makedirs(root + parent, mode=0o755, exist_ok=True)


def _bind_ro(src_fd: int, dst: str, flags_from: int) -> None:
    _mount(f"/proc/self/fd/{src_fd}", dst, None, _MS_BIND, None)
    _mount(
        None,
        dst,
        None,
        _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | flags_from,
        None,
    )


def _statvfs_flags(fd: int) -> int:
    try:
        f = os.fstatvfs(fd).f_flag
    except OSError:
        return 0
    return (_MS_NOEXEC if f & os.ST_NOEXEC else 0) | (_MS_RDONLY if f & os.ST_RDONLY else 0)


def _build_root(entries: list[_Entry], user_ns: bool) -> None:
    """In the child's own mount namespace: a read-only root of ``entries``."""
    os.umask(0o022)  # the folders made below must be traversable by nobody
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    # Descriptors of every source first: the tmpfs below covers /tmp, where
    # some of them may live.
    fds: list[tuple[_Entry, int]] = []
    for entry in entries:
        if entry.kind == "link":
            fds.append((entry, -1))
            continue
        try:
            fds.append((entry, os.open(entry.path, os.O_PATH | os.O_CLOEXEC)))
        except OSError:
            continue
    devices: list[tuple[str, int]] = []
    for name in _DEVICES:
        try:
            devices.append((name, os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC)))
        except OSError:
            continue
    root = "/tmp"
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=16m")
    # The private /tmp first: a folder bound from under the host's /tmp
    # (SWFS_SANDBOX_BIND) lands on top of it.
    os.makedirs(root + "/tmp", mode=0o1777, exist_ok=True)
    _mount("tmpfs", root + "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={TMP_SIZE}")
    for entry, fd in fds:
        target = root + entry.path
        _make_parents(root, entry.path)
        try:
            if entry.kind == "link":
                os.symlink(entry.target, target)
                continue
            if entry.kind == "dir":
                os.makedirs(target, mode=0o755, exist_ok=True)
            else:
                with open(target, "ab"):
                    pass
            _bind_ro(fd, target, _statvfs_flags(fd))
        except OSError as exc:
            log.debug("sandbox view: %s left out: %s", entry.path, exc)
        finally:
            if fd >= 0:
                os.close(fd)
    os.makedirs(root + "/dev", mode=0o755, exist_ok=True)
    for name, fd in devices:
        target = f"{root}/dev/{name}"
        with open(target, "ab"):
            pass
        try:
            _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND, None)
        finally:
            os.close(fd)
    for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0")):
        os.symlink(to, f"{root}/dev/{link}")
    os.symlink("/proc/self/fd/1", f"{root}/dev/stdout")
    os.symlink("/proc/self/fd/2", f"{root}/dev/stderr")
    os.makedirs(root + "/proc", mode=0o555, exist_ok=True)
    try:
        # A private procfs that shows the child only its own processes.
        _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "hidepid=2")
    except OSError:
        # In a user namespace without a pid namespace of its own, procfs
        # cannot be mounted anew: the host's, recursively (its locked
        # submounts come along).
        _mount("/proc", root + "/proc", None, _MS_BIND | _MS_REC, None)
    os.chdir(root)
    if _SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown machine {platform.machine()}")
    _check(_c().syscall(_SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_c().umount2(b".", _MNT_DETACH), "umount old root")
    os.chdir("/")
    _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)
    os.umask(0o077)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _drop_bounding_set() -> None:
    """No capability can ever come back (not even through a file's)."""
    for cap in range(64):
        if _c().prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows


def _drop_capabilities() -> None:
    """capset(2) with empty sets, and the bounding set emptied."""
    _drop_bounding_set()
    if _SYS_CAPSET is None:
        raise OSError(errno.ENOSYS, f"capset: unknown machine {platform.machine()}")
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_c().syscall(_SYS_CAPSET, header, data), "capset")


def _limits(memory_bytes: int) -> None:
    wanted = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, NOFILE),
        (resource.RLIMIT_FSIZE, FSIZE),
        (resource.RLIMIT_NPROC, NPROC),
    ]
    if memory_bytes:
        wanted.append((resource.RLIMIT_AS, memory_bytes))
    for which, value in wanted:
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
        except (OSError, ValueError) as exc:
            log.debug("sandbox limit %s: %s", which, exc)


def confine(entries: list[_Entry], memory_bytes: int) -> str:
    """Runs in the freshly forked child, before any parser code: confine this
    process as far as the system allows and return the level reached."""
    if mode() == OFF:
        _limits(memory_bytes)
        return OFF
    uid, gid = os.getuid(), os.getgid()
    level = MINIMAL
    try:
        if os.geteuid() == 0:
            _check(
                _c().unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS),
                "unshare",
            )
            _build_root(entries, user_ns=False)
            _drop_bounding_set()
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            level = FULL
        else:
            _check(
                _c().unshare(
                    _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS
                ),
                "unshare",
            )
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
            _build_root(entries, user_ns=True)
            _drop_capabilities()
            level = USERNS
    except OSError as exc:
        if os.geteuid() == 0 and level == MINIMAL:
            # Root that cannot make namespaces (a restricted container):
            # at least not root.
            log.warning("parse sandbox: %s; running parsers as nobody without namespaces", exc)
            try:
                os.setgroups([])
                os.setresgid(NOBODY, NOBODY, NOBODY)
                os.setresuid(NOBODY, NOBODY, NOBODY)
            except OSError:
                os._exit(70)
        else:
            log.warning("parse sandbox: %s; parsers run with no_new_privs and limits only", exc)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    _limits(memory_bytes)
    os.environ["TMPDIR"] = "/tmp"
    os.environ["HOME"] = "/tmp"
    import tempfile

    tempfile.tempdir = None
    return level


# -- framing: a JSON header and byte blobs


_LEN = struct.Struct(">I")


def send(
    sock: socket.socket,
    header: dict[str, Any],
    blobs: Sequence[bytes] = (),
    fds: Sequence[int] = (),
) -> None:
    header = dict(header, blobs=[len(b) for b in blobs])
    raw = json.dumps(header, ensure_ascii=True).encode("ascii")
    first = _LEN.pack(len(raw)) + raw
    if fds:
        socket.send_fds(sock, [first], list(fds))
    else:
        sock.sendall(first)
    for blob in blobs:
        sock.sendall(blob)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError
        got += k
    return bytes(buf)


def recv(
    sock: socket.socket, deadline: float | None = None, max_blob_bytes: int = 1 << 40
) -> tuple[dict[str, Any], list[bytes], list[int]]:
    """One message: (header, blobs, received descriptors).  Raises EOFError
    when the peer closed, TimeoutError past ``deadline``, SandboxError on
    anything out of protocol."""
    if deadline is not None:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
    else:
        sock.settimeout(None)
    try:
        data, fds, _, _ = socket.recv_fds(sock, _LEN.size, 4)
    except TimeoutError:
        raise TimeoutError from None
    if not data:
        raise EOFError
    if len(data) < _LEN.size:
        data += _recv_exact(sock, _LEN.size - len(data), deadline)
    (size,) = _LEN.unpack(data)
    if size > MAX_HEADER:
        raise SandboxError(f"a reply header of {size} bytes")
    try:
        raw = _recv_exact(sock, size, deadline)
        header = json.loads(raw.decode("ascii"))
    except TimeoutError:
        raise TimeoutError from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SandboxError("a reply that is not JSON") from exc
    if not isinstance(header, dict):
        raise SandboxError("a reply that is not a JSON object")
    lengths = header.pop("blobs", [])
    if (
        not isinstance(lengths, list)
        or len(lengths) > MAX_BLOBS
        or not all(isinstance(n, int) and n >= 0 for n in lengths)
        or sum(lengths) > max_blob_bytes
    ):
        raise SandboxError("a reply with malformed blobs")
    try:
        blobs = [_recv_exact(sock, n, deadline) for n in lengths]
    except TimeoutError:
        raise TimeoutError from None
    return header, blobs, fds


# -- the child


Handler = Callable[[dict[str, Any], list[int]], tuple[dict[str, Any], list[bytes]]]


def _serve(sock: socket.socket, handlers: dict[str, Handler]) -> None:
    while True:
        try:
            header, _, fds = recv(sock)
        except (EOFError, OSError, SandboxError):
            return
        try:
            handler = handlers.get(str(header.get("op")))
            reply: dict[str, Any]
            blobs: list[bytes]
            if handler is None:
                reply, blobs = {"error": "unknown operation"}, []
            else:
                given = fds
                fds = [_reopenable(fd) for fd in given]
                fds += [fd for fd in given if fd not in fds]  # closed below all the same
                reply, blobs = handler(header, fds[: len(given)])
        finally:
            for fd in fds:
                with suppress(OSError):
                    os.close(fd)
        try:
            send(sock, reply, blobs)
        except OSError:
            return
        if reply.get("retire"):
            return


def _reopenable(fd: int) -> int:
    """A descriptor of the same bytes that parsers may open by its
    ``/proc/self/fd/N`` path: ``fd`` itself when this (unprivileged)
    process may open that file, else a memory copy of it.  Reopening a
    descriptor by that path checks the file's mode, so a private file the
    worker opened for it (a large file parsed in place, a cached PDF) would
    otherwise be refused."""
    try:
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC))
        return fd
    except PermissionError:
        pass
    copy = os.memfd_create("swfs-input", os.MFD_CLOEXEC)
    offset = 0
    while True:
        block = os.pread(fd, 1 << 20, offset)
        if not block:
            break
        os.pwrite(copy, block, offset)
        offset += len(block)
    return copy


def _close_inherited(keep: set[int]) -> None:
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = [str(n) for n in range(3, 4096)]
    for name in names:
        fd = int(name)
        if fd > 2 and fd not in keep:
            with suppress(OSError):
                os.close(fd)


class Child:
    """A confined child process of this (worker) process, and its socket."""

    def __init__(
        self,
        handlers: dict[str, Handler],
        memory_bytes: int,
        domain: object = None,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        self.domain = domain
        self.config = _config()
        self.jobs = 0
        self.level = ""
        self._status: int | None = None
        entries = view_entries() if mode() != OFF else []
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        _become_subreaper()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                parent_sock.close()
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent:
                    os._exit(1)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                null = os.open("/dev/null", os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.close(null)
                _close_inherited({child_sock.fileno()})
                level = confine(entries, memory_bytes)
                if prepare is not None:
                    prepare()
                send(child_sock, {"level": level, "uid": os.getuid()})
                _serve(child_sock, handlers)
            except BaseException:  # the child never returns into the worker's code
                code = 1
                try:
                    import traceback

                    traceback.print_exc()
                except BaseException:
                    pass
            finally:
                os._exit(code)
        child_sock.close()
        self.pid = pid
        self.sock = parent_sock
        try:
            hello, _, _ = recv(self.sock, time.monotonic() + 60)
        except (EOFError, TimeoutError, OSError, SandboxError) as exc:
            self.kill()
            raise SandboxError(
                f"the parse sandbox did not start ({self.exit_reason() or exc})"
            ) from exc
        self.level = str(hello.get("level", ""))

    def call(
        self,
        header: dict[str, Any],
        fds: list[int],
        deadline: float | None,
        max_blob_bytes: int = 1 << 40,
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Send one job, return the reply.  Raises TimeoutError, EOFError (the
        child died: see ``exit_reason``) or SandboxError (out of protocol);
        the child is dead after any of them."""
        self.jobs += 1
        try:
            send(self.sock, header, [], fds)
            reply, blobs, extra = recv(self.sock, deadline, max_blob_bytes)
        except BaseException:
            self.kill()
            raise
        for fd in extra:  # a child has no business sending descriptors
            os.close(fd)
        return reply, blobs

    def kill(self) -> None:
        """End the child and everything it started."""
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.sock.close()
        self._reap()
        kill_orphans()

    def _reap(self) -> None:
        if self._status is not None:
            return
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = 0
        self._status = status

    def exit_reason(self) -> str:
        status = self._status
        if status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return ""
            if pid == 0:
                return ""
            self._status = status
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                return f"killed by {signal.Signals(sig).name}"
            except ValueError:
                return f"killed by signal {sig}"
        if os.WIFEXITED(status):
            return f"exit status {os.WEXITSTATUS(status)}"
        return ""

    def close(self) -> None:
        """Ask the child to end; kill it if it does not."""
        self.kill()


def _become_subreaper() -> None:
    """What a confined child starts and leaves behind (soffice's helpers)
    comes back to this worker, which kills it (``kill_orphans``)."""
    with suppress(OSError):
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def kill_orphans(spare: set[int] | None = None) -> None:
    """Kill and reap this process's children that are not ``spare``: what a
    dead child left (adopted here as the subreaper).  Only processes that
    are in another mount namespace, or whose parent is this process and
    which are not ``spare``, are touched."""
    me = os.getpid()
    spare = spare or set()
    for pid in _children_of(me):
        if pid in spare or pid in _live_children:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)


_live_children: set[int] = set()


def _children_of(ppid: int) -> list[int]:
    out: list[int] = []
    try:
        with open(f"/proc/{ppid}/task/{ppid}/children") as f:
            out = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        pass
    return out


def _config() -> tuple[str | None, ...]:
    """What a child was made with that the environment may change (in tests,
    and through a worker's life never): a child made otherwise is replaced."""
    return (
        mode(),
        os.environ.get(BIND_ENV),
        os.environ.get("SWFS_EXTRA_PARSERS"),
        os.environ.get("SWFS_SOFFICE"),
    )


def file_domain(st: os.stat_result) -> object:
    """Which files may share a child: those of one owner that only the owner
    may write.  None: a child of its own."""
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return ("uid", st.st_uid)


class Children:
    """One worker's confined children: the current one, reused for files of
    its domain, replaced as the module docstring says."""

    def __init__(
        self, handlers: dict[str, Handler], prepare: Callable[[], None] | None = None
    ) -> None:
        self.handlers = handlers
        self.prepare = prepare
        self.child: Child | None = None

    def get(self, domain: object, memory_bytes: int) -> Child:
        child = self.child
        if child is not None and (
            domain is None
            or child.domain != domain
            or child.jobs >= MAX_JOBS
            or child.config != _config()
        ):
            self.drop()
            child = None
        if child is None:
            child = Child(self.handlers, memory_bytes, domain, self.prepare)
            _live_children.add(child.pid)
            self.child = child
        return child

    def drop(self) -> None:
        if self.child is not None:
            _live_children.discard(self.child.pid)
            self.child.kill()
            self.child = None

    def after(self, child: Child, reply: dict[str, Any] | None) -> None:
        """After a job: a child that failed, asked to retire or serves one
        file only is ended."""
        if reply is None or reply.get("retire") or child.domain is None:
            if self.child is child:
                self.drop()
            else:
                child.kill()


_level: str | None = None


def level() -> str:
    """The confinement a child of this process gets here (probed once)."""
    global _level
    if _level is None:
        try:
            child = Child({}, 0)
        except SandboxError as exc:
            _level = f"none ({exc})"
        else:
            _level = child.level
            child.kill()
    return _level


def describe() -> str:
    """One line for ``swfs status``."""
    lvl = level()
    if lvl == FULL:
        return f"full: uid {NOBODY}, no capabilities, no network, read-only view, no_new_privs"
    if lvl == USERNS:
        return (
            f"user namespace: uid {os.getuid()} (no uid change as an ordinary user), "
            "no capabilities, no network, read-only view, no_new_privs"
        )
    if lvl == MINIMAL:
        return "minimal: namespaces refused here; no_new_privs and limits only"
    if lvl == OFF:
        return f"off ({ENV}=off): parsers run unconfined"
    return lvl


_described: str | None = None


def describe_in_subprocess() -> str:
    """``describe()`` as a fresh process of this one's uid and environment
    finds it: what the daemon asks, so that it never forks itself."""
    global _described
    if _described is None:
        import subprocess

        try:
            proc = subprocess.run(
                [sys.executable, "-c", "from swfs.views import sandbox; print(sandbox.describe())"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            line = proc.stdout.strip() or f"unknown (probe exit status {proc.returncode})"
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unknown ({exc})"
        _described = line
    return _described
