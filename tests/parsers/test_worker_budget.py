"""A parse worker (or its confined child) past its resident-memory budget
retires between jobs (swfs.parsework), and files go on being parsed."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.views import parsework
from swfs.views.parsework import WorkerBudget, WorkerLimits
from swfs.workspace import Config


def test_past_the_budget_a_worker_retires() -> None:
    assert not WorkerBudget(rss_bytes=1 << 50).retire()
    assert WorkerBudget(rss_bytes=1024 * 1024).retire()  # far below any Python's
    assert not WorkerBudget(rss_bytes=0).retire()  # no limit
    assert WorkerBudget(out_of_memory=True).retire()


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parsework.RSS_BUDGET_ENV, "300")
    assert parsework.rss_budget() == 300 * 1024 * 1024
    monkeypatch.setenv(parsework.RSS_BUDGET_ENV, "lots")
    assert parsework.rss_budget() == parsework.RSS_BUDGET_MB * 1024 * 1024
    monkeypatch.delenv(parsework.RSS_BUDGET_ENV)
    assert parsework.rss_budget() == parsework.RSS_BUDGET_MB * 1024 * 1024


@pytest.mark.timeout(300)
def test_workers_retiring_after_every_job_still_parse_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(parsework.RSS_BUDGET_ENV, "1")  # every worker is past it
    src = tmp_path / "ws"
    src.mkdir()
    for n in range(6):
        (src / f"note{n}.md").write_text(f"# Note {n}\n\nfigure {n * 11}\n")
    limits = WorkerLimits(timeout=120, memory_mb=2048, workers=1)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        for n in range(6):
            view = eng.views.parsed_view(RelPath(f"note{n}.md"))
            assert view is not None
            assert view.freshness == Freshness.CURRENT, view.error
            assert f"figure {n * 11}" in view.units[0].content.decode()
