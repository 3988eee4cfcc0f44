"""What a parser can reach: run a probe parser (tests/evilparsers.py, a test
hook) on a real mount whose daemon runs as root, and read what it saw.

From inside a parse, the process must be unprivileged (a uid that is not
root, no capabilities, ``no_new_privs``), in a network namespace that is not
the host's (a listener on 127.0.0.1 receives nothing), and see nothing of
SRC, the store, ``/home``, ``/etc/shadow`` or a world-readable folder
outside SRC; nothing it writes may land outside it.  The same probe run
with the sandbox off reaches all of these, so the test can fail.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from parsers import registry
from parsers._base import ParseOptions
from swfs.api import RelPath
from swfs.engine import Engine
from swfs.views import parsework, sandbox
from swfs.workspace import Config
from tests import evilparsers
from tests.mountutil import cleanup_dir, daemon_env, needs_fuse, start, swfs, workdir

pytestmark = [pytest.mark.timeout(300)]


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.got.append(conn.recv(4096) or b"(connected)")
                except OSError:
                    self.got.append(b"(connected)")

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def scene() -> Iterator[dict[str, object]]:
    """SRC with a secret and a probe; a world-readable folder outside it;
    a world-writable folder for the marker; a listener."""
    root = workdir()
    root.chmod(0o755)
    token = "TOPSECRET-" + secrets.token_hex(8)
    src, mnt, outside, drop = root / "src", root / "mnt", root / "outside", root / "drop"
    for d in (src, mnt, outside, drop):
        d.mkdir()
        d.chmod(0o755)
    drop.chmod(0o777)
    (src / "secret.txt").write_text(token + "\n")
    (outside / "public.txt").write_text(token + "\n")
    (outside / "public.txt").chmod(0o644)
    listener = Listener()
    asked = {
        "read": [
            str(src),
            str(src / "secret.txt"),
            str(src / ".swfs"),
            str(outside),
            str(outside / "public.txt"),
            "/etc/shadow",
            "/home",
            "/root",
        ],
        "port": listener.port,
        "marker": str(drop / "marker"),
    }
    (src / "probe.probe").write_text(json.dumps(asked))
    try:
        yield {
            "root": root,
            "src": src,
            "mnt": mnt,
            "token": token,
            "listener": listener,
            "marker": drop / "marker",
        }
    finally:
        listener.close()
        cleanup_dir(root)


def _report(text: str) -> dict[str, object]:
    """The probe's JSON from a parsed unit (after the view's header line)."""
    for line in text.splitlines():
        if line.startswith("{"):
            found: dict[str, object] = json.loads(line)
            return found
    raise AssertionError(f"no probe report in: {text[:500]!r}")


def _assert_confined(report: dict[str, object], scene: dict[str, object]) -> None:
    uid = str(report["Uid"]).split()
    assert uid, report
    assert all(u != "0" for u in uid), report
    assert "0" not in str(report["Gid"]).split(), report
    assert int(str(report["CapEff"]), 16) == 0, report
    assert int(str(report["CapPrm"]), 16) == 0, report
    assert report["NoNewPrivs"] == "1", report
    assert report["netns"] != os.readlink("/proc/self/ns/net"), report
    assert report["mntns"] != os.readlink("/proc/self/ns/mnt"), report
    reads = report["reads"]
    assert isinstance(reads, dict)
    token = str(scene["token"])
    assert token not in json.dumps(report), report
    for path in (
        str(scene["src"]),
        str(scene["src"] / "secret.txt"),  # type: ignore[operator]
        "/etc/shadow",
    ):
        assert str(reads[path]).startswith("refused"), (path, reads[path])
    home = str(reads["/home"])
    assert home.startswith("refused") or home == "listed: ", home
    # /root holds at most the folder of Python's install, when it lives there.
    root_listing = str(reads["/root"])
    assert root_listing.startswith("refused") or root_listing in ("listed: ", "listed: .pyenv")
    assert str(report["connect"]).startswith("refused"), report
    assert str(report["marker"]).startswith("refused"), report
    listener = scene["listener"]
    assert isinstance(listener, Listener)
    assert listener.got == []
    assert not Path(str(scene["marker"])).exists()


@needs_fuse
@pytest.mark.mount
def test_a_parser_on_a_root_daemon_reaches_nothing(scene: dict[str, object]) -> None:
    src, mnt = Path(str(scene["src"])), Path(str(scene["mnt"]))
    m = start(src, mnt, env=daemon_env())  # no SRC bound into the sandbox
    try:
        swfs("sync", mnt, timeout=120)
        text = (mnt / ".parsed" / "probe.probe" / "content.txt").read_text()
        _assert_confined(_report(text), scene)
        status = swfs("status", mnt).stdout
        assert "parse sandbox: full" in status, status
    finally:
        m.stop()


@pytest.fixture
def probe_installed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test parsers, probe included, in this process and its workers."""
    monkeypatch.setenv(registry.EXTRA_ENV, evilparsers.SPEC)
    registry._instances.cache_clear()
    yield
    monkeypatch.undo()
    registry._instances.cache_clear()


def test_the_engine_parses_in_the_sandbox(scene: dict[str, object], probe_installed: None) -> None:
    """``swfs index`` and worlds use the engine's pool: the same confinement."""
    src = Path(str(scene["src"]))
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        trio.run(eng.drain)
        view = eng.views.parsed_view(RelPath("probe.probe"))
        assert view is not None
        _assert_confined(_report(view.units[0].content.decode()), scene)


def test_the_probe_reaches_everything_without_the_sandbox(
    scene: dict[str, object], probe_installed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: unconfined, the same probe reads the secrets, connects
    and writes its marker, so the tests above can fail."""
    monkeypatch.setenv(sandbox.ENV, "off")
    src = Path(str(scene["src"]))
    outcome = parsework.parse_job(str(src / "probe.probe"), "probe.probe", ParseOptions(), 60)
    assert outcome.status == "ok", outcome
    report = _report(outcome.units[0][2])
    assert str(report["Uid"]).split()[0] == "0"
    assert str(scene["token"]) in json.dumps(report["reads"])
    assert report["connect"] == "connected"
    assert report["marker"] == "written"
    assert Path(str(scene["marker"])).exists()
