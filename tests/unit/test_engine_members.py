"""The engine is small: it holds its parts (``workspace``, ``history``,
``evidence``, ``views``, ``reviews``, ``search_index``) and runs their background work, with at most
MAX_MEMBERS public members of its own, inherited ones counted (issue #39).
A method added to ``Engine`` for one caller belongs on the part it is about."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

from swfs.engine import Engine

MAX_MEMBERS = 25


def public_members(cls: type) -> set[str]:
    """Public names of ``cls`` and its bases (methods, properties, class
    attributes) and the attributes its ``__init__`` sets on ``self``."""
    names = {n for base in cls.__mro__ if base is not object for n in vars(base)}
    for base in cls.__mro__:
        init = vars(base).get("__init__")
        if init is None or base is object:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return {n for n in names if not n.startswith("_")}


def test_engine_has_at_most_25_public_members() -> None:
    members = public_members(Engine)
    assert len(members) <= MAX_MEMBERS, (
        f"Engine has {len(members)} public members (at most {MAX_MEMBERS}): {sorted(members)}"
    )


def test_members_counted_include_inherited_and_instance_attributes() -> None:
    class Base:
        def inherited(self) -> None: ...

    class Sub(Base):
        def __init__(self) -> None:
            self.part = 1
            self._private = 2

        @property
        def prop(self) -> int:
            return 0

    assert public_members(Sub) == {"inherited", "part", "prop"}


def test_engine_holds_its_parts() -> None:
    parts = {"workspace", "history", "evidence", "views", "reviews", "search_index"}
    assert set(public_members(Engine)) >= parts
    assert Path(inspect.getfile(Engine)).name == "engine.py"
    assert Engine.__mro__ == (Engine, object), "the engine holds its parts, it inherits none"
