"""mountd.malloc: the daemon caps glibc's arenas before its threads start,
unless the user set MALLOC_ARENA_MAX; run in a fresh interpreter, since the
cap only counts before a process's first thread arena."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import ctypes, threading
    from mountd import malloc
    print(malloc.limit_arenas())
    # Threads that allocate at once: without a cap each would get an arena.
    libc = ctypes.CDLL("libc.so.6")
    barrier = threading.Barrier(12)
    def work():
        barrier.wait()
        keep = [bytearray(200_000) for _ in range(20)]
        del keep
    threads = [threading.Thread(target=work) for _ in range(12)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    arenas = 0
    with open("/proc/self/maps") as f:
        for line in f:
            start, _, end = line.split()[0].partition("-")
            # thread arenas: anonymous heaps aligned to 64 MiB
            if int(start, 16) % (64 << 20) == 0 and len(line.split()) == 5:
                arenas += 1
    print(arenas)
    print(malloc.trim() in (True, False))
    """
)


def run(env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return out.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_arenas_are_capped_unless_the_user_says_otherwise() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    capped = run(env)
    if capped[0] != "True":
        pytest.skip("not glibc: mallopt unavailable")
    uncapped = run({**env, "MALLOC_ARENA_MAX": "64"})
    assert uncapped[0] == "False"  # the user's setting wins
    assert int(capped[1]) <= 2, capped
    assert int(uncapped[1]) > int(capped[1]), (capped, uncapped)
    assert capped[2] == "True"
