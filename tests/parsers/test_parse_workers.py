"""Parse workers: a worker worn by earlier files does not fail the next one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from parsers import registry
from swfs.parsework import FAILED, OK, ParsePool, WorkerLimits

pytestmark = pytest.mark.timeout(180)


def test_out_of_memory_in_a_used_worker_is_retried_in_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers inherit the environment, so they load the test parser.
    monkeypatch.setenv(registry.EXTRA_ENV, "tests.evilparsers:UsedWorkerParser")
    files = []
    for name in ("a", "b", "c"):
        p = tmp_path / f"{name}.oomonce"
        p.write_text(f"text of {name}\n")
        files.append(p)

    async def main() -> list[tuple[str, str | None, str]]:
        out = []
        async with ParsePool.open(WorkerLimits(workers=1)) as pool:
            for p in files:
                o = await pool.parse(str(p), p.name)
                out.append((o.status, o.error, o.units[0][2] if o.units else ""))
        return out

    outcomes = trio.run(main)
    # One worker: the second and third files first land on a used worker,
    # which runs out of memory, retires, and a fresh one parses them.
    assert [o[0] for o in outcomes] == [OK, OK, OK], outcomes
    assert [o[2] for o in outcomes] == ["text of a\n", "text of b\n", "text of c\n"]
    assert FAILED not in {o[0] for o in outcomes}
