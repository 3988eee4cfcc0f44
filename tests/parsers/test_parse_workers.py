"""Parse workers: a worker worn by earlier files does not fail the next one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from parsers import registry
from swfs.views.parsework import FAILED, OK, ParsePool, WorkerLimits

pytestmark = pytest.mark.timeout(180)


def _worn_worker_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three files of a test format that runs out of memory in any worker
    that parsed a file before (tests.evilparsers.UsedWorkerParser)."""
    # Workers inherit the environment, so they load the test parser.
    monkeypatch.setenv(registry.EXTRA_ENV, "tests.evilparsers:UsedWorkerParser")
    files = []
    for name in ("a", "b", "c"):
        p = tmp_path / f"{name}.oomonce"
        p.write_text(f"text of {name}\n")
        files.append(p)
    return files


def test_out_of_memory_in_a_used_worker_is_retried_in_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _worn_worker_files(tmp_path, monkeypatch)

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


def test_the_retry_never_lands_on_another_used_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two workers, both used: the retry of a file that ran out of memory in
    # one of them must not go to the other, whose heap is just as worn (under
    # load this failed a small text file with "out of memory").
    files = _worn_worker_files(tmp_path, monkeypatch)

    async def main() -> list[tuple[str, str | None]]:
        out: dict[str, tuple[str, str | None]] = {}
        async with ParsePool.open(WorkerLimits(workers=2)) as pool:

            async def one(p: Path) -> None:
                o = await pool.parse(str(p), p.name)
                out[p.name] = (o.status, o.error)

            async with trio.open_nursery() as nursery:  # one job each for two workers
                for p in files[:2]:
                    nursery.start_soon(one, p)
            await one(files[2])
        return [out[p.name] for p in files]

    outcomes = trio.run(main)
    assert outcomes[:2] == [(OK, None), (OK, None)], outcomes
    assert outcomes[2] == (OK, None), outcomes


def test_a_worker_whose_heap_grew_retires() -> None:
    from swfs.views.parsework import should_retire

    cap, started = 1000 << 20, 200 << 20
    assert not should_retire(False, cap, started, 500 << 20)  # 300 MB of 800 used: keeps going
    assert should_retire(False, cap, started, 700 << 20)  # 500 MB of 800: past half, retires
    assert not should_retire(False, 0, started, 700 << 20)  # no cap known: only out of memory
    assert should_retire(True, 0, started, started)


def test_the_timeout_counts_the_parse_not_the_worker_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that takes longer to start than the timeout (its imports, on
    a loaded machine) still parses a quick file; a parse that runs past the
    timeout is still stopped, by the worker's own timer, and said so."""
    monkeypatch.setenv(registry.EXTRA_ENV, "tests.evilparsers:HangParser")
    monkeypatch.setenv("SWFS_EVIL_IMPORT_DELAY", "3")  # start-up takes 3 s
    quick = tmp_path / "quick.txt"
    quick.write_text("a quick file\n")
    stuck = tmp_path / "stuck.hang"
    stuck.write_text("never parsed\n")

    async def main() -> list[tuple[str, str | None]]:
        out = []
        async with ParsePool.open(WorkerLimits(workers=1, timeout=1.5)) as pool:
            for p in (quick, stuck, quick):
                o = await pool.parse(str(p), p.name)
                out.append((o.status, o.error))
        return out

    outcomes = trio.run(main)
    assert outcomes[0] == (OK, None), outcomes
    assert outcomes[1] == (FAILED, "parse timed out after 1.5 s"), outcomes
    # The timed-out worker is gone; the next one starts (slowly) and parses.
    assert outcomes[2] == (OK, None), outcomes
