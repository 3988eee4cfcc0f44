"""No test patches a private name.

A test that replaces ``module._helper`` or ``obj._state`` holds the code to
its insides: the next refactor breaks the test, or worse, the test keeps
passing against a name nothing reads any more.  A test configures the code
through what it offers instead: a parameter, a constructor argument, a
public module setting or an environment variable.

Found with ``ast`` in every module under ``tests/``: ``monkeypatch.setattr``
and ``delattr`` (``(obj, "name")`` and ``("module.name")`` alike), the
builtin ``setattr``/``delattr``, ``mock.patch("module.name")``,
``mock.patch.object(obj, "name")`` and ``mock.patch.multiple``.  A name
given as a variable counts when the module gives it a value in sight: a
``pytest.mark.parametrize`` argument, a ``for`` over a literal, a plain
assignment.  Private: a leading underscore, not a dunder.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# Patches of private names that remain, as "path:name", each with why.
# Shrink only: an entry whose patch is gone fails the test too.
ALLOWED: dict[str, str] = {}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a literal (a string, or a list, tuple or set
    of them; a dict's keys)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [s for elt in node.elts for s in _strings(elt)]
    if isinstance(node, ast.Dict):
        return [s for key in node.keys if key is not None for s in _strings(key)]
    return []


def _bound_strings(tree: ast.AST) -> dict[str, set[str]]:
    """Strings each variable of the module may hold: parametrize arguments,
    ``for`` targets over literals, plain assignments."""
    bound: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("mark.parametrize"):
            if len(node.args) < 2 or not isinstance(node.args[0], ast.Constant):
                continue
            names = [n.strip() for n in str(node.args[0].value).split(",") if n.strip()]
            values = node.args[1].elts if isinstance(node.args[1], ast.List | ast.Tuple) else []
            for value in values:
                parts = (
                    value.elts
                    if len(names) > 1 and isinstance(value, ast.Tuple | ast.List)
                    else [value]
                )
                for name, part in zip(names, parts, strict=False):
                    bound[name].update(_strings(part))
        elif isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
            bound[node.target.id].update(_strings(node.iter))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id].update(_strings(node.value))
    return bound


def _names(node: ast.AST, bound: dict[str, set[str]], *, dotted: bool = False) -> list[str]:
    """The attribute names ``node`` may give (the last part of a dotted
    target when ``dotted``)."""
    if isinstance(node, ast.Name):
        found = sorted(bound.get(node.id, ()))
    else:
        found = _strings(node) if isinstance(node, ast.Constant) else []
    return [s.rsplit(".", 1)[-1] for s in found] if dotted else found


def _targets(call: ast.Call, bound: dict[str, set[str]]) -> list[str]:
    """The names ``call`` patches, when it is a patch."""
    func = ast.unparse(call.func)
    args = call.args
    last = func.rsplit(".", 1)[-1]
    if last in ("setattr", "delattr") and args:
        if isinstance(args[0], ast.Constant) and isinstance(args[0].value, str):
            return _names(args[0], bound, dotted=True)  # monkeypatch.setattr("mod.name", v)
        return _names(args[1], bound) if len(args) > 1 else []
    if last == "patch" and args:  # mock.patch("mod.name"), also as a decorator
        return _names(args[0], bound, dotted=True)
    if func.endswith("patch.object") and len(args) > 1:
        return _names(args[1], bound)
    if func.endswith("patch.multiple"):
        return [k.arg for k in call.keywords if k.arg is not None]
    return []


def private_patches(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every private name ``path`` patches."""
    tree = ast.parse(path.read_text(), str(path))
    bound = _bound_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found.extend((node.lineno, name) for name in _targets(node, bound) if private(name))
    return sorted(found)


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_test_patches_a_private_name() -> None:
    found = []
    for path in _test_modules():
        rel = path.relative_to(ROOT).as_posix()
        for line, name in private_patches(path):
            if f"{rel}:{name}" not in ALLOWED:
                found.append(f"{rel}:{line}: {name}")
    assert not found, (
        "tests patching private names (configure the code through a parameter, a "
        "constructor argument, a public setting or an environment variable):\n" + "\n".join(found)
    )


def test_allowed_still_exist() -> None:
    """The allow-list only shrinks: an entry whose patch is gone leaves it."""
    gone = []
    for entry in ALLOWED:
        rel, _, name = entry.partition(":")
        path = ROOT / rel
        if not path.exists() or name not in [n for _, n in private_patches(path)]:
            gone.append(entry)
    assert not gone, "remove from the allow-list: " + ", ".join(gone)


def test_private_patches_are_found(tmp_path: Path) -> None:
    """The check itself, on a planted module."""
    planted = tmp_path / "test_planted.py"
    planted.write_text(
        "import os\n"
        "from unittest import mock\n"
        "from unittest.mock import patch\n"
        "import pytest\n"
        "from swfs.views import parsework\n"
        "def test_a(monkeypatch):\n"
        "    monkeypatch.setattr(parsework, '_budget', None)\n"
        "    monkeypatch.setattr('swfs.views.parsework._budget', None)\n"
        "    monkeypatch.delattr(parsework, '_children')\n"
        "    monkeypatch.delattr('swfs.views.parsework._preloaded')\n"
        "    setattr(parsework, '_children', None)\n"
        "    with mock.patch('swfs.views.rayfarm._line'):\n"
        "        pass\n"
        "    with mock.patch.object(parsework, '_snapshot'), patch('os._exit'):\n"
        "        pass\n"
        "    with mock.patch.multiple(parsework, _moved=None, OK='ok'):\n"
        "        pass\n"
        "@mock.patch('swfs.views.parsework._named')\n"
        "@pytest.mark.parametrize('limit', ['_HIDDEN', 'PUBLIC'])\n"
        "def test_b(mocked, limit, monkeypatch):\n"
        "    monkeypatch.setattr(parsework, limit, 1)\n"
        "    for name in ('_one', 'two'):\n"
        "        monkeypatch.setattr(parsework, name, 1)\n"
        "def test_public(monkeypatch):\n"
        "    monkeypatch.setattr(parsework, 'SNAPSHOT_LIMIT', 1)\n"
        "    monkeypatch.setattr(parsework, '__doc__', '_not a name')\n"
        "    monkeypatch.setattr('swfs.views.parsework.SNAPSHOT_LIMIT', '_value')\n"
        "    monkeypatch.setattr(os, 'environ', {})\n"
        "    monkeypatch.setenv('_SWFS_X', '1')\n"
        "    setattr(parsework, 'RANGE_PAGES', '_x')\n"
        "    mock.patch.object(parsework, 'OK', '_x')\n"
    )
    assert private_patches(planted) == [
        (7, "_budget"),
        (8, "_budget"),
        (9, "_children"),
        (10, "_preloaded"),
        (11, "_children"),
        (12, "_line"),
        (14, "_exit"),
        (14, "_snapshot"),
        (16, "_moved"),
        (18, "_named"),
        (21, "_HIDDEN"),
        (23, "_one"),
    ]
