"""Hostile documents, parsed directly (no store, no daemon): how long the
slowest of them keeps a parse worker busy before it fails with its reason.

The tests check that each hostile file fails with a one-line reason, that
zip bombs are refused before anything is decompressed and that the work a
file makes is bounded; how long that takes is measured here, where a busy
machine is not a failure.  The files are the tests' own (``tests/docgen.py``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import Ctx
from bench.report import ABSOLUTE, Target, WorkloadResult

log = logging.getLogger(__name__)

FAST = 3.0  # seconds: a hostile file must not keep a worker busy


def _makers() -> dict[str, Callable[[Path], Path]]:
    docgen: Any = importlib.import_module("tests.docgen")
    makers: dict[str, Callable[[Path], Path]] = {
        "encrypted.pdf": docgen.encrypted_pdf,
        "cyclic.pdf": docgen.cyclic_pdf,
        "notzip.xlsx": docgen.non_zip_xlsx,
        "random.docx": docgen.random_docx,
        "entity.xlsx": docgen.entity_bomb_xlsx,
        "ratio-bomb.xlsx": docgen.ratio_bomb,
        "declared-size-bomb.docx": docgen.declared_size_bomb,
        "understated.xlsx": docgen.understated_size_xlsx,
        "deep.docx": docgen.deep_docx,
        "deep.pptx": docgen.deep_pptx,
        "deep.xlsx": docgen.deep_xlsx,
    }
    for seed in range(20):
        makers[f"fuzzed-{seed}.pdf"] = functools.partial(docgen.fuzzed_pdf, seed=seed)
    return makers


def _parse_s(path: Path) -> float:
    """Seconds ``parsers.registry.parse`` takes over ``path``, failing or not."""
    from parsers import registry
    from parsers._base import ParseFailed, ParseOptions

    info = registry.file_info(str(path), path.name)
    t0 = time.perf_counter()
    with contextlib.suppress(ParseFailed):
        registry.parse(str(path), info, ParseOptions())
    return time.perf_counter() - t0


def hostile_parse(ctx: Ctx, result: WorkloadResult) -> None:
    slowest = result.metric(
        "hostile_parse_max_s",
        "s",
        kind=ABSOLUTE,
        target=Target("<", FAST, f"<{FAST:g} s"),
        note="the slowest hostile file's parse, until it fails (tests/docgen.py)",
    )
    makers = _makers()
    scratch = ctx.scratch("hostile-parse")
    paths: dict[str, Path] = {}
    for name, make in makers.items():
        out = scratch / name
        out.mkdir()
        paths[name] = make(out)
    result.info.update(files=len(paths))
    for _ in range(ctx.rounds):
        times = {name: _parse_s(path) for name, path in paths.items()}
        worst = max(times, key=times.__getitem__)
        slowest.values.append(times[worst])
        result.info["slowest"] = worst
        log.info("hostile parse: slowest %s, %.3f s", worst, times[worst])


WORKLOADS = {"hostile_parse": hostile_parse}
