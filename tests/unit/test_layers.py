"""The import structure: layers run one way; ``swfs`` and ``mountd`` have no
import cycle.

``cli`` -> ``mountd`` -> ``swfs`` -> ``parsers``: no import runs upward.  Inside
``swfs``, neither its packages (``store``, ``views``, ``history`` ...; each
top-level module counts as one of its own) nor the modules inside one package
import each other in a loop; nor do the modules of ``mountd``.  Every import
counts: at module level, under ``if TYPE_CHECKING:`` and inside a function.

No module calls into another's private names: ``other._name`` is fine only
for ``self``/``cls``/``super()`` and for a name the module defines itself.

Read from the source with ``ast``, so nothing is imported.  ``python -m
tests.unit.test_layers`` prints the graph between packages.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("cli", "mountd", "swfs", "parsers")  # each may import only those after it

# Imports that still close a cycle, each with why it is there.  Shrink only:
# an entry whose import is gone fails the test too.
ALLOWED: dict[tuple[str, str], str] = {}

# Reaches into another module's private names that remain, as "path:attribute".
PRIVATE_ALLOWED: dict[str, str] = {}
PRIVATE_CHECKED = ("cli", "mountd", "swfs")  # parsers reach only into openpyxl's

Graph = Mapping[str, Iterable[str]]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the four layers by dotted name (a package by its own)."""
    found: dict[str, Path] = {}
    for top in LAYERS:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


@functools.cache
def project_imports() -> dict[str, dict[str, int]]:
    return imports(modules())


def imports(found: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """Who imports whom, with the line of the first import: ``{a: {b: line}}``."""

    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in found.items():
        edges: dict[str, int] = {}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in found else resolve(base))
            for target in targets:
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def part(name: str) -> str:
    """The unit the package graph is drawn between: a layer, or inside ``swfs``
    a package (``swfs.store``) or a top-level module (``swfs.engine``)."""
    top, *rest = name.split(".")
    if top != "swfs" or not rest:
        return top
    return f"swfs.{rest[0]}"


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                members.append(top)
                if top == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    nodes = set(graph) | {n for targets in graph.values() for n in targets}
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, 10 * len(nodes) + 100))
    try:
        for node in sorted(nodes):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(old_limit)
    return sorted(found)


def loop_in(graph: Graph, members: list[str]) -> list[str]:
    """One closed path through a strongly connected set, to show in a failure."""
    inside = set(members)
    path = [members[0]]
    seen = {members[0]: 0}
    while True:
        nxt = min(n for n in graph.get(path[-1], ()) if n in inside)
        if nxt in seen:
            return path[seen[nxt] :] + [nxt]
        seen[nxt] = len(path)
        path.append(nxt)


def package_graph(graph: Mapping[str, Mapping[str, int]]) -> dict[str, set[str]]:
    parts: dict[str, set[str]] = defaultdict(set)
    for name, targets in graph.items():
        for target in targets:
            if part(name) != part(target):
                parts[part(name)].add(part(target))
    return parts


def swfs_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The package graph and the module graph of ``swfs``, less ``ALLOWED``."""
    graph = project_imports()
    kept = {
        name: {t: line for t, line in targets.items() if (name, t) not in ALLOWED}
        for name, targets in graph.items()
        if name.startswith("swfs")
    }
    inner = {
        name: {t for t in targets if t.startswith("swfs") and part(t) == part(name)}
        for name, targets in kept.items()
    }
    parts = package_graph(kept)
    return {p: {t for t in ts if t.startswith("swfs")} for p, ts in parts.items()}, inner


def describe(graph: Graph, members: list[str], lines: Mapping[str, Mapping[str, int]]) -> str:
    loop = loop_in(graph, members)
    steps = []
    for a, b in zip(loop, loop[1:], strict=False):
        where = next(
            (
                f"{m}:{lines[m][t]}"
                for m in sorted(lines)
                for t in sorted(lines[m])
                if part(m) == a and part(t) == b or m == a and t == b
            ),
            "?",
        )
        steps.append(f"{a} -> {b} ({where})")
    return f"cycle of {len(members)}: {', '.join(members)}\n    " + "\n    ".join(steps)


def test_no_import_runs_upward() -> None:
    graph = project_imports()
    upward = [
        f"{name} imports {target} (line {line})"
        for name, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if LAYERS.index(part(name).split(".")[0]) > LAYERS.index(part(target).split(".")[0])
    ]
    assert not upward, "\n".join(upward)


def test_api_is_a_leaf() -> None:
    """The shared types and Protocols import nothing of swfs."""
    graph = project_imports()
    assert not [t for t in graph["swfs.api"] if t.startswith("swfs")], graph["swfs.api"]


def test_no_cycle_in_swfs() -> None:
    lines = project_imports()
    parts, inner = swfs_graphs()
    found = [describe(parts, c, lines) for c in cycles(parts)]
    found += [describe(inner, c, lines) for c in cycles(inner)]
    assert not found, "import cycles in swfs:\n" + "\n".join(found)


def mountd_graph() -> dict[str, set[str]]:
    """The module graph inside ``mountd``, less ``ALLOWED``."""
    return {
        name: {t for t in targets if t.startswith("mountd.") and (name, t) not in ALLOWED}
        for name, targets in project_imports().items()
        if name.startswith("mountd.")
    }


def test_no_cycle_in_mountd() -> None:
    """The daemon's modules import each other one way: shared types sit in
    leaf modules (``mountd.provider``'s Protocols), the rest is passed in."""
    graph = mountd_graph()
    found = [describe(graph, c, project_imports()) for c in cycles(graph)]
    assert not found, "import cycles in mountd:\n" + "\n".join(found)


def test_no_cycle_in_parsers() -> None:
    """The parsers import each other one way: the registry imports every
    parser; a parser that needs the registry's answers is given them."""
    graph = {
        name: {t for t in targets if t.startswith("parsers.") and (name, t) not in ALLOWED}
        for name, targets in project_imports().items()
        if name.startswith("parsers.")
    }
    found = [describe(graph, c, project_imports()) for c in cycles(graph)]
    assert not found, "import cycles in parsers:\n" + "\n".join(found)


def test_packages_import_what_they_declare() -> None:
    """Each swfs package's ``__init__`` says what it may import
    (``Imports: ...``); its modules import nothing else of swfs or parsers."""
    graph = project_imports()
    found = []
    for package in sorted(n for n, p in modules().items() if p.name == "__init__.py"):
        if package.count(".") != 1 or not package.startswith("swfs."):
            continue
        doc = ast.get_docstring(ast.parse(modules()[package].read_text())) or ""
        _, _, declared_text = doc.partition("Imports:")
        assert declared_text, f"{package}: its docstring declares no Imports:"
        declared = set(re.findall(r"``((?:swfs\.)?\w+)``", declared_text))
        for name, targets in sorted(graph.items()):
            if part(name) != package:
                continue
            for target, line in sorted(targets.items()):
                unit = part(target)
                if target.split(".")[0] not in ("swfs", "parsers") or unit == package:
                    continue
                if unit not in declared and (name, target) not in ALLOWED:
                    found.append(f"{name}:{line} imports {target}, not declared by {package}")
    assert not found, "\n".join(found)


def test_allowed_still_exist() -> None:
    """The allow-lists only shrink: an import or a reach that is gone leaves it."""
    graph = project_imports()
    gone = [f"{a} -> {b}" for a, b in ALLOWED if b not in graph.get(a, {})]
    for entry in PRIVATE_ALLOWED:
        rel, _, expr = entry.partition(":")
        if expr not in [e for _, e in private_reaches(ROOT / rel)]:
            gone.append(entry)
    assert not gone, "remove from the allow-list: " + ", ".join(gone)


def private_reaches(path: Path) -> list[tuple[int, str]]:
    """``x._name`` in ``path`` where ``x`` is not ``self``, ``cls`` or
    ``super()`` and ``_name`` is another module's: a project module imported
    here, or an object's attribute this module never defines."""
    tree = ast.parse(path.read_text(), str(path))
    defined: set[str] = set()
    ours: set[str] = set()  # names bound to project modules or their members
    theirs: set[str] = set()  # ... to the standard library's or a third party's
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = (alias.asname or alias.name).split(".")[0]
                (ours if alias.name.split(".")[0] in LAYERS else theirs).add(bound)
        elif isinstance(node, ast.ImportFrom):
            project = node.level > 0 or (node.module or "").split(".")[0] in LAYERS
            for alias in node.names:
                (ours if project else theirs).add(alias.asname or alias.name)
    found = []
    for node in ast.walk(tree):
        if (  # getattr(x, "_name", ...), hasattr and setattr alike
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value.startswith("_")
            and not node.args[1].value.startswith("__")
            and ast.unparse(node.args[0]) not in ("self", "cls")
        ):
            found.append((node.lineno, ast.unparse(node)))
            continue
        if not isinstance(node, ast.Attribute):
            continue
        if not node.attr.startswith("_") or node.attr.startswith("__"):
            continue
        value = node.value
        if isinstance(value, ast.Name):
            if value.id in ("self", "cls") or value.id in theirs:
                continue
            if value.id not in ours and node.attr in defined:
                continue
        elif (isinstance(value, ast.Call) and ast.unparse(value.func) == "super") or (
            node.attr in defined
        ):
            continue
        found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_no_call_into_private_names() -> None:
    found = []
    for top in PRIVATE_CHECKED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, expr in private_reaches(path):
                if f"{rel}:{expr}" not in PRIVATE_ALLOWED:
                    found.append(f"{rel}:{line}: {expr}")
    assert not found, "calls into another module's private names:\n" + "\n".join(found)


def test_private_reaches_are_found(tmp_path: Path) -> None:
    """The check itself, on a planted module."""
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import os\n"
        "from swfs import workspace\n"
        "class A:\n"
        "    def f(self, ws, other):\n"
        "        self._mine = 1\n"
        "        os._exit(0)\n"
        "        other._mine\n"
        "        workspace._hidden\n"
        "        getattr(other, '_seq', 0)\n"
        "        return ws._bump()\n"
    )
    assert private_reaches(planted) == [
        (8, "workspace._hidden"),
        (9, "getattr(other, '_seq', 0)"),
        (10, "ws._bump"),
    ]


def test_cycles_are_found() -> None:
    """The check itself: a planted loop is reported with its members."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert loop_in(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def main() -> None:
    graph = project_imports()
    parts = package_graph(graph)
    for name in sorted(parts):
        print(f"{name} -> {', '.join(sorted(parts[name]))}")
    print("package cycles:")
    for members in cycles(parts):
        print("  ", ", ".join(members))
    print("mountd module cycles:")
    for members in cycles(mountd_graph()):
        print("  ", ", ".join(members))
    print("module cycles:")
    for members in cycles(graph):
        print("  ", ", ".join(members))


if __name__ == "__main__":
    main()


def test_the_daemons_module_map_names_every_module() -> None:
    """``mountd/__init__``'s map of modules is where a newcomer starts: it
    names each of them (a new module must be added to it)."""
    doc = ast.get_docstring(ast.parse((ROOT / "mountd" / "__init__.py").read_text())) or ""
    modules = {p.stem for p in (ROOT / "mountd").glob("*.py") if p.stem != "__init__"}
    assert modules, "no mountd modules found"
    missing = sorted(m for m in modules if f"``{m}``" not in doc)
    assert not missing, f"mountd/__init__.py does not name: {missing}"
