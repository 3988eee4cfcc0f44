"""The blake3 subtree library (swfs.b3tree) for tests: the one ``make
install`` built into the environment, else one built here from the system's
BLAKE3 C sources; the test skips, saying why, when neither can be had."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from swfs.store import b3tree


def library_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = b3tree.default_path()
    if built.is_file():
        return built
    if b3tree.sources() is None:
        pytest.skip("no BLAKE3 C sources (apt-get install librust-blake3-dev; bootstrap does)")
    try:
        return b3tree.build(tmp_path_factory.mktemp("b3tree") / "libswfsb3.so")
    except b3tree.BuildError as exc:
        pytest.skip(f"the blake3 subtree library cannot be built here: {exc}")


@contextlib.contextmanager
def using(setting: str) -> Iterator[None]:
    """``SWFS_B3TREE=setting`` for this process and the daemons it starts."""
    old = os.environ.get(b3tree.ENV)
    os.environ[b3tree.ENV] = setting
    b3tree.reset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(b3tree.ENV, None)
        else:
            os.environ[b3tree.ENV] = old
        b3tree.reset()
