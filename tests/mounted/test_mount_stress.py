"""Concurrent writers and readers through one mount: no deadlock, no error,
no daemon exception (kernel invalidations race with writes here)."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time

import pytest

from tests.conftest import MountFactory

pytestmark = [pytest.mark.mount, pytest.mark.slow, pytest.mark.timeout(120)]


def test_concurrent_saves_and_reads(mount_tree: MountFactory) -> None:
    files = {f"f{i}.txt": f"line {i}\n" for i in range(20)}
    m = mount_tree(files)
    mnt = m.mnt
    stop = time.monotonic() + 8
    errors: list[str] = []

    def writer(k: int) -> None:
        rnd = random.Random(k)
        while time.monotonic() < stop:
            try:
                with open(mnt / f"f{rnd.randrange(20)}.txt", "a") as f:
                    f.write(f"writer {k}\n")
                tmp = mnt / f".save{k}.tmp"
                tmp.write_bytes(os.urandom(rnd.randrange(1, 20000)).hex().encode())
                os.replace(tmp, mnt / f"saved{k}.txt")
            except OSError as exc:
                errors.append(f"writer {k}: {exc!r}")

    def reader() -> None:
        while time.monotonic() < stop:
            try:
                subprocess.run(
                    ["grep", "-rqs", "writer", str(mnt / ".parsed")], timeout=60, check=False
                )
                (mnt / ".review/ALL.diff").read_bytes()
                for name in os.listdir(mnt / ".versions"):
                    assert name
                for p in mnt.iterdir():
                    if p.name.startswith("f"):
                        p.read_bytes()
            except FileNotFoundError:
                pass  # a temp file renamed away between listing and reading
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"reader: {exc!r}")

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hung on the mount"
    assert errors == []
    assert m.proc.poll() is None
    assert "Traceback" not in m.log()
    for i in range(20):
        assert (mnt / f"f{i}.txt").read_bytes() == (m.src / f"f{i}.txt").read_bytes()
