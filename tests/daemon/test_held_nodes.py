"""Files a rename replaced, held by their nodes (``mountd.nodes.Held``):
let go at the node's last FORGET, after ``HOLD_SECONDS``, or the oldest
first past ``HOLD_MAX``; never a descriptor leaked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mountd import nodes
from mountd.nodes import Held, InodeTable, Node


@pytest.fixture
def file(tmp_path: Path) -> Path:
    p = tmp_path / "f"
    p.write_bytes(b"old")
    return p


def _open(path: Path) -> int:
    return os.open(path, os.O_PATH | os.O_CLOEXEC)


def _is_open(fd: int, path: Path) -> bool:
    """``fd`` is open on ``path`` (a number closed may be handed out again)."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _replaced(t: InodeTable, name: str, key: int) -> Node:
    """A node the kernel holds whose name a rename gave to another file."""
    node = t.native(t.root, name, ("dev", key))
    t.remember(node)
    # A rename onto ``name`` of a file the kernel never looked up.
    t.move_link((t.root.ino, f"{name}.tmp"), (t.root.ino, name))
    assert t.path(node) is None
    return node


def test_held_until_the_last_forget(file: Path) -> None:
    t = InodeTable(("dev", 1))
    node = _replaced(t, "a", 2)
    fd = _open(file)
    t.hold(node, Held(fd, os.fstat(fd), "a", None))
    assert t.held(node) is not None
    t.forget(node.ino, 1)
    assert t.get(node.ino) is None
    assert not _is_open(fd, file)


def test_held_for_a_while_only(file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = InodeTable(("dev", 1))
    node = _replaced(t, "a", 2)
    fd = _open(file)
    now = [1000.0]
    monkeypatch.setattr(nodes.time, "monotonic", lambda: now[0])
    t.hold(node, Held(fd, os.fstat(fd), "a", None))
    now[0] += nodes.HOLD_SECONDS / 2
    assert t.held(node) is not None
    now[0] += nodes.HOLD_SECONDS
    assert t.held(node) is None
    assert not _is_open(fd, file)
    assert t.get(node.ino) is node  # the node lives on while the kernel holds it


def test_at_most_hold_max_oldest_let_go_first(file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "HOLD_MAX", 3)
    t = InodeTable(("dev", 1))
    held = []
    for i in range(5):
        node = _replaced(t, f"f{i}", 10 + i)
        other = file.with_name(f"f{i}")
        other.write_bytes(b"old")
        fd = _open(other)
        t.hold(node, Held(fd, os.fstat(fd), f"f{i}", None))
        held.append((node, fd, other))
    assert [t.held(n) is not None for n, _, _ in held] == [False, False, True, True, True]
    assert [_is_open(fd, p) for _, fd, p in held] == [False, False, True, True, True]
    for n, _, _ in held:
        t.let_go(n)
    assert not any(_is_open(fd, p) for _, fd, p in held)
