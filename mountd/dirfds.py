"""O_PATH descriptors of the native directories the kernel holds.

A lookup, getattr or getxattr of a native node works on a name inside a
directory.  Resolving that directory from SRC with openat2 costs a path walk
and a descriptor per request; keeping one O_PATH descriptor per directory node
(most recently used first, bounded) turns the request into one ``*at`` call.

A descriptor is only cached after checking that it names the directory node's
own inode, so it always means the directory the kernel means, wherever that
directory has since been renamed to.  The one thing it does not follow is a
directory moved out of SRC behind the mount: requests through it still reach
that directory (with the kernel checking the modes it really has) until the
kernel forgets the node.
"""

from __future__ import annotations

import os
import resource
from collections import OrderedDict

DEFAULT_LIMIT = 1024


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class DirFds:
    """A bounded map from inode numbers to open O_PATH directory descriptors."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = max(1, limit)
        self._fds: OrderedDict[int, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._fds)

    def get(self, key: int) -> int | None:
        fd = self._fds.get(key)
        if fd is not None:
            self._fds.move_to_end(key)
        return fd

    def put(self, key: int, fd: int) -> None:
        """Take ownership of ``fd``; the least recently used beyond the limit are closed."""
        self.drop(key)
        self._fds[key] = fd
        while len(self._fds) > self.limit:
            _, old = self._fds.popitem(last=False)
            os.close(old)

    def drop(self, key: int) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])
