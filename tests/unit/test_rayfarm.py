"""The Ray parse executor's pieces that need no cluster: addresses, the
refusal when Ray is missing, parsing shipped bytes, and the fallback to
the local pool when Ray cannot run a job (the real cluster:
tests/mounted/test_rayfarm_mounted.py)."""

from __future__ import annotations

import importlib.util
import os
import socket
import types
from pathlib import Path
from typing import Any

import pytest
import trio

from swfs.store.fsutil import hash_bytes
from swfs.views import executor, rayfarm
from swfs.views.parsework import OK, ParseOptions, ParseOutcome, WorkerLimits, parse_bytes


def test_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rayfarm.address_of("ray://head:10001") == "ray://head:10001"
    assert rayfarm.address_of("ray://") is None
    assert rayfarm.address_of("http://head:10001") is None
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert rayfarm.address_of("ray") is None  # never a private cluster
    monkeypatch.setenv("RAY_ADDRESS", "ray://elsewhere:10001")
    assert rayfarm.address_of("ray") == "ray://elsewhere:10001"


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    with pytest.raises(executor.ExecutorError, match=r"pip install 'swfs\[ray\]'"):
        executor.check("ray://head:10001")
    with pytest.raises(executor.ExecutorError, match="ray://HOST:PORT"):
        executor.check("head:10001")
    executor.check(None)


def test_shipped_bytes_parse_as_a_file_does() -> None:
    data = b"shipped bytes numbat\n"
    outcome = parse_bytes(data, "dir/notes.txt", ParseOptions(), timeout=60)
    assert outcome.status == OK, outcome
    assert outcome.hash == hash_bytes(data)
    assert any("numbat" in text for _, _, text in outcome.units)


def test_read_for_farm(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"abc")
    os.symlink("a.txt", tmp_path / "link.txt")
    (tmp_path / "a.txt").chmod(0o644)
    sent = rayfarm.read_for_farm(str(tmp_path / "a.txt"))
    assert sent is not None
    assert sent[:2] == (b"abc", hash_bytes(b"abc"))
    assert sent[2] == (socket.gethostname(), os.getpid(), ("uid", os.getuid()))
    (tmp_path / "a.txt").chmod(0o666)  # others may write it: a child of its own
    sent = rayfarm.read_for_farm(str(tmp_path / "a.txt"))
    assert sent is not None
    assert sent[2] is None
    assert rayfarm.read_for_farm(str(tmp_path / "link.txt")) is None
    assert rayfarm.read_for_farm(str(tmp_path / "gone.txt")) is None


class LocalPool:
    def __init__(self) -> None:
        self.parsed: list[str] = []

    async def parse(self, abs_path: str, rel: str, **_: Any) -> ParseOutcome:
        self.parsed.append(rel)
        return ParseOutcome(OK, hash="local", parser="text@2")


class Broken:
    """What Ray's client raises once the cluster is gone."""

    def remote(self, *args: Any) -> Any:
        raise ConnectionError("ray client disconnected")


class Working:
    """A Ray task that answers with the hash of the bytes it was sent."""

    def remote(self, data: bytes, rel: str, *args: Any) -> ParseOutcome:
        return ParseOutcome(OK, hash=hash_bytes(data), parser="text@2")


class FakeRay:
    exceptions = types.SimpleNamespace(GetTimeoutError=TimeoutError)

    def get(self, ref: ParseOutcome, timeout: float) -> ParseOutcome:
        return ref

    def shutdown(self) -> None:
        pass


def test_a_job_ray_cannot_run_parses_locally_and_the_farm_reconnects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.txt").write_text("text")
    local = LocalPool()
    state: dict[str, Any] = {}
    limits = WorkerLimits(workers=2, parse_on="ray://x:1")
    joined: list[str | None] = []

    def connect(address: str | None) -> tuple[Any, Any]:
        """The first connection's cluster is gone; the next one works."""
        joined.append(address)
        return FakeRay(), Broken() if len(joined) == 1 else Working()

    monkeypatch.setattr(rayfarm, "RETRY_SECS", 0.0)
    path = str(tmp_path / "a.txt")

    async def main() -> tuple[list[ParseOutcome], str, ParseOutcome]:
        async with rayfarm.RayExecutor.open(limits, local, state, connect) as farm:  # type: ignore[arg-type]
            outs = [await farm.parse(path, "a.txt") for _ in range(rayfarm.DOWN_AFTER + 1)]
            lost = str(state["executor"])
            with trio.fail_after(30):
                while state["executor"] != "ray":  # noqa: ASYNC110
                    await trio.sleep(0.01)
            again = await farm.parse(path, "a.txt")
        return outs, lost, again

    outcomes, lost, again = trio.run(main)
    assert all(o.hash == "local" for o in outcomes)
    assert local.parsed == ["a.txt"] * (rayfarm.DOWN_AFTER + 1)
    # After DOWN_AFTER failures in a row the connection is made afresh;
    # meanwhile files parse locally.
    assert state["fallbacks"] == rayfarm.DOWN_AFTER
    assert lost == "local (ray lost; reconnecting)"
    assert "ConnectionError" in state["error"]
    assert again.hash == hash_bytes(b"text")
    assert state["executor"] == "ray"
    assert state["ray"] == 1
    assert joined == ["ray://x:1", "ray://x:1"]
