"""Requests answered in pyfuse3's own callback, without a coroutine.

A warm ``grep -r`` of native files sends the daemon one OPEN and one RELEASE
per file and nothing else; a cold walk adds a LOOKUP per name, and a stat
after a read through the daemon a GETATTR.  For a native file none of them
needs to wait: a system call or two, an LMDB read, memory.  Our patched
pyfuse3 (vendor/pyfuse3, ``nowait_available``) calls the
adapter's ``lookup_nowait``, ``getattr_nowait``, ``open_nowait``,
``release_nowait``, ``getxattr_nowait``, ``write_nowait``,
``create_nowait``, ``flush_nowait`` and ``lseek_nowait`` before it makes
a coroutine of such a request; each answers what it can at once and
returns None (False for a release) for anything else, which pyfuse3 then
hands to the async handler as before.
That skips, per request, the coroutine and its container, the handler's
wrapper and the three async layers below it (adapter, provider, source).

What they answer is what the async handlers would: the same provider code
runs (``NativeProvider.open_nowait`` shares its reply with ``open``, and
its lookup and attributes are the async ones' bodies), the access journal
records the same events, the request is counted as one of its kind
(``mountd.reqcount``), and an error is answered as ``handler`` answers it.
Only these answer here (the native tree, and units of ``.parsed``):

* a LOOKUP of a name in a native directory (not a generated tree's name at
  the root) and a GETATTR of a native node;
* an OPEN of a native file read-only (no ``O_TRUNC``) whose stat matches
  its record (else the engine must look at it first: a worker thread), with
  kernel passthrough where it applies (``mountd.fastpath``: a reader has no
  bytes to keep first);
* an OPEN of a ``.parsed`` unit read-only, when its bytes are at hand (a
  current view, a unit short enough to read on the loop: mountd.synthetic's
  ``open_entry_nowait``), and its RELEASE;
* a RELEASE of a native handle with nothing left to record (a reader, or
  a writer whose close recorded its writes: most creates end so): its
  descriptor is closed, the write session ended, the journal's event of it
  closed, the node's open count dropped;
* a WRITE to a native file whose recorded bytes need no keeping first (a
  new file, or one whose bytes were kept since its last record): the same
  write through the leaf cache the async handler makes;
* a GETXATTR of a native node's own attribute (not ``user.sw.*``): the
  kernel asks ``security.capability`` before each write, and a tool that
  probes an absent name asks it of every file;
* a CREATE of a new file in a native folder (not of a name that exists,
  which opens it: the open may wait; not in a staged mount, whose layer
  may be copied up first);
* an LSEEK (SEEK_DATA or SEEK_HOLE) of a native file: the backing file's
  own answer (GNU grep asks SEEK_HOLE of every file larger than its first
  read);
* a FLUSH of a native handle with nothing to record, or with a small
  file's record where no other thread holds the store's writer lock
  (``InPlaceSession.flush_now``): a create's close records its version
  here.  A larger record, or one that would wait for the lock, is the
  async handler's (a worker thread).

A create and its write and close thus reach no coroutine: of the eight
requests a shell's ``echo x > f`` sends (LOOKUP, CREATE, GETXATTR, WRITE,
two FLUSHes, RELEASE, and the GETATTR of the folder the kernel asks after
each entry it adds), none.

Stock pyfuse3 never calls them: every request takes the async path.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pyfuse3

from mountd import reqcount
from mountd.generated import GeneratedProvider
from mountd.nodes import Tree
from mountd.provider import DataHandle, NativeOpen
from swfs.api import XATTR_PREFIX

if TYPE_CHECKING:
    from mountd.native import NativeProvider
    from mountd.nodes import InodeTable, Node
    from mountd.provider import Handle
    from mountd.router import Router

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def fuse_error(name: str, args: tuple[Any, ...], exc: Exception) -> pyfuse3.FUSEError:
    """The errno a handler's exception becomes, logged as it deserves: an
    OSError keeps its own (ENOSYS, which would make the kernel stop asking
    for good, becomes EOPNOTSUPP; EIO is logged), anything else is logged
    with its traceback and becomes EIO.  Shared with
    ``mountd.operations.handler``."""
    if isinstance(exc, OSError):
        code = exc.errno or errno.EIO
        if code == errno.ENOSYS:
            code = errno.EOPNOTSUPP
        if code == errno.EIO:
            log.warning("%s: %s", name, exc)
        return pyfuse3.FUSEError(code)
    log.error("%s%r failed", name, args[1:], exc_info=exc)
    return pyfuse3.FUSEError(errno.EIO)


def nowait(fn: F) -> F:
    """Count an answered request as one of its kind (and as one answered
    here: ``nowait_open``), and turn anything but FUSEError into an errno,
    as ``mountd.operations.handler`` does."""

    request = fn.__name__.removesuffix("_nowait")
    answered = "nowait_" + request
    counts = reqcount.COUNTS

    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        out = None
        try:
            out = fn(*args)
        except pyfuse3.FUSEError:
            out = True
            raise
        except Exception as exc:
            out = True
            raise fuse_error(fn.__name__, args, exc) from None
        finally:
            if out is not None and out is not False:  # answered here
                counts[request] += 1
                counts[answered] += 1
        return out

    return cast(F, wrapper)


class NowaitOps:
    """The ``*_nowait`` entry points of ``mountd.operations.Operations``."""

    table: InodeTable
    handles: dict[int, Handle]
    router: Router
    journal: Any
    native_provider: NativeProvider

    def _native_child(self, parent_inode: int, name: bytes) -> tuple[Node, str] | None:
        """The native folder and the name of a request about ``name`` in it;
        None for any other tree, or a generated tree's name at the root."""
        parent = self.table.get(parent_inode)
        if parent is None or parent.tree is not Tree.NATIVE:
            return None
        n = os.fsdecode(name)
        if self.router.route_child(parent, n) is not self.native_provider:
            return None
        return parent, n

    def _native_open(self, fh: int) -> NativeOpen | None:
        """The handle ``fh`` if it is a native file's."""
        h = self.handles.get(fh)
        if type(h) is not NativeOpen:
            return None
        n = cast(NativeOpen, h)
        return n if n.node.tree is Tree.NATIVE else None

    @nowait
    def lookup_nowait(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes | None:
        child = self._native_child(parent_inode, name)
        if child is None:
            return None
        node, attr = self.native_provider.lookup_nowait(*child)
        self.table.remember(node)
        return attr

    @nowait
    def getxattr_nowait(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes | None:
        node = self.table.get(inode)
        if node is None or node.tree is not Tree.NATIVE:
            return None
        n = os.fsdecode(name)
        if n.startswith(XATTR_PREFIX):
            return None  # the engine's names (a hash may need a worker thread)
        return self.native_provider.own_xattr(node, n)

    @nowait
    def getattr_nowait(
        self, inode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes | None:
        node = self.table.get(inode)
        if node is None or node.tree is not Tree.NATIVE:
            return None
        return self.native_provider.attr_nowait(node)

    @nowait
    def open_nowait(
        self, inode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileInfo | None:
        node = self.table.get(inode)
        if node is None:
            return None
        if node.tree is Tree.NATIVE:
            return self.native_provider.open_nowait(node, flags, ctx)
        provider = self.router.route(node)
        if isinstance(provider, GeneratedProvider):
            return provider.open_nowait(node, flags, ctx)
        return None

    @nowait
    def create_nowait(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes] | None:
        child = self._native_child(parent_inode, name)
        if child is None:
            return None
        return self.native_provider.create_nowait(*child, mode, flags, ctx)

    @nowait
    def flush_nowait(self, fh: int) -> bool:
        h = self._native_open(fh)
        return h is not None and self.native_provider.flush_nowait(h, fh)

    @nowait
    def write_nowait(self, fh: int, off: int, buf: bytes) -> int | None:
        h = self._native_open(fh)
        return None if h is None else self.native_provider.write_nowait(h, off, buf)

    @nowait
    def lseek_nowait(self, fh: int, offset: int, whence: int) -> int | None:
        """SEEK_DATA / SEEK_HOLE of a native file: one system call.  GNU grep
        asks SEEK_HOLE of every file larger than its first read."""
        h = self._native_open(fh)
        return None if h is None else self.native_provider.source.lseek(h.fh, offset, whence)

    @nowait
    def release_nowait(self, fh: int) -> bool:
        h = self.handles.get(fh)
        kind = type(h)
        if kind is DataHandle:
            pass  # bytes in memory: nothing to close
        elif kind is not NativeOpen:
            return False
        elif (n := cast(NativeOpen, h)).fh.session is not None and n.node.tree is not Tree.NATIVE:
            return False  # a writer of another tree: its provider's release
        assert h is not None
        if kind is NativeOpen:
            try:
                if not self.native_provider.release_nowait(cast(NativeOpen, h), fh):
                    return False  # a write to record: the async release
            except BaseException:
                self._closed(fh, h)
                raise
        self._closed(fh, h)
        return True

    def _closed(self, fh: int, h: Handle) -> None:
        """What every release ends with, as ``Operations.release`` ends."""
        self.handles.pop(fh, None)
        self.journal.on_close(fh)
        self.table.closed(h.node)
