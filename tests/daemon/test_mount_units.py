"""The daemon's parts without a kernel: inode table, providers, the adapter
called directly with a fake request context."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyfuse3
import pytest
import trio

from mountd import synthetic
from mountd.nodes import InodeTable, Tree
from mountd.operations import Operations, handler
from mountd.options import MountOptions
from mountd.reply import awaited
from mountd.synthetic import ON_LOOP_UNIT, Generation, ParsedTree, VersionsTree, version_name
from swfs.api import Cause, Hash, RelPath, UnitTooLarge, Version
from swfs.engine import Engine
from swfs.workspace import Config
from tests.enginewrap import Watched

T = TypeVar("T")


@dataclass
class Ctx:
    uid: int = 0
    gid: int = 0
    pid: int = 1
    umask: int = 0o022


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return trio.run(fn)


# -- inode table


def test_hard_links_share_a_node_and_keep_a_path() -> None:
    t = InodeTable(("dev", 1))
    d = t.native(t.root, "d", ("dev", 2))
    a = t.native(d, "a", ("dev", 3))
    b = t.native(t.root, "b", ("dev", 3))
    assert a is b
    assert list(t.paths(a)) == ["b", "d/a"]
    t.remember(a)
    t.remove_link((t.root.ino, "b"))
    assert t.path(a) == "d/a"


def test_directory_rename_moves_everything_below() -> None:
    t = InodeTable(("dev", 1))
    d = t.native(t.root, "d", ("dev", 2))
    f = t.native(t.native(d, "e", ("dev", 3)), "f", ("dev", 4))
    t.remember(f)
    t.move_link((t.root.ino, "d"), (t.root.ino, "z"))
    assert t.path(f) == "z/e/f"
    assert t.find_native("z/e/f") is f
    assert t.find_native("d/e/f") is None


def test_exchange_and_forget() -> None:
    t = InodeTable(("dev", 1))
    a = t.native(t.root, "a", ("dev", 2))
    b = t.native(t.root, "b", ("dev", 3))
    t.remember(a)
    t.remember(b)
    t.exchange_links((t.root.ino, "a"), (t.root.ino, "b"))
    assert (t.path(a), t.path(b)) == ("b", "a")
    t.forget(a.ino, 1)
    assert t.get(a.ino) is None
    assert t.child(t.root, "b") is None
    assert t.get(b.ino) is b


def test_a_parent_lives_while_a_child_does() -> None:
    t = InodeTable(("dev", 1))
    d = t.native(t.root, "d", ("dev", 2))
    f = t.native(d, "f", ("dev", 3))
    t.remember(d)
    t.remember(f)
    t.forget(d.ino, 1)
    assert t.get(d.ino) is d
    assert t.path(f) == "d/f"
    t.forget(f.ino, 1)
    assert t.get(d.ino) is None
    assert len(t) == 1


def test_synthetic_nodes_are_stable_per_path() -> None:
    t = InodeTable(("dev", 1))
    n = t.synthetic(Tree.PARSED, "a.txt/content.txt")
    assert t.synthetic(Tree.PARSED, "a.txt/content.txt") is n
    assert t.synthetic(Tree.REVIEW, "a.txt/content.txt") is not n
    assert t.synthetic_below(Tree.PARSED, "a.txt") == [n]


# -- providers


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Any]:
    """The real engine over a small tree, indexed, with a snapshot "start";
    hook calls are logged in ``engine.calls``."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d/a.txt").write_text("alpha\n")
    (src / "secret.md").write_text("s\n")
    (src / "secret.md").chmod(0o640)
    (src / "bin.dat").write_bytes(b"\0\1")
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        e.history.snapshot("start")
        yield Watched(e)


def test_parsed_tree(engine: Any) -> None:
    tree = ParsedTree(engine, Generation(), MountOptions())

    async def main() -> None:
        assert await tree.children("") == ["d", "secret.md"]
        assert await tree.children("d") == ["a.txt"]
        assert await tree.children("d/a.txt") == ["content.txt"]
        unit = await tree.entry("d/a.txt/content.txt")
        assert unit is not None
        assert unit.data is not None
        assert unit.data.endswith(b"alpha\n")
        assert unit.size == len(unit.data)
        assert unit.xattrs["locator"] == "d/a.txt#content"
        secret = await tree.entry("secret.md/content.txt")
        assert secret is not None
        assert stat.S_IMODE(secret.mode) == 0o440
        sdir = await tree.entry("secret.md")
        assert sdir is not None
        assert stat.S_IMODE(sdir.mode) == 0o550
        assert await tree.entry("bin.dat") is None
        assert await tree.entry("nope") is None

    run(main)


def test_versions_tree_names(engine: Any) -> None:
    v = Version(7, Hash("ab" * 32), 0.0, Cause.WRITE, True)
    assert version_name("x/report.pdf", v) == "0007-abababababababab.pdf"
    assert version_name("Makefile", v) == "0007-abababababababab"
    tree = VersionsTree(engine, Generation(), MountOptions())

    async def main() -> str | None:
        assert await tree.children("") == ["@snapshots", "bin.dat", "d", "secret.md"]
        assert await tree.children("@snapshots/start/d") == ["a.txt"]
        (name,) = await tree.children("d/a.txt")
        e = await tree.entry(f"d/a.txt/{name}")
        assert e is not None
        return e.blob

    blob = run(main)
    assert blob is not None
    # A chunked blob's path is a reference: the engine reassembles it on open.
    fd = engine.workspace.open_blob(blob)
    try:
        assert os.read(fd, 100) == b"alpha\n"
    finally:
        os.close(fd)


def test_unknown_paths_are_owner_only(engine: Any) -> None:
    tree = ParsedTree(engine, Generation(), MountOptions())
    acc = tree.access("never/seen")
    assert acc.mode == 0o400 & engine.evidence.access(RelPath("")).mode  # type: ignore[union-attr]


# -- the adapter


def test_handler_turns_everything_into_an_errno() -> None:
    class Boom:
        @handler
        async def oserror(self) -> None:
            raise FileNotFoundError(errno.ENOENT, "gone")

        @handler
        async def bug(self) -> None:
            raise KeyError("bug")

        @handler
        async def nosys(self) -> None:
            raise OSError(errno.ENOSYS, "no")

    async def code(fn: Callable[[], Awaitable[Any]]) -> int:
        try:
            await fn()
        except pyfuse3.FUSEError as exc:
            return exc.errno
        return 0

    b = Boom()
    assert run(lambda: code(b.oserror)) == errno.ENOENT
    assert run(lambda: code(b.bug)) == errno.EIO
    assert run(lambda: code(b.nosys)) == errno.EOPNOTSUPP


def test_operations_without_a_kernel(engine: Any) -> None:
    ctx: Any = Ctx()

    async def main() -> None:
        ops = Operations(engine, str(engine.src), str(engine.store_dir), MountOptions())
        try:
            root = pyfuse3.ROOT_INODE
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await awaited(ops.lookup(root, b".swfs", ctx))
            assert exc.value.errno == errno.ENOENT
            d = await awaited(ops.lookup(root, b"d", ctx))
            a = await awaited(ops.lookup(d.st_ino, b"a.txt", ctx))
            assert a.st_size == 6
            fi = await awaited(ops.open(a.st_ino, os.O_RDWR, ctx))
            assert await ops.read(fi.fh, 0, 100) == b"alpha\n"
            assert await awaited(ops.write(fi.fh, 0, b"ALPHA")) == 5
            await awaited(ops.flush(fi.fh))
            await awaited(ops.release(fi.fh))
            assert (engine.src / "d/a.txt").read_bytes() == b"ALPHA\n"
            await trio.to_thread.run_sync(engine.workspace.writes.drain)  # the queued record
            assert engine.calls[-2:] == [["preserve", "d/a.txt"], ["record_write", "d/a.txt"]]
            fi, attr = await awaited(ops.create(d.st_ino, b"n.txt", 0o100666, os.O_WRONLY, ctx))
            assert stat.S_IMODE(attr.st_mode) == 0o644
            await awaited(ops.release(fi.fh))
            parsed = await awaited(ops.lookup(root, b".parsed", ctx))
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await ops.mkdir(parsed.st_ino, b"x", 0o755, ctx)
            assert exc.value.errno == errno.EROFS
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await awaited(ops.create(root, b".review", 0o100644, os.O_WRONLY, ctx))
            assert exc.value.errno == errno.EEXIST
            value = await awaited(ops.getxattr(a.st_ino, b"user.sw.versions", ctx))
            assert value == b"2"
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await awaited(ops.getxattr(a.st_ino, b"user.sw.nothing", ctx))
            assert exc.value.errno == errno.ENODATA
            await ops.unlink(d.st_ino, b"a.txt", ctx)
            assert not (engine.src / "d/a.txt").exists()
            engine.workspace.writes.drain()  # recorded after the reply (swfs.history.recorder)
            assert [c[:2] for c in engine.calls[-2:]] == [
                ["keep_held", "d/a.txt"],
                ["record_unlink", "d/a.txt"],
            ]
        finally:
            ops.close()

    run(main)


def test_fallocate_seek_and_tmpfile_without_a_kernel(engine: Any) -> None:
    """FALLOCATE, LSEEK and TMPFILE as the patched pyfuse3 hands them over:
    a punched hole is kept and recorded like a write, SEEK_HOLE answers the
    backing file's holes (a generated file's: its end), an O_TMPFILE file
    is recorded only once a LINK names it."""
    from swfs.store.fsutil import FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE

    ctx: Any = Ctx()
    big = os.urandom(2 * 1024 * 1024)
    (engine.src / "big.bin").write_bytes(big)
    engine.workspace.check_file(RelPath("big.bin"))

    async def main() -> None:
        ops = Operations(engine, str(engine.src), str(engine.store_dir), MountOptions())
        try:
            root = pyfuse3.ROOT_INODE
            b = await awaited(ops.lookup(root, b"big.bin", ctx))
            fi = await awaited(ops.open(b.st_ino, os.O_RDWR, ctx))
            await ops.fallocate(fi.fh, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1 << 20)
            assert engine.calls[-1] == ["preserve", "big.bin"]
            assert await awaited(ops.lseek(fi.fh, 0, os.SEEK_DATA)) == 1 << 20
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await awaited(ops.lseek(fi.fh, len(big), os.SEEK_DATA))
            assert exc.value.errno == errno.ENXIO
            await awaited(ops.flush(fi.fh))
            await awaited(ops.release(fi.fh))
            await trio.to_thread.run_sync(engine.workspace.writes.drain)  # the queued record
            assert engine.calls[-1] == ["record_write", "big.bin"]

            d = await awaited(ops.lookup(root, b"d", ctx))
            fi, attr = await ops.tmpfile(d.st_ino, 0o100640, os.O_RDWR, ctx)
            assert attr.st_nlink == 0
            assert await awaited(ops.write(fi.fh, 0, b"no name yet\n")) == 12
            linked = await ops.link(attr.st_ino, d.st_ino, b"t.txt", ctx)
            assert linked.st_ino == attr.st_ino
            await awaited(ops.flush(fi.fh))
            await awaited(ops.release(fi.fh))
            assert (engine.src / "d/t.txt").read_bytes() == b"no name yet\n"
            await trio.to_thread.run_sync(engine.workspace.writes.drain)
            assert engine.calls[-1] == ["record_write", "d/t.txt"]
            fi, attr = await ops.tmpfile(d.st_ino, 0o100600, os.O_WRONLY, ctx)
            await awaited(ops.write(fi.fh, 0, b"gone\n"))
            await awaited(ops.release(fi.fh))
            assert sorted(os.listdir(engine.src / "d")) == ["a.txt", "t.txt"]

            parsed = await awaited(ops.lookup(root, b".parsed", ctx))
            with pytest.raises(pyfuse3.FUSEError) as exc:
                await ops.tmpfile(parsed.st_ino, 0o100600, os.O_WRONLY, ctx)
            assert exc.value.errno == errno.EROFS
        finally:
            ops.close()

    run(main)


def test_a_view_is_loaded_once_per_listing(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ls -l`` of a view stats every unit: the view's state and its names
    are asked once, each unit on its own."""
    tree = ParsedTree(engine, Generation(), MountOptions())
    loads: list[str] = []
    for method in ("view_state", "view_unit_names", "parsed_view"):
        real = getattr(engine.views, method)

        def counting(
            arg: Any, *rest: Any, _real: Any = real, _name: str = method, **kw: Any
        ) -> Any:
            loads.append(f"{_name} {getattr(arg, 'rel', arg)}")
            return _real(arg, *rest, **kw)

        monkeypatch.setattr(engine.views, method, counting)

    async def main() -> None:
        # Listing .parsed itself loads no view at all.
        for name in await tree.children(""):
            await tree.entry(name, wait=False)
        assert loads == []
        for name in await tree.children("d/a.txt"):
            await tree.entry(f"d/a.txt/{name}", wait=False)
            await tree.xattrs(f"d/a.txt/{name}")
        assert loads == ["view_state d/a.txt", "view_unit_names d/a.txt"]

    run(main)


def test_opening_one_unit_asks_for_that_unit_only(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup, getattr and open of one unit (a grep opening page 23,999)
    asks for the view's state and that unit: never for every unit."""
    tree = ParsedTree(engine, Generation(), MountOptions())
    asked: list[str] = []
    for method in ("view_state", "view_unit_names", "view_unit", "parsed_view"):
        real = getattr(engine.views, method)

        def counting(*args: Any, _real: Any = real, _name: str = method, **kw: Any) -> Any:
            asked.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(engine.views, method, counting)

    async def main() -> None:
        for _ in range(3):  # lookup, getattr, open
            unit = await tree.entry("d/a.txt/content.txt")
            assert unit is not None
            assert unit.data is not None
            assert unit.data.endswith(b"alpha\n")
        assert asked == ["view_state", "view_unit"]
        assert await tree.entry("d/a.txt/page-0001.md") is None

    run(main)


def test_small_units_are_read_on_the_loop_and_large_ones_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit's few store lookups cost less than a trip to a worker thread,
    so a small one is read on the loop; one past ON_LOOP_UNIT bytes is read
    in a thread, and both come back whole."""
    src = tmp_path / "src"
    src.mkdir()
    small = "small unit\n"
    large = "".join(f"line {i} of a long unit\n" for i in range(ON_LOOP_UNIT // 10))
    (src / "small.txt").write_text(small)
    (src / "large.txt").write_text(large)
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        engine = Watched(e)
        tree = ParsedTree(engine, Generation(), MountOptions())
        where: dict[str, list[str]] = {}
        real = engine.views.view_unit

        def watching(view: Any, name: str, **kw: Any) -> Any:
            try:
                return real(view, name, **kw)
            except UnitTooLarge:
                where.setdefault(view.rel, []).append("refused")
                raise
            finally:
                thread = threading.current_thread() is threading.main_thread()
                where.setdefault(view.rel, []).append("loop" if thread else "thread")

        monkeypatch.setattr(engine.views, "view_unit", watching)

        async def main() -> None:
            for rel, text in (("small.txt", small), ("large.txt", large)):
                unit = await tree.entry(f"{rel}/content.txt")
                assert unit is not None
                assert unit.data is not None
                assert unit.data.decode().endswith(text)
                assert unit.size == len(unit.data)

        run(main)
        assert where == {"small.txt": ["loop"], "large.txt": ["refused", "loop", "thread"]}


def test_a_view_with_many_units_is_listed_in_a_thread(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unit names come from the loop while the parse record counts at most
    ON_LOOP_NAMES units; past that the store refuses there (before reading
    any name) and the listing is read in a thread, whole."""
    where: list[str] = []
    real = engine.views.view_unit_names

    def watching(view: Any, **kw: Any) -> Any:
        on_loop = threading.current_thread() is threading.main_thread()
        try:
            return real(view, **kw)
        except UnitTooLarge:
            where.append("refused")
            raise
        finally:
            where.append("loop" if on_loop else "thread")

    monkeypatch.setattr(engine.views, "view_unit_names", watching)

    async def listing() -> list[str]:
        tree = ParsedTree(engine, Generation(), MountOptions())
        return list(await tree.children("d/a.txt"))

    assert run(listing) == ["content.txt"]
    assert where == ["loop"]
    where.clear()
    monkeypatch.setattr(synthetic, "ON_LOOP_NAMES", 0)  # one unit is too many now
    assert run(listing) == ["content.txt"]
    assert where == ["refused", "loop", "thread"]


def test_lookups_do_not_rebuild_listings_on_every_change(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = Generation()
    tree = ParsedTree(engine, gen, MountOptions())
    builds: list[int] = []
    real = engine.views.parsed_paths

    def counting() -> Any:
        builds.append(1)
        return real()

    monkeypatch.setattr(engine.views, "parsed_paths", counting)

    async def main() -> None:
        for _ in range(50):
            gen.bump("elsewhere")  # a parse finished somewhere
            assert await tree.entry("d/a.txt/content.txt", wait=False) is not None
        assert len(builds) < 5
        # ... but a name the cached listing lacks is looked up in a fresh one.
        (engine.src / "new.txt").write_text("n\n")
        engine.workspace.record_write(RelPath("new.txt"))
        gen.bump("new.txt")
        assert await tree.entry("new.txt", wait=False) is not None

    run(main)


def test_synthetic_below_walks_only_the_subtree() -> None:
    t = InodeTable(("dev", 1))
    a = t.synthetic(Tree.VERSIONS, "d/a.txt")
    v = t.synthetic(Tree.VERSIONS, "d/a.txt/0001-x.txt")
    for parent in ("d", "d/e", "d/e/f.txt"):  # the kernel looks up parents first
        t.synthetic(Tree.VERSIONS, parent)
    deep = t.synthetic(Tree.VERSIONS, "d/e/f.txt/0001-y.txt")
    t.synthetic(Tree.VERSIONS, "other/0001-z.txt")
    assert set(t.synthetic_below(Tree.VERSIONS, "d/a.txt")) == {a, v}
    assert deep in t.synthetic_below(Tree.VERSIONS, "d")
    t.remember(v)
    t.forget(v.ino, 1)
    assert t.synthetic_below(Tree.VERSIONS, "d/a.txt") == [a]
