"""Misbehaving parsers, injected into parse workers via $SWFS_EXTRA_PARSERS."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from parsers._base import FileInfo, ParseOptions, Parser, Unit

# A worker that takes long to start, as on a loaded machine: its imports
# (this module among them) delay its first job by this many seconds.
time.sleep(float(os.environ.get("SWFS_EVIL_IMPORT_DELAY", "0")))


class _Evil(Parser):
    version = 1
    priority = 100.0
    ext = ""

    def accepts(self, info: FileInfo) -> bool:
        return info.extension == self.ext


class CrashParser(_Evil):
    """Dies like a segfaulting native library."""

    id = "evil-crash"
    ext = ".crash"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class HangParser(_Evil):
    """Never returns, like a PDF with a cyclic page tree in a naive parser."""

    id = "evil-hang"
    ext = ".hang"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        while True:
            time.sleep(1)


class HogParser(_Evil):
    """Allocates without bound, like a decompression bomb."""

    id = "evil-hog"
    ext = ".hog"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        hoard = []
        while True:
            hoard.append(bytearray(64 * 1024 * 1024))


class BuggyParser(_Evil):
    """Raises an unexpected exception."""

    id = "evil-bug"
    ext = ".bug"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        raise KeyError("a parser bug")


class SlowParser(_Evil):
    """A correct text parser that takes two seconds: makes staleness observable."""

    id = "slow-text"
    ext = ".slow"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        time.sleep(2)
        with open(path, encoding="utf-8", errors="replace") as f:
            return [Unit("content.txt", f.read(), "content")]


class GatedParser(_Evil):
    """A correct text parser that finishes only once a file ``<name>.go``
    exists beside its input: a test decides when a pending view turns current."""

    id = "gated-text"
    ext = ".gated"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        go = _source_of(info) + ".go"
        while not os.path.exists(go):
            time.sleep(0.05)
        with open(path, encoding="utf-8", errors="replace") as f:
            return [Unit("content.txt", f.read(), "content")]


def _source_of(info: FileInfo) -> str:
    """The file being parsed, on disk: ``path`` may be a private copy
    (swfs.parsework), but the worker keeps the file itself open meanwhile."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            real = os.readlink(f"/proc/self/fd/{fd}")
            if real.endswith("/" + info.name) and os.path.isfile(real):
                return real
    raise AssertionError(f"{info.name}: not open in this worker")


SPEC = ",".join(
    f"tests.evilparsers:{c.__name__}"
    for c in (CrashParser, HangParser, HogParser, BuggyParser, SlowParser, GatedParser)
)


class UpgradedTextParser(_Evil):
    """Not evil: a newer reader of ``.txt``, as an upgrade would install."""

    id = "text-upgraded"
    ext = ".txt"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        with open(path, encoding="utf-8") as f:
            return [Unit(name="content.txt", text="upgraded: " + f.read(), locator="content")]


class UsedWorkerParser(_Evil):
    """Runs out of memory in a worker that already parsed a file, as a worker
    whose heap earlier files grew does; a fresh worker parses it fine."""

    id = "evil-used-worker"
    ext = ".oomonce"
    calls = 0

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        UsedWorkerParser.calls += 1
        if UsedWorkerParser.calls > 1:
            raise MemoryError
        with open(path, encoding="utf-8", errors="replace") as f:
            return [Unit("content.txt", f.read(), "content")]
