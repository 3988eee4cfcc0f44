"""The daemon's layering, pinned where a behaviour test cannot see it:

* the router hands the adapter one provider per node, the native tree's
  included, and that provider wraps whatever native source the adapter holds;
* a request on a generated node that reaches a change is answered by that
  tree's provider (EROFS), and a rename between trees by the router's rule;
* every provider offers the whole interface the adapter calls;
* the adapter itself never tells native from generated;
* the control socket is background work of its own (run()/stop()), no
  longer started by the engine's background work.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest
import trio

import mountd.operations
from mountd.generated import GeneratedProvider, TabProvider
from mountd.native import NativeProvider
from mountd.nodes import Tree
from mountd.operations import Operations
from mountd.options import MountOptions
from mountd.passthrough import Passthrough
from mountd.provider import Provider, ReadOnly
from mountd.reply import awaited
from mountd.synthetic import _Index
from swfs import control
from swfs.engine import Engine
from swfs.workspace import Config


@dataclass
class Ctx:
    uid: int = 0
    gid: int = 0
    pid: int = 1
    umask: int = 0o022


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d/a.txt").write_text("alpha\n")
    with Engine.open(src, config=Config(rescan_interval=0)) as e:
        trio.run(e.drain)
        yield e


def _ops(engine: Engine) -> Operations:
    return Operations(engine, str(engine.src), str(engine.store_dir), MountOptions())


def test_the_router_gives_each_node_its_provider(engine: Engine) -> None:
    ctx: Any = Ctx()

    async def main() -> None:
        ops = _ops(engine)
        try:
            root = ops.table.root
            native = ops.router.route(root)
            assert isinstance(native, NativeProvider)
            # The layer wraps the object in the adapter's native slot, so a
            # class built on Passthrough plugs in unchanged.
            assert native.source is ops.native
            assert isinstance(ops.native, Passthrough)
            d = await awaited(ops.lookup(root.ino, b"d", ctx))
            a = await awaited(ops.lookup(d.st_ino, b"a.txt", ctx))
            assert ops.router.route(ops._node(a.st_ino)) is native
            assert ops.router.route_child(root, "d") is native
            # A generated tree's name in the mount root leads into that tree.
            parsed = ops.router.route_child(root, ".parsed")
            assert isinstance(parsed, GeneratedProvider)
            assert parsed.source is ops.router.provider(Tree.PARSED)
            p = await awaited(ops.lookup(root.ino, b".parsed", ctx))
            assert ops.router.route(ops._node(p.st_ino)) is parsed
            pd = await awaited(ops.lookup(p.st_ino, b"d", ctx))
            assert ops.router.route(ops._node(pd.st_ino)) is parsed
            assert isinstance(ops.router.route_child(root, ".tab"), TabProvider)
            # One provider per tree, each tree with its own.
            assert set(ops.router.providers) == {Tree.NATIVE, *ops.router.trees}
            assert len({id(p) for p in ops.router.providers.values()}) == len(ops.router.providers)
        finally:
            ops.close()

    trio.run(main)


class _Spy:
    """Records which provider methods a request reached."""

    def __init__(self, provider: Any, names: list[str]) -> None:
        self.calls: list[str] = []
        for name in names:
            original = getattr(provider, name)

            def wrap(*args: Any, _fn: Any = original, _name: str = name, **kw: Any) -> Any:
                self.calls.append(_name)
                return _fn(*args, **kw)

            setattr(provider, name, wrap)


def test_changes_in_a_generated_tree_reach_its_provider_as_erofs(engine: Engine) -> None:
    ctx: Any = Ctx()
    changes = ["setattr", "mkdir", "create", "unlink", "rmdir", "setxattr", "open", "rename"]

    async def code(coro: Any) -> int:
        try:
            await coro
        except pyfuse3.FUSEError as exc:
            return exc.errno
        return 0

    async def main() -> None:
        ops = _ops(engine)
        try:
            root = ops.table.root.ino
            p = await awaited(ops.lookup(root, b".parsed", ctx))
            pd = await awaited(ops.lookup(p.st_ino, b"d", ctx))
            view = await awaited(ops.lookup(pd.st_ino, b"a.txt", ctx))
            unit = await awaited(ops.lookup(view.st_ino, b"content.txt", ctx))
            spy = _Spy(ops.router.route(ops._node(unit.st_ino)), changes)
            attr = pyfuse3.EntryAttributes()
            fields: Any = SimpleNamespace(
                update_size=True,
                update_mode=False,
                update_uid=False,
                update_gid=False,
                update_atime=False,
                update_mtime=False,
            )
            assert await code(ops.setattr(unit.st_ino, attr, fields, None, ctx)) == errno.EROFS
            assert await code(ops.mkdir(view.st_ino, b"x", 0o755, ctx)) == errno.EROFS
            assert await code(ops.create(view.st_ino, b"x", 0o644, os.O_WRONLY, ctx)) == (
                errno.EROFS
            )
            assert await code(ops.unlink(view.st_ino, b"content.txt", ctx)) == errno.EROFS
            assert await code(ops.rmdir(pd.st_ino, b"a.txt", ctx)) == errno.EROFS
            assert await code(ops.setxattr(unit.st_ino, b"user.x", b"1", ctx)) == errno.EROFS
            assert await code(ops.open(unit.st_ino, os.O_WRONLY, ctx)) == errno.EROFS
            assert await code(ops.open(unit.st_ino, os.O_RDONLY | os.O_TRUNC, ctx)) == (errno.EROFS)
            assert await code(
                ops.rename(view.st_ino, b"content.txt", view.st_ino, b"y", 0, ctx)
            ) == (errno.EROFS)
            # Each request was answered by the provider, not by the adapter.
            assert sorted(set(spy.calls)) == sorted(changes)
            # Between trees the router's rule answers: EROFS into a read-only
            # tree, EXDEV into one that takes writes of its own (mv copies).
            d = await awaited(ops.lookup(root, b"d", ctx))
            assert await code(ops.rename(d.st_ino, b"a.txt", view.st_ino, b"z", 0, ctx)) == (
                errno.EROFS
            )
            tab = await awaited(ops.lookup(root, b".tab", ctx))
            assert await code(ops.rename(d.st_ino, b"a.txt", tab.st_ino, b"z", 0, ctx)) == (
                errno.EXDEV
            )
            a = await awaited(ops.lookup(d.st_ino, b"a.txt", ctx))
            assert await code(ops.link(a.st_ino, view.st_ino, b"l", ctx)) == errno.EROFS
            # Reading through the same provider still works, and the native file
            # was never touched.
            fi = await awaited(ops.open(unit.st_ino, os.O_RDONLY, ctx))
            assert b"alpha" in await ops.read(fi.fh, 0, 1 << 16)
            await awaited(ops.release(fi.fh))
            assert (engine.src / "d/a.txt").read_text() == "alpha\n"
        finally:
            ops.close()

    trio.run(main)


# The requests a provider may answer at once or with an awaitable
# (mountd.reply): a plain method or an ``async def`` alike.
ANSWERS = {"attr", "lookup", "open", "create", "getxattr", "write", "flush", "release", "lseek"}


def _interface() -> set[str]:
    methods = {n for n in dir(Provider) if not n.startswith("_") and n not in dir(object)}
    return methods | set(Provider.__annotations__)


@pytest.mark.parametrize("cls", [NativeProvider, GeneratedProvider, TabProvider])
def test_every_provider_offers_the_whole_interface(cls: type) -> None:
    missing = {n for n in _interface() if not hasattr(cls, n)}
    assert not missing, f"{cls.__name__} lacks {sorted(missing)}"
    for name in _interface() - {"evidence", "rename_across"} - ANSWERS:
        ours, theirs = getattr(cls, name), getattr(Provider, name)
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name
    # The generated trees change nothing unless they say so.
    assert issubclass(GeneratedProvider, ReadOnly)
    assert not issubclass(NativeProvider, ReadOnly)


def test_the_adapter_never_tells_native_from_generated() -> None:
    """Only the router does (mountd.router): operations.py asks it for the
    provider of a node and calls the provider."""
    source = inspect.getsource(mountd.operations)
    assert not re.search(r"\bnode\.native\b|\bparent\.native\b|\.node\.native\b", source)
    assert not re.search(r"\bis (not )?Tree\.", source)
    assert "NativeOpen" not in source
    assert "_synthetic_attr" not in source
    assert source.count("self.native = ") == 1  # the one construction point


def test_the_view_index_locates_paths_for_every_tree() -> None:
    idx = _Index(["d/a.pdf", "b.xlsx"])
    assert idx.locate("d/a.pdf") == ("d/a.pdf", None)
    assert idx.locate("d/a.pdf/page-0001.md") == ("d/a.pdf", "page-0001.md")
    assert idx.locate("d") is None
    assert idx.knows("d")
    assert idx.locate("d/nope") is None
    assert not idx.knows("d/nope")
    assert not idx.knows("x/y/z")


def test_the_control_server_is_background_work_of_its_own(engine: Engine) -> None:
    sock = engine.store_dir / control.SOCKET_NAME

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run_background)
            # The engine's own background work no longer opens the socket.
            assert not sock.exists()
            server = engine.control_server()
            ended = trio.Event()

            async def serve(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                await server.run(task_status=task_status)
                ended.set()

            await nursery.start(serve)
            assert sock.exists()
            reply = await trio.to_thread.run_sync(
                lambda: control.request(engine.store_dir, "ping", io_timeout=60)
            )
            assert reply["pid"] == os.getpid()
            assert reply["src"] == str(engine.src)
            with pytest.raises(control.ControlError, match="unknown operation"):
                await trio.to_thread.run_sync(
                    lambda: control.request(engine.store_dir, "nonsense", io_timeout=60)
                )
            server.stop()
            with trio.fail_after(60):
                await ended.wait()
            assert not sock.exists()  # removed by the server as it stops
            with pytest.raises(control.ControlUnavailable):
                control.request(engine.store_dir, "ping", io_timeout=5)
            nursery.cancel_scope.cancel()

    trio.run(main)
