"""Routing by top-level name: which provider answers for a node.

The native tree answers for everything below the mount root except the
generated trees' names; each generated tree (``.parsed``, ``.review``,
``.versions``, and any other ``SyntheticTree``) answers below its own name.
Registering a tree is one entry in ``mountd.synthetic.make_trees`` (plus its
``Tree`` member): the names the root reserves, lists and invalidates all
come from the providers registered here.

Optional provider attributes (a ``SyntheticTree`` without them gets the
defaults):

``scope``     ``"file"`` (default): its paths start with a source file's path,
              so a change to that file touches only what lies below it;
              ``"all"``: any change may touch any of its nodes (``.review``).
``listed()``  whether the mount root lists it (default True; ``.versions``
              only with ``--versions=visible``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from mountd.nodes import Tree
from mountd.synthetic import SyntheticTree


class Router:
    def __init__(self, trees: Mapping[Tree, SyntheticTree]) -> None:
        self.trees = dict(trees)
        self.names = frozenset(str(t) for t in self.trees)  # reserved at the root

    def provider(self, tree: Tree) -> SyntheticTree:
        return self.trees[tree]

    def top(self, name: str) -> Tree | None:
        """The generated tree rooted at ``name`` in the mount root, if any."""
        return Tree(name) if name in self.names else None

    def listed(self) -> list[str]:
        """The generated trees the mount root lists, sorted."""
        out = []
        for tree, provider in self.trees.items():
            listed = getattr(provider, "listed", None)
            if listed is None or listed():
                out.append(str(tree))
        return sorted(out)

    def below(self, rel: str) -> Iterator[tuple[Tree, str]]:
        """(tree, path prefix) of every generated node a change to the native
        file ``rel`` may touch."""
        for tree, provider in self.trees.items():
            yield tree, ("" if getattr(provider, "scope", "file") == "all" else rel)
