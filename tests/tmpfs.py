"""A small tmpfs for disk-full tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(path: Path, size: str, *, mode: str | None = None) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``1m``) at ``path`` for the block; the test
    is skipped where mounting is not allowed (needs root).  Unmounted lazily
    afterwards, so a file still open elsewhere can never leave it behind."""
    options = f"size={size}" + (f",mode={mode}" if mode else "")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
