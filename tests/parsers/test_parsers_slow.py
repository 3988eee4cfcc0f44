"""Slow parser checks: a million-cell workbook streams in flat memory."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests import docgen

# What the parse may add to the interpreter's peak RSS for 1M cells.  The text
# alone is ~25 MB; a non-streaming reader needs well over 1 GB.
MAX_EXTRA_RSS_MB = 200

_MEASURE = """
import json, resource, sys, time
from parsers import registry, xlsx  # import first: the baseline includes libraries
from parsers._base import ParseOptions

path = sys.argv[1]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cpu = time.process_time()
_, units = registry.parse(path, registry.file_info(path, "million.xlsx"), ParseOptions())
cpu = time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
lines = units[0].text.splitlines()
print(json.dumps({
    "cells": len(lines), "cpu": cpu, "base_kb": base, "peak_kb": peak,
    "first": lines[0], "last": lines[-1],
}))
"""


@pytest.mark.slow
def test_million_cells_stream_in_flat_memory(tmp_path: pathlib.Path) -> None:
    path = docgen.million_cell_xlsx(tmp_path, rows=100_000, cols=10)
    run = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    result = json.loads(run.stdout)
    assert result["cells"] == 1_000_000
    assert result["first"] == "Sheet1!A1 = row 1"
    assert result["last"] == "Sheet1!J100000 = =B100000*2 -> 200001"
    extra_mb = (result["peak_kb"] - result["base_kb"]) / 1024
    assert extra_mb < MAX_EXTRA_RSS_MB, result
