"""Misbehaving parsers, injected into parse workers via $SWFS_EXTRA_PARSERS."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time

from parsers._base import FileInfo, ParseOptions, Parser, Unit, UnitRange
from parsers.pdf import PdfParser

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


class PanicException(BaseException):  # noqa: N818 (pyo3's own name)
    """Like pyo3's: no Exception, and holding what pickle cannot take."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.hook = lambda: None  # unpicklable, as a native library's state is


class PanicParser(_Evil):
    """Panics through a native binding, as python-calamine did on .xlsb files."""

    id = "evil-panic"
    ext = ".panic"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        raise PanicException("called `Option::unwrap()` on a `None` value")


class AbortParser(_Evil):
    """Aborts the process, as a C library's failed assertion does."""

    id = "evil-abort"
    ext = ".abort"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        os.abort()


class Unprintable(Exception):  # noqa: N818
    """Neither picklable nor printable: its message raises, and it holds a lambda."""

    def __init__(self) -> None:
        super().__init__()
        self.hook = lambda: None

    def __str__(self) -> str:
        raise RuntimeError("no message either")


class UnprintableParser(_Evil):
    """Raises what can be neither sent back nor printed."""

    id = "evil-unprintable"
    ext = ".unprintable"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        raise Unprintable


class CalaminePanicParser(_Evil):
    """A real panic through pyo3: python-calamine on an .xls whose sheet
    offset points past its Workbook stream (a fuzzed file), uncaught."""

    id = "evil-calamine"
    ext = ".calpanic"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        import python_calamine

        with open(path, "rb") as f:
            python_calamine.CalamineWorkbook.from_filelike(f)
        raise AssertionError("calamine read the fuzzed file; the test must change")


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
        _wait_for_gate(info)
        with open(path, encoding="utf-8", errors="replace") as f:
            return [Unit("content.txt", f.read(), "content")]


class GatedPdfParser(PdfParser):
    """The PDF parser, range by range (swfs.ranged), for ``.gpdf`` files: a
    range after the first is parsed only once ``<name>.go`` exists beside
    the input, so a test sees a view whose first pages are in and whose
    others are not.  A whole parse is not gated."""

    id = "gated-pdf"
    version = 1
    priority = 100.0

    def accepts(self, info: FileInfo) -> bool:
        return info.extension == ".gpdf"

    def parse_range(
        self,
        path: str,
        info: FileInfo,
        options: ParseOptions,
        *,
        start: int,
        stop: int,
        threshold: int,
    ) -> UnitRange | None:
        if start > 0:
            _wait_for_gate(info)
        return super().parse_range(path, info, options, start=start, stop=stop, threshold=threshold)


def _wait_for_gate(info: FileInfo) -> None:
    gates = os.environ.get(GATES_ENV)
    go = os.path.join(gates, info.name) + ".go" if gates else _source_of(info) + ".go"
    while not os.path.exists(go):
        time.sleep(0.05)


# The folder holding the gates (SRC, shown read-only to the parse sandbox):
# a parser in the sandbox cannot find its input's folder by itself.
GATES_ENV = "SWFS_TEST_GATES"


def _source_of(info: FileInfo) -> str:
    """The file being parsed, on disk: ``path`` may be a private copy
    (swfs.parsework), but the worker keeps the file itself open meanwhile."""
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            real = os.readlink(f"/proc/self/fd/{fd}")
            if real.endswith("/" + info.name) and os.path.isfile(real):
                return real
    raise AssertionError(f"{info.name}: not open in this worker")


class ProbeParser(_Evil):
    """Reports what a parser can do where it runs: its input is a JSON
    object naming paths to read and list, a TCP port to connect to and a
    path to create.  Exists only in tests (tests/mounted/test_security_sandbox.py)."""

    id = "probe"
    ext = ".probe"

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        with open(path, encoding="utf-8") as f:
            asked = json.load(f)
        out: dict[str, object] = {}
        with open("/proc/self/status", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("Uid", "Gid", "Groups", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs"):
                    out[key] = value.strip()
        out["netns"] = os.readlink("/proc/self/ns/net")
        out["mntns"] = os.readlink("/proc/self/ns/mnt")
        reads: dict[str, str] = {}
        for target in asked.get("read", []):
            try:
                if os.path.isdir(target):
                    reads[target] = "listed: " + ",".join(sorted(os.listdir(target)))
                else:
                    with open(target, "rb") as g:
                        reads[target] = "read: " + g.read(200).decode("utf-8", "replace")
            except OSError as exc:
                reads[target] = f"refused: {exc.strerror}"
        out["reads"] = reads
        port = asked.get("port")
        if port:
            try:
                with socket.create_connection(("127.0.0.1", int(port)), timeout=3) as conn:
                    conn.sendall(b"GET /probe HTTP/1.0\r\n\r\n")
                out["connect"] = "connected"
            except OSError as exc:
                out["connect"] = f"refused: {exc.strerror or exc}"
        marker = asked.get("marker")
        if marker:
            try:
                with open(marker, "x") as g:
                    g.write("written by a parser\n")
                out["marker"] = "written"
            except OSError as exc:
                out["marker"] = f"refused: {exc.strerror}"
        return [Unit("content.txt", json.dumps(out, sort_keys=True), "content")]


SPEC = ",".join(
    f"tests.evilparsers:{c.__name__}"
    for c in (
        CrashParser,
        HangParser,
        HogParser,
        BuggyParser,
        PanicParser,
        AbortParser,
        UnprintableParser,
        CalaminePanicParser,
        SlowParser,
        GatedParser,
        GatedPdfParser,
        ProbeParser,
    )
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
