"""What the installed pyfuse3 can do: the one module that asks.

``make install`` builds our fork of pyfuse3 3.5.0 (vendor/pyfuse3: its
README says what it adds and why).  Stock pyfuse3 stays a supported
fallback, at more round trips: every request then takes the async path
(``adapt`` makes coroutines of the handlers that may answer at once),
the kernel asks again for each listing and each close's FLUSH, and
fallocate(2), SEEK_DATA/SEEK_HOLE and O_TMPFILE are answered "not
supported" by the kernel.  The rest of ``mountd`` reads the names below and
never probes pyfuse3 itself.

What the fork has depends only on the libfuse it was built against for
kernel passthrough and O_TMPFILE (3.17 or newer); everything else comes
with the fork.
"""

from __future__ import annotations

from typing import Any

import pyfuse3

from mountd.reply import as_coroutine

# The fork's additions, looked up at run time: stock pyfuse3 (and its type
# stubs) have none of them.
_fork: Any = pyfuse3

#: Our fork (vendor/pyfuse3), not stock pyfuse3.
FORK: bool = hasattr(pyfuse3, "immediate_available")

#: ``FileInfo.cache_readdir`` and ``opendir`` returning a FileInfo: the
#: kernel keeps a directory's listing until the daemon drops it.
DIR_CACHE: bool = FORK
#: ``FileInfo.noflush``: a close that cannot have written sends no FLUSH.
NOFLUSH: bool = FORK
#: OPENDIR answered ENOSYS: READDIR without a handle (``readdir_inode``).
NO_OPENDIR: bool = FORK
#: The handlers of these requests are called in pyfuse3's callback and may
#: return their reply (answered at once) or an awaitable (mountd.reply).
IMMEDIATE = (
    "lookup",
    "getattr",
    "open",
    "create",
    "getxattr",
    "write",
    "flush",
    "release",
    "lseek",
)
#: FALLOCATE and LSEEK handed to ``Operations.fallocate`` / ``lseek``.
FILE_OPS: bool = FORK
#: TMPFILE handed to ``Operations.tmpfile`` (libfuse 3.17 or newer).
TMPFILE: bool = FORK and bool(_fork.tmpfile_available())
#: Kernel passthrough can be asked for (libfuse 3.17 or newer).
PASSTHROUGH: bool = FORK and bool(_fork.passthrough_available())


def adapt(ops: Any) -> Any:
    """``ops`` as the installed pyfuse3 calls it: the fork calls the
    ``IMMEDIATE`` handlers itself and replies at once to what is not an
    awaitable; stock pyfuse3 awaits every handler, so there each of them is
    wrapped in a coroutine on the instance.  The one place that decides."""
    if not FORK:
        for name in IMMEDIATE:
            setattr(ops, name, as_coroutine(getattr(ops, name)))
    return ops


def passthrough_unavailable_why() -> str | None:
    """Why this pyfuse3 cannot ask for kernel passthrough (None: it can)."""
    if not FORK:
        return "stock pyfuse3 (not vendor/pyfuse3) has no passthrough"
    if not PASSTHROUGH:
        return "pyfuse3 was built against a libfuse without passthrough (3.17 needed)"
    return None


def set_spin_window(seconds: float) -> bool:
    """Let the receive loop read the next request for up to ``seconds``
    before it waits in the event loop; False where pyfuse3 has no such loop."""
    if not FORK:
        return False
    _fork.set_spin_window(seconds)
    return True


def passthrough_active() -> bool:
    """The kernel agreed to passthrough at INIT."""
    return PASSTHROUGH and bool(_fork.passthrough_active())


def backing_open(fd: int) -> int:
    """Register ``fd`` as a passthrough backing file: its id (OSError when
    the kernel refuses)."""
    return int(_fork.backing_open(fd))


def backing_close(backing_id: int) -> None:
    _fork.backing_close(backing_id)


def set_backing(fi: pyfuse3.FileInfo, backing_id: int) -> None:
    """Put a backing file in an open or create reply."""
    fi_: Any = fi
    fi_.backing_id = backing_id


def set_noflush(fi: pyfuse3.FileInfo) -> None:
    """Mark an open that cannot write (no FLUSH at its close), where the
    binding can."""
    if NOFLUSH:
        fi_: Any = fi
        fi_.noflush = True


def dir_info(fh: int, *, keep: bool) -> pyfuse3.FileInfo:
    """An opendir reply for handle ``fh`` that has the kernel cache the
    listing, keeping what it cached before (``keep``) or not (DIR_CACHE)."""
    fi: Any = pyfuse3.FileInfo(fh=fh)
    fi.keep_cache = keep
    fi.cache_readdir = True
    return fi
