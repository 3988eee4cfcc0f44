"""The confined child (swfs.sandbox) on its own: what it is, what it sends
back, and how it ends (a crash, a deadline, a child of its own left behind)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swfs.views import parsework, sandbox
from tests.mountutil import ensure_test_user, workdir

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.timeout(120)]


def _status(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    out: dict[str, Any] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    out["netns"] = os.readlink("/proc/self/ns/net")
    out["data"] = os.pread(fds[0], 100, 0).decode() if fds else None
    listing: dict[str, str] = {}
    for path in req.get("list", []):
        try:
            listing[path] = ",".join(sorted(os.listdir(path)))
        except OSError as exc:
            listing[path] = f"refused: {exc.strerror}"
    out["listing"] = listing
    return out, [b"first", b"", b"third"]


def _crash(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")


def _hang(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    subprocess.Popen(["sleep", str(req["token"])], start_new_session=True)
    while True:
        time.sleep(1)


def _pids_with(token: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if token.encode() in f.read().split(b"\0"):
                        with open(f"/proc/{entry}/stat") as g:
                            if g.read().split(") ")[-1].startswith("Z"):
                                continue
                        out.append(int(entry))
            except OSError:
                continue
    return out


@pytest.mark.skipif(os.geteuid() != 0, reason="the full level needs root")
def test_a_child_of_root_is_nobody_without_capabilities_network_or_files(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "outside"
    secret.mkdir()
    secret.chmod(0o755)
    (secret / "file.txt").write_text("x")
    child = sandbox.Child({"status": _status}, 0)
    try:
        assert child.level == sandbox.FULL
        fd = os.memfd_create("input")
        os.write(fd, b"the input")
        reply, blobs = child.call(
            {"op": "status", "list": [str(secret), "/home", "/root"]}, [fd], time.monotonic() + 30
        )
        os.close(fd)
    finally:
        child.kill()
    assert reply["Uid"].split() == ["65534"] * 4
    assert reply["Gid"].split() == ["65534"] * 4
    assert reply["Groups"] == ""
    assert int(reply["CapEff"], 16) == 0
    assert int(reply["CapPrm"], 16) == 0
    assert int(reply["CapBnd"], 16) == 0
    assert reply["NoNewPrivs"] == "1"
    assert reply["netns"] != os.readlink("/proc/self/ns/net")
    assert reply["data"] == "the input"
    assert reply["listing"][str(secret)].startswith("refused")
    assert reply["listing"]["/home"] in ("", "refused: No such file or directory")
    assert blobs == [b"first", b"", b"third"]


def test_a_crash_is_named_by_its_signal() -> None:
    child = sandbox.Child({"crash": _crash}, 0)
    with pytest.raises(EOFError):
        child.call({"op": "crash"}, [], time.monotonic() + 30)
    assert child.exit_reason() == "killed by SIGSEGV"


def test_a_deadline_kills_the_child_and_what_it_started() -> None:
    token = f"1000.{random.randrange(10**6):06d}"
    child = sandbox.Child({"hang": _hang}, 0)
    with pytest.raises(TimeoutError):
        child.call({"op": "hang", "token": token}, [], time.monotonic() + 2)
    deadline = time.monotonic() + 30
    while _pids_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pids_with(token) == []
    assert child.exit_reason() == "killed by SIGKILL"


def test_the_worker_refuses_replies_out_of_protocol() -> None:
    check = parsework._checked_reply
    assert check({"status": "ok", "units": [["a.txt", "a"]]}, [b"text"]) == (
        "ok",
        (("a.txt", "a", "text"),),
        None,
        None,
    )
    names = [["p1", "page=1"], ["p2", "page=2"], ["p3", "page=3"]]
    part = {"names": names, "start": 1, "blank": [False], "chars": 4}
    got = check({"status": "ok", "units": [["p2", "page=2"]], "part": part}, [b"text"])
    assert got is not None
    assert got[3] == parsework.Part(tuple(map(tuple, names)), 1, (False,), 4)
    pickled = b"\x80\x04\x95\x00cos\nsystem\n."
    for reply, blobs in [
        ({"status": "pwned"}, []),
        ({"status": "ok", "units": [["a.txt", "a"]]}, []),  # a blob missing
        ({"status": "ok", "units": [["a.txt"]]}, [b"x"]),
        ({"status": "ok", "units": [[1, "a"]]}, [b"x"]),
        ({"status": "ok", "units": "not a list"}, []),
        ({"status": "ok", "error": {"a": 1}}, []),
        ({"status": "ok", "units": [["a.txt", "a"]]}, [b"\xff\xfe" + pickled]),  # not UTF-8
        # A range whose units are not where its names say, or out of the document.
        (_ranged("p1", start=1), [b"x"]),
        (_ranged("p3", start=2), [b"x"]),
        (_ranged("p2", start=1, blank=[]), [b"x"]),
        (_ranged("p2", start=1, names=[["p1", "page=1"], ["p1", "page=1"]]), [b"x"]),
        ({**_ranged("p2", start=1), "status": "failed"}, [b"x"]),
    ]:
        assert check(reply, blobs) is None, reply


def _ranged(
    name: str, *, start: int, blank: list[bool] | None = None, names: list[list[str]] | None = None
) -> dict[str, object]:
    names = names or [["p1", "page=1"], ["p2", "page=2"]]
    part = {
        "names": names,
        "start": start,
        "blank": [False] if blank is None else blank,
        "chars": 1,
    }
    return {"status": "ok", "units": [[name, f"page={name[1:]}"]], "part": part}


def test_a_header_that_is_not_json_is_refused() -> None:
    import socket

    a, b = socket.socketpair()
    try:
        raw = b"\x80\x04not json at all"
        a.sendall(len(raw).to_bytes(4, "big") + raw)
        with pytest.raises(sandbox.SandboxError):
            sandbox.recv(b, time.monotonic() + 5)
    finally:
        a.close()
        b.close()


def test_a_resident_child_serves_one_owner_and_is_replaced_for_another() -> None:
    children = sandbox.Children({"status": _status})
    try:
        first = children.get(("uid", 1000), 0)
        assert children.get(("uid", 1000), 0) is first
        second = children.get(("uid", 1001), 0)
        assert second is not first
        assert first.exit_reason() == "killed by SIGKILL"
        # A file others may write gets a child of its own.
        assert children.get(None, 0) is not second
        for _ in range(sandbox.MAX_JOBS):
            children.get(("uid", 1000), 0).jobs += 1
        again = children.get(("uid", 1000), 0)
        assert again.jobs == 0
    finally:
        children.drop()


def test_file_domains() -> None:
    def st(mode: int, uid: int = 1000) -> os.stat_result:
        return os.stat_result((mode, 0, 0, 1, uid, uid, 0, 0, 0, 0))

    assert sandbox.file_domain(st(0o100644)) == ("uid", 1000)
    assert sandbox.file_domain(st(0o100600, 0)) == ("uid", 0)
    assert sandbox.file_domain(st(0o100664)) is None
    assert sandbox.file_domain(st(0o100646)) is None


_AS_USER = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import importlib.util
spec = importlib.util.spec_from_file_location("sandbox", sys.argv[1] + "/swfs/views/sandbox.py")
sandbox = importlib.util.module_from_spec(spec)
sys.modules["sandbox"] = sandbox
spec.loader.exec_module(sandbox)

def status(req, fds):
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    out["netns"] = os.readlink("/proc/self/ns/net")
    try:
        os.listdir(sys.argv[2])
        out["home"] = "listed"
    except OSError as exc:
        out["home"] = exc.strerror
    return out, []

child = sandbox.Child({"s": status}, 0)
reply, _ = child.call({"op": "s"}, [], time.monotonic() + 30)
child.kill()
reply["level"] = child.level
reply["outer_netns"] = os.readlink("/proc/self/ns/net")
print(json.dumps(reply))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as the test user")
def test_an_ordinary_users_child_drops_capabilities_in_a_user_namespace() -> None:
    """A user mount: no uid change, but a user namespace with every
    capability dropped, no_new_privs and its own network.  Run with the
    system's Python as the unprivileged test user (the project's own Python
    may live where that user cannot go); the sandbox needs the standard
    library only."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    user = ensure_test_user()
    runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin")
    if python is None or user is None or runuser is None:
        pytest.skip("no system python3, runuser or test user")
    where = workdir()  # pytest's own folders are closed to other users
    try:
        where.chmod(0o755)
        private = where / "private"
        private.mkdir(mode=0o755)
        script = where / "as_user.py"
        script.write_text(_AS_USER)
        script.chmod(0o644)
        proc = subprocess.run(
            [runuser, "-u", user, "--", python, str(script), str(REPO), str(private)],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": "/"},
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    if proc.returncode != 0 and "not readable" in proc.stderr:
        pytest.skip(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    reply = json.loads(proc.stdout.strip().splitlines()[-1])
    uid = subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True)
    assert reply["level"] == sandbox.USERNS, reply
    assert reply["Uid"].split()[0] == uid.stdout.strip()
    assert int(reply["CapEff"], 16) == 0
    assert int(reply["CapPrm"], 16) == 0
    assert reply["NoNewPrivs"] == "1"
    assert reply["netns"] != reply["outer_netns"]
    assert reply["home"] == "No such file or directory"


def test_sandbox_off_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.ENV, "off")
    child = sandbox.Child({}, 0)
    try:
        assert child.level == sandbox.OFF
    finally:
        child.kill()
    assert sys.modules["swfs.views.sandbox"] is sandbox


def _read_by_path(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    with open(f"/proc/self/fd/{fds[0]}", "rb") as f:
        return {}, [f.read()]


@pytest.mark.skipif(os.geteuid() != 0, reason="the child is nobody only under root")
def test_a_private_file_handed_over_opens_by_its_descriptor_path(tmp_path: Path) -> None:
    """Parsers open their input as /proc/self/fd/N, which checks the file's
    mode: a root-only file (a big file parsed in place, a cached PDF) must
    still reach the child (as a copy)."""
    private = tmp_path / "private.bin"
    private.write_bytes(b"only root may open this by name")
    private.chmod(0o600)
    child = sandbox.Child({"read": _read_by_path}, 0)
    fd = os.open(private, os.O_RDONLY)
    try:
        _, blobs = child.call({"op": "read"}, [fd], time.monotonic() + 30)
    finally:
        os.close(fd)
        child.kill()
    assert blobs == [b"only root may open this by name"]
