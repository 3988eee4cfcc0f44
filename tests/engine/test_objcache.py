"""The shared parse cache in an S3-compatible object store (swfs.store.objcache),
against a real S3 server on this machine (moto's ``moto_server``).  Skipped
only where the ``s3`` extra (obstore) or moto is not installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swfs.engine import Engine
from swfs.store import cacheopen
from swfs.store.objcache import ObjectStoreCache
from swfs.workspace import Config

obstore = pytest.importorskip("obstore", reason="the s3 extra: pip install 'swfs[s3]'")

pytestmark = pytest.mark.timeout(300)

BUCKET = "swfs-cache"
FILES = {"a.txt": "alpha beta\n", "notes.md": "# Notes\nthe quick brown fox\n"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not os.path.exists(server):
        pytest.skip("moto_server (moto[server]) is not installed")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("moto_server did not start") from None
                time.sleep(0.2)
        urllib.request.urlopen(urllib.request.Request(f"{url}/{BUCKET}", method="PUT")).close()
        for key, value in {
            "AWS_ENDPOINT_URL": url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }.items():
            monkeypatch.setenv(key, value)
        yield f"s3://{BUCKET}/swfs"
    finally:
        proc.terminate()
        proc.wait(30)


def index(root: Path, cache: str) -> Engine:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    eng = Engine(root, config=Config(rescan_interval=0, cache_dir=cache))
    eng.scan()
    trio.run(eng.drain)
    return eng


def test_second_workspace_parses_nothing_through_s3(tmp_path: Path, s3: str) -> None:
    a = index(tmp_path / "a", s3)
    try:
        assert isinstance(a.workspace.shared_cache, ObjectStoreCache)
        assert a.workspace.parse_runs == len(FILES)
        assert a.workspace.shared_cache.counts.published == len(FILES)
    finally:
        a.close()
    b = index(tmp_path / "b", s3)
    try:
        assert b.workspace.parse_runs == 0
        assert b.workspace.shared_cache is not None
        assert b.workspace.shared_cache.counts.hits == len(FILES)
        rec = b.workspace.store.get_file("notes.md")
        assert rec is not None
        assert rec.parser is not None
        assert "quick brown fox" in b.workspace.store.parse_units(rec.hash, rec.parser)[0][2]
    finally:
        b.close()


def test_corrupt_object_is_a_miss_and_deleted(s3: str) -> None:
    cache = cacheopen.open_cache(s3)
    assert isinstance(cache, ObjectStoreCache)
    h = "ab" * 32
    cache.publish(h, "text@1", [("content.txt", "l1", "hello\n")], secs=0.1)
    got = cache.lookup(h, "text@1")
    assert got is not None
    assert got.units == (("content.txt", "l1", "hello\n"),)
    from swfs.store.sharedcache import entry_key

    key = entry_key(h, "text@1")
    assert key is not None
    store = obstore.store.from_url(s3)
    data = bytes(obstore.get(store, key).bytes())
    obstore.put(store, key, data[:-2])
    assert cache.lookup(h, "text@1") is None
    assert cache.counts.corrupt == 1
    with pytest.raises(FileNotFoundError):
        obstore.get(store, key)
    cache.put_file(h, "110/page-0001.png", b"\x89PNG fake")
    assert cache.get_file(h, "110/page-0001.png") == b"\x89PNG fake"
    entries, size = cache.usage()
    assert entries == 1
    assert size > 0
    assert cache.gc(3600) == (0, 0)
    assert cache.gc(0, now=time.time() + 10)[0] == 1
    assert cache.usage() == (0, 0)
