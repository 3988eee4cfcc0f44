"""Parse jobs on a real local Ray cluster (``swfs mount --parse-on``).

A head node and a second worker node are started with Ray's own ``ray
start`` on this machine; the mount's parses run there (the daemon's
``executor`` control op counts them), and its ``.parsed`` views are served
from those results.  A cluster that cannot be reached leaves the mount
parsing locally, naming the cause.  Skipped only where Ray is not
installed (``pip install 'swfs[ray]'``; ``make install`` installs it)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swfs import control
from tests import docgen
from tests.mountutil import Mount, needs_fuse, swfs, wait_until, workspace

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(600),
    needs_fuse,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed"),
]

RAY = str(Path(sys.executable).with_name("ray"))
BOUND = 240.0  # seconds: a busy machine starts Ray workers slowly


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_cmd(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [RAY, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head node (one CPU, its Ray client server) and a worker node on
    this machine; the Ray client address.  ``ray stop --force`` afterwards
    ends every Ray process of the machine: only these tests use Ray."""
    gcs, client = free_port(), free_port()
    try:
        head = ray_cmd(
            "start",
            "--head",
            f"--port={gcs}",
            f"--ray-client-server-port={client}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
        )
        assert head.returncode == 0, head.stdout + head.stderr
        worker = ray_cmd("start", f"--address=127.0.0.1:{gcs}", "--num-cpus=1")
        assert worker.returncode == 0, worker.stdout + worker.stderr
        address = f"ray://127.0.0.1:{client}"
        wait_until("the cluster runs a task", lambda: runs_a_task(address), BOUND)
        yield address
    finally:
        ray_cmd("stop", "--force", timeout=120)


def runs_a_task(address: str) -> bool:
    """Whether a Ray client at ``address`` gets a task run (the head's client
    server starts after ``ray start`` returns)."""
    probe = (
        "import ray, sys\n"
        "ray.init(address=sys.argv[1], log_to_driver=False)\n"
        "assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=120) == 42\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe, address], capture_output=True, timeout=180, check=False
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


PHRASES = {
    "notes.txt": "farm plain text quokka",
    "sheet.xlsx": "farm sheet wombat",
    "paper.pdf": None,  # docgen's fact
    "report.docx": None,
}


def populate(src: Path) -> None:
    (src / "notes.txt").write_text(PHRASES["notes.txt"] + "\n")
    docgen.simple_xlsx(src, [[PHRASES["sheet.xlsx"], 1], ["b", 2]]).rename(src / "sheet.xlsx")
    (src / "paper.pdf").write_bytes(docgen.pdf_bytes(3, fact_page=2))
    docgen.rich_docx(src).rename(src / "report.docx")


def executor(m: Mount) -> dict[str, Any]:
    reply = control.request(m.src / ".swfs", "executor", io_timeout=30)
    assert isinstance(reply, dict)
    return reply


def parsed_text(m: Mount, name: str) -> str:
    d = m.mnt / ".parsed" / name
    try:
        return "".join(p.read_text(errors="replace") for p in sorted(d.iterdir()))
    except OSError:
        return ""


def all_current(m: Mount) -> bool:
    texts = {name: parsed_text(m, name) for name in PHRASES}
    return all(t and 'freshness="current"' in t for t in texts.values())


def test_parses_run_on_the_ray_cluster(cluster: str) -> None:
    with workspace(("--parse-on", cluster), populate=populate, sync=False) as m:
        wait_until("every view parsed", lambda: all_current(m), BOUND)
        assert PHRASES["notes.txt"] in parsed_text(m, "notes.txt")
        assert PHRASES["sheet.xlsx"] in parsed_text(m, "sheet.xlsx")
        assert docgen.FACT in parsed_text(m, "paper.pdf")
        state = executor(m)
        assert state["executor"] == "ray", state
        assert state["address"] == cluster
        assert state["ray"] >= len(PHRASES), state
        assert state["local"] == 0, state
        assert state["fallbacks"] == 0, state
        # A file written through the mount is parsed on Ray too.
        (m.mnt / "later.txt").write_text("written later capybara\n")
        wait_until(
            "the new file's view",
            lambda: "capybara" in parsed_text(m, "later.txt"),
            BOUND,
        )
        assert executor(m)["ray"] >= len(PHRASES) + 1
        assert executor(m)["local"] == 0
        status = json.loads(swfs("status", "--json", m.mnt).stdout)
        assert status["executor"]["executor"] == "ray", status
        assert "files parsed on Ray, 0 locally" in swfs("status", m.mnt).stdout
        assert m.alive()


def test_ray_address_from_the_environment(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", cluster)
    with workspace(("--parse-on", "ray"), populate=populate, sync=False) as m:
        wait_until("every view parsed", lambda: all_current(m), BOUND)
        state = executor(m)
        assert state["executor"] == "ray", state
        assert state["address"] == cluster, state
        assert state["ray"] >= len(PHRASES), state
        assert state["local"] == 0, state


def test_an_unreachable_cluster_parses_locally() -> None:
    nowhere = f"ray://127.0.0.1:{free_port()}"
    with workspace(("--parse-on", nowhere), populate=populate, sync=False) as m:
        wait_until("every view parsed", lambda: all_current(m), BOUND)
        state = executor(m)
        assert state["executor"] == "local (ray unavailable)", state
        assert nowhere in state["error"], state
        assert state["ray"] == 0, state
        assert state["local"] >= len(PHRASES), state
        assert m.alive()


def test_a_cluster_gone_mid_mount_parses_locally(cluster: str) -> None:
    """Last in this module: it stops every Ray process of the machine."""
    with workspace(("--parse-on", cluster), populate=populate, sync=False) as m:
        wait_until("every view parsed", lambda: all_current(m), BOUND)
        first = executor(m)
        assert first["ray"] >= len(PHRASES), first
        stopped = ray_cmd("stop", "--force", timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        (m.mnt / "after.txt").write_text("written after the cluster went okapi\n")
        wait_until("the new file's view", lambda: "okapi" in parsed_text(m, "after.txt"), BOUND)
        state = executor(m)
        assert state["local"] >= 1, state
        assert state["fallbacks"] >= 1, state
        assert state["error"], state
        assert m.alive()
