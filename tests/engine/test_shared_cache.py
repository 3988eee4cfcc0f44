"""The shared parse cache (swfs.store.sharedcache): a second workspace over
the same contents parses nothing; a damaged entry is a miss, never a crash."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio

from swfs.api import RelPath
from swfs.engine import Engine
from swfs.store import cacheopen
from swfs.store.sharedcache import CacheError, LocalCache
from swfs.workspace import Config, WorkspaceError

FILES = {
    "docs/a.txt": "alpha\nbeta\ngamma\n",
    "notes.md": "# Notes\nthe quick brown fox\n",
    "data.csv": "x,y\n1,2\n",
}


def make_ws(root: Path, files: dict[str, str] = FILES) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def index(src: Path, cache: Path | None) -> Engine:
    config = Config(rescan_interval=0, cache_dir=None if cache is None else str(cache))
    eng = Engine(src, config=config)
    eng.scan()
    trio.run(eng.drain)
    return eng


def units(eng: Engine, rel: str) -> list[tuple[str, str, str]]:
    rec = eng.workspace.store.get_file(rel)
    assert rec is not None
    assert rec.parser is not None
    return eng.workspace.store.parse_units(rec.hash, rec.parser)


def test_second_workspace_parses_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    a = index(make_ws(tmp_path / "a"), cache)
    try:
        assert a.workspace.parse_runs == len(FILES)
        assert a.workspace.shared_cache is not None
        assert a.workspace.shared_cache.counts.published == len(FILES)
        assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    finally:
        a.close()
    b = index(make_ws(tmp_path / "b"), cache)
    a = Engine(tmp_path / "a", config=Config(rescan_interval=0))
    try:
        assert b.workspace.parse_runs == 0
        assert b.workspace.shared_cache is not None
        assert b.workspace.shared_cache.counts.hits == len(FILES)
        assert b.views.counts()["current"] == len(FILES)
        for rel in FILES:
            assert units(b, rel) == units(a, rel)
            assert b.workspace.freshness(RelPath(rel)).value == "current"  # type: ignore[union-attr]
    finally:
        a.close()
        b.close()


def test_without_cache_each_parses(tmp_path: Path) -> None:
    index(make_ws(tmp_path / "a"), None).close()
    b = index(make_ws(tmp_path / "b"), None)
    try:
        assert b.workspace.parse_runs == len(FILES)
        assert b.workspace.shared_cache is None
    finally:
        b.close()


def test_store_remembers_its_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    index(make_ws(tmp_path / "a"), cache).close()
    src = make_ws(tmp_path / "b")
    Engine(src, config=Config(cache_dir=str(cache))).close()  # remembered, not parsed
    b = index(src, None)
    try:
        assert b.workspace.shared_cache is not None
        assert b.workspace.parse_runs == 0
    finally:
        b.close()


def test_different_content_is_parsed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    index(make_ws(tmp_path / "a"), cache).close()
    b = index(make_ws(tmp_path / "b", {**FILES, "notes.md": "# Other\n"}), cache)
    try:
        assert b.workspace.parse_runs == 1
        assert "Other" in units(b, "notes.md")[0][2]
    finally:
        b.close()


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty", "other-hash"])
def test_corrupt_entry_is_a_miss_and_removed(tmp_path: Path, damage: str) -> None:
    cache = LocalCache(tmp_path / "cache")
    h = "ab" * 32
    cache.publish(h, "text@1", [("content.txt", "line 1", "hello world\n")], secs=0.5)
    path = cache.path(h, "text@1")
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-3])
    elif damage == "flip":
        path.write_bytes(data[:-3] + b"X" + data[-2:])
    elif damage == "header":
        path.write_bytes(b"{not json\n" + data.split(b"\n", 1)[1])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        other = cache.path("cd" * 32, "text@1")
        other.parent.mkdir(mode=0o700)
        os.rename(path, other)
        assert cache.lookup("cd" * 32, "text@1") is None
        assert not other.exists()
        return
    assert cache.lookup(h, "text@1") is None
    assert not path.exists()
    assert cache.counts.corrupt == 1


def test_entry_round_trip_and_gc(tmp_path: Path) -> None:
    cache = LocalCache(tmp_path / "cache")
    h = "ab" * 32
    units_in = [("page-0001.md", "page 1", "caf\u00e9 \udcff\n"), ("page-0002.md", "p2", "")]
    cache.publish(h, "pdf@3", units_in, secs=1.25)
    got = cache.lookup(h, "pdf@3")
    assert got is not None
    assert list(got.units) == units_in
    assert got.secs == 1.25
    assert cache.lookup(h, "pdf@4") is None  # another parser version: a miss
    assert cache.gc(3600) == (0, 0)  # just used
    old = time.time() - 10 * 86400
    os.utime(cache.path(h, "pdf@3"), (old, old))
    removed, freed = cache.gc(86400)
    assert removed == 1
    assert freed > 0
    assert cache.lookup(h, "pdf@3") is None
    assert cache.usage() == (0, 0)


def test_cache_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give the folder to another user")
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 1001, 1001)
    with pytest.raises(CacheError, match="belongs to uid 1001"):
        LocalCache(d)
    src = make_ws(tmp_path / "a")
    with pytest.raises(WorkspaceError, match="--cache"):
        Engine(src, config=Config(cache_dir=str(d)))


def test_loose_mode_is_made_private(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    os.chmod(d, 0o777)
    cacheopen.open_cache(d)
    assert d.stat().st_mode & 0o777 == 0o700


def test_renders_are_shared(tmp_path: Path) -> None:
    from swfs.find import render
    from tests.engine.test_render import many_page_pdf

    cache = tmp_path / "cache"
    pdf = many_page_pdf(3)

    def render_page(name: str) -> tuple[bytes | None, dict[str, int], list[str]]:
        src = tmp_path / name
        src.mkdir()
        (src / "doc.pdf").write_bytes(pdf)
        with Engine.open(src, config=Config(rescan_interval=0, cache_dir=str(cache))) as eng:
            eng.scan()
            renderer = render.Renderer(eng.workspace, eng.history)

            async def main() -> bytes | None:
                page = await renderer.page("doc.pdf", "page-0002.png", 120)
                assert page is not None
                return page.data

            data = trio.run(main)
            assert eng.workspace.shared_cache is not None
            made = sorted(
                os.path.relpath(os.path.join(d, n), eng.store_dir / "render")
                for d, _, names in os.walk(eng.store_dir / "render")
                for n in names
            )
            return data, eng.workspace.shared_cache.counts.as_json(), made

    first, counts, made = render_page("a")
    assert first is not None
    assert first.startswith(b"\x89PNG")
    assert counts["published"] == 2  # the layout and the page
    second, counts, made_b = render_page("b")
    assert second == first
    assert counts["hits"] == 2
    assert counts["published"] == 0
    assert made_b == made  # imported into b's own store


def test_damaged_entry_is_parsed_afresh_by_the_engine(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    index(make_ws(tmp_path / "a"), cache).close()
    entries = sorted((cache / "v1" / "parses").rglob("*.*"))
    assert len(entries) == len(FILES)
    for p in entries:
        p.write_bytes(p.read_bytes()[:-5])  # torn writes
    b = index(make_ws(tmp_path / "b"), cache)
    try:
        assert b.workspace.parse_runs == len(FILES)  # each parsed here, none from a torn entry
        assert b.workspace.shared_cache is not None
        assert b.workspace.shared_cache.counts.corrupt == len(FILES)
        assert b.views.counts()["current"] == len(FILES)
        assert "quick brown fox" in units(b, "notes.md")[0][2]
    finally:
        b.close()
    c = index(make_ws(tmp_path / "c"), cache)  # b published whole entries again
    try:
        assert c.workspace.parse_runs == 0
    finally:
        c.close()


def _publish_many(root: str, n: int) -> None:
    cache = LocalCache(Path(root))
    text = "x" * 200_000
    for i in range(n):
        cache.publish("ab" * 32, "text@1", [("content.txt", "l", f"{i % 2}{text}")], secs=0.0)


def test_concurrent_writers_never_show_a_partial_entry(tmp_path: Path) -> None:
    """Daemons publishing one parse at once while another reads it: every
    read finds a whole entry (or none), never a damaged one."""
    import multiprocessing

    root = tmp_path / "cache"
    cache = LocalCache(root)
    ctx = multiprocessing.get_context("spawn")
    writers = [ctx.Process(target=_publish_many, args=(str(root), 60)) for _ in range(3)]
    for w in writers:
        w.start()
    seen = 0
    try:
        while any(w.is_alive() for w in writers):
            got = cache.lookup("ab" * 32, "text@1")
            seen += got is not None
    finally:
        for w in writers:
            w.join(120)
    assert all(w.exitcode == 0 for w in writers)
    assert cache.counts.corrupt == 0
    assert seen > 0
    assert cache.lookup("ab" * 32, "text@1") is not None
    assert os.listdir(root / "v1" / "tmp") == []


def test_a_remembered_cache_that_cannot_be_used_is_skipped(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    src = make_ws(tmp_path / "a")
    Engine(src, config=Config(cache_dir=str(cache))).close()
    for d in sorted(cache.rglob("*"), reverse=True):
        d.rmdir()
    cache.rmdir()
    cache.write_text("not a folder")  # asked for, it is an error; remembered, a warning
    with pytest.raises(WorkspaceError, match="not a directory"):
        Engine(src, config=Config(cache_dir=str(cache)))
    b = index(src, None)
    try:
        assert b.workspace.shared_cache is None
        assert b.workspace.parse_runs == len(FILES)
    finally:
        b.close()
