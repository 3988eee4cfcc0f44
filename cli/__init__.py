"""The ``swfs`` command line, above both the engine (``swfs``) and the daemon
(``mountd``).

Every error names the path and the cause and exits non-zero without a
traceback.  Each command module registers its subcommands with
``register(commands)``; add a module to ``_MODULES`` to add commands.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from . import cache, commands, history, lineage, mount, prompt, search, staged, tab
from .base import CLIError, Commands
from .mount import MountError

_MODULES = (mount, commands, history, lineage, search, staged, tab, prompt, cache)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swfs", description="A versioned workspace filesystem for AI agents."
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    p.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    c = Commands(p.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    for module in _MODULES:
        module.register(c)
    return p


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("swfs")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


class _Version(argparse.Action):
    """``--version``: the package metadata is read only when asked (reading
    it costs more than the rest of the command line's start)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        print(f"swfs {_version()}")
        parser.exit()


def _error_code(args: argparse.Namespace) -> int:
    # A command whose exit status 1 means something else (diff --exit-code)
    # sets args.error_code for its errors.
    return int(getattr(args, "error_code", 1))


def _is(exc: BaseException, module: str, name: str) -> bool:
    """Whether ``exc`` is ``module.name``, without importing ``module``: the
    command modules import the engine only when a command needs it, and an
    exception of a module never imported cannot have been raised."""
    found = sys.modules.get(module)
    cls = getattr(found, name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def die(message: str, code: int = 1) -> NoReturn:
    sys.stderr.write(f"swfs: error: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> None:
    # Behave like a Unix tool when piped into head: exit quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="swfs: %(levelname)s: %(message)s")
    try:
        code = args.fn(args)
    except CLIError as exc:
        die(str(exc), exc.code)
    except MountError as exc:
        die(str(exc), _error_code(args))
    except OSError as exc:
        where = exc.filename or ""
        message = f"{where}: {exc.strerror or exc}" if where else str(exc)
        die(message, _error_code(args))
    except KeyboardInterrupt:
        die("interrupted", 130)
    except Exception as exc:
        if _is(exc, "swfs.control", "ControlUnavailable"):
            die(f"{exc}: the daemon is not answering", _error_code(args))
        if any(
            _is(exc, module, name)
            for module, name in (
                ("swfs.workspace", "WorkspaceError"),
                ("swfs.store.records", "StoreError"),
                ("swfs.control", "ControlError"),
            )
        ):
            die(str(exc), _error_code(args))
        raise
    raise SystemExit(code)
