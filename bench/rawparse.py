"""Raw parser throughput: the project's parsers called directly, no store, no daemon.

This is the yardstick for "cold index reaches 80% of raw parser throughput".
Files go through ``parsers.registry.parse`` (the engine's selection and
fallback rules); where there is no registry, the concrete ``Parser`` subclasses
found in the package are tried in priority order.  It runs in as many worker
processes as there are CPUs, like the engine's parse workers.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import pkgutil
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def discover() -> list[Any]:
    """Instances of every concrete Parser in ``parsers``, highest priority first."""
    import parsers
    from parsers._base import Parser

    for mod in pkgutil.walk_packages(parsers.__path__, "parsers."):
        try:
            importlib.import_module(mod.name)
        except Exception as exc:  # a broken module only loses its parsers
            log.warning("cannot import %s: %s", mod.name, exc)
    found: dict[type, Any] = {}
    todo: list[type] = [Parser]
    while todo:
        cls = todo.pop()
        subs: list[type] = cls.__subclasses__()
        for sub in subs:
            todo.append(sub)
            if not inspect.isabstract(sub) and sub not in found:
                try:
                    found[sub] = sub()
                except TypeError:
                    continue
    return sorted(found.values(), key=lambda p: -float(getattr(p, "priority", 0.0)))


def _parse_chunk(paths: Sequence[str], root: str) -> tuple[int, int, int]:
    """Parse ``paths``; return (parsed, failed, unsupported)."""
    try:
        from parsers import registry as reg
    except ImportError:
        return _parse_chunk_discovered(paths, root)
    from parsers._base import ParseOptions, UnsupportedFormat

    opts = ParseOptions()
    parsed = failed = unsupported = 0
    for path in paths:
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        try:
            reg.parse(path, reg.file_info(path, rel), opts)
            parsed += 1
        except UnsupportedFormat:
            unsupported += 1
        except Exception:
            failed += 1
    return parsed, failed, unsupported


def _parse_chunk_discovered(paths: Sequence[str], root: str) -> tuple[int, int, int]:
    """Like _parse_chunk, for a tree without ``parsers.registry``."""
    from parsers._base import FileInfo, ParseOptions

    registry = discover()
    opts = ParseOptions()
    parsed = failed = unsupported = 0
    for path in paths:
        with open(path, "rb") as f:
            head = f.read(4096)
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        info = FileInfo(
            name=rel,
            extension=os.path.splitext(path)[1].lower(),
            size=os.path.getsize(path),
            head=head,
        )
        for parser in registry:
            if parser.accepts(info):
                try:
                    parser.parse(path, info, opts)
                    parsed += 1
                except Exception:
                    failed += 1
                break
        else:
            unsupported += 1
    return parsed, failed, unsupported


def throughput(files: Sequence[Path], root: Path, workers: int | None = None) -> dict[str, Any]:
    """Parse every file once; files/s over all files (unsupported ones count, as in
    the index, and cost only the ``accepts`` calls)."""
    if not discover():
        raise RuntimeError("no parsers found in the parsers package")
    workers = workers or os.cpu_count() or 1
    chunks = [[str(p) for p in files[i :: workers * 8]] for i in range(workers * 8)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers) as pool:
        counts = list(pool.map(_parse_chunk, chunks, [str(root)] * len(chunks)))
    dt = time.perf_counter() - t0
    parsed, failed, unsupported = (sum(c[i] for c in counts) for i in range(3))
    return {
        "seconds": dt,
        "files": len(files),
        "files_per_s": len(files) / dt if dt > 0 else float("nan"),
        "parsed": parsed,
        "failed": failed,
        "unsupported": unsupported,
        "workers": workers,
    }
