"""mountd.malloc.fix_mmap_threshold: after a big block is freed, glibc no
longer raises its threshold and carves the next big buffers from the heap
(where they leave holes); run in a fresh interpreter each time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mountd import malloc

PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from mountd import malloc
    if sys.argv[1] == "fix":
        assert malloc.fix_mmap_threshold()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    info = libc.mallinfo2
    info.restype = malloc._MallInfo2
    libc.free(libc.malloc(4 << 20))  # glibc maps it; its free raises the threshold
    before = info().hblkhd
    block = libc.malloc(600 << 10)
    print(info().hblkhd - before >= 600 << 10)  # mapped on its own, not from the heap
    libc.free(block)
    """
)


def mapped_on_its_own(mode: str) -> bool:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return out.stdout.split() == ["True"]


def test_big_buffers_stay_out_of_the_heap_once_fixed() -> None:
    libc = malloc._libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc 2.33+")
    assert not mapped_on_its_own("dynamic")  # glibc's own rule: from the heap
    assert mapped_on_its_own("fix")


def test_the_users_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(malloc.MMAP_ENV, "65536")
    assert malloc.fix_mmap_threshold() is False
