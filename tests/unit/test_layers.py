"""The import structure: layers run one way, and ``swfs`` has no import cycle.

``cli`` -> ``mountd`` -> ``swfs`` -> ``parsers``: no import runs upward.  Inside
``swfs``, neither its packages (``store``, ``views``, ``history`` ...; each
top-level module counts as one of its own) nor the modules inside one package
import each other in a loop.  Every import counts: at module level, under
``if TYPE_CHECKING:`` and inside a function.

Read from the source with ``ast``, so nothing is imported.  ``python -m
tests.unit.test_layers`` prints the graph between packages.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("cli", "mountd", "swfs", "parsers")  # each may import only those after it

# Imports that still close a cycle, each with why it is there.  Shrink only:
# an entry whose import is gone fails the test too.
ALLOWED: dict[tuple[str, str], str] = {
    # The control socket and the engine know each other.
    ("swfs.control", "swfs.engine"): "the control ops are typed with the whole Engine",
    # Lower parts typed with, or reaching into, the whole workspace.
    ("swfs.find.search", "swfs.workspace"): "SearchIndex is built from a Workspace",
    ("swfs.history.snapshots", "swfs.workspace"): "snapshot ops take the Workspace itself",
    ("swfs.history.world", "swfs.workspace"): "World re-implements Workspace methods",
    ("swfs.store.gc", "swfs.history.snapshots"): "gc asks history what is reclaimable",
    ("swfs.store.gc", "swfs.workspace"): "gc collects over the whole Workspace",
    # `swfs check` checks every part, so it sits above them all, not in the store.
    ("swfs.store.check", "swfs.control"): "check asks the daemon's control socket",
    ("swfs.store.check", "swfs.evidence.access"): "check checks the access journal",
    ("swfs.store.check", "swfs.find.search"): "check checks the search index",
    ("swfs.store.check", "swfs.find.textindex"): "check checks the search index",
    ("swfs.store.check", "swfs.history.snapshots"): "check checks snapshots",
    ("swfs.store.check", "swfs.history.staging"): "check checks the staged layer",
    ("swfs.store.check", "swfs.workspace"): "check opens the Workspace",
}

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
    graph = imports(modules())
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
    graph = imports(modules())
    upward = [
        f"{name} imports {target} (line {line})"
        for name, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if LAYERS.index(part(name).split(".")[0]) > LAYERS.index(part(target).split(".")[0])
    ]
    assert not upward, "\n".join(upward)


def test_api_is_a_leaf() -> None:
    """The shared types and Protocols import nothing of swfs."""
    graph = imports(modules())
    assert not [t for t in graph["swfs.api"] if t.startswith("swfs")], graph["swfs.api"]


def test_no_cycle_in_swfs() -> None:
    lines = imports(modules())
    parts, inner = swfs_graphs()
    found = [describe(parts, c, lines) for c in cycles(parts)]
    found += [describe(inner, c, lines) for c in cycles(inner)]
    assert not found, "import cycles in swfs:\n" + "\n".join(found)


def test_allowed_cycles_still_exist() -> None:
    """The allow-list only shrinks: an import that is gone leaves it."""
    graph = imports(modules())
    gone = [f"{a} -> {b}" for a, b in ALLOWED if b not in graph.get(a, {})]
    assert not gone, "remove from ALLOWED: " + ", ".join(gone)


def test_cycles_are_found() -> None:
    """The check itself: a planted loop is reported with its members."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert loop_in(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def main() -> None:
    graph = imports(modules())
    parts = package_graph(graph)
    for name in sorted(parts):
        print(f"{name} -> {', '.join(sorted(parts[name]))}")
    print("package cycles:")
    for members in cycles(parts):
        print("  ", ", ".join(members))
    print("module cycles:")
    for members in cycles(graph):
        print("  ", ", ".join(members))


if __name__ == "__main__":
    main()
