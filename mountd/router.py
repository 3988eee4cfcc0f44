"""Routing: which provider answers for a node.

The adapter (``mountd.operations``) asks the router for the provider of the
node a request names (``route``), or of a name in a directory (``route_child``:
a generated tree's name in the mount root leads into that tree), and calls
it through the one interface ``mountd.provider.Provider``.  This is the only
place that tells the native tree from the generated ones.

The native tree answers for everything below the mount root except the
generated trees' names; each generated tree (``.parsed``, ``.review``,
``.versions``, and any other ``SyntheticTree``) answers below its own name.
Registering a tree is one entry in ``mountd.synthetic.make_trees`` (plus its
``Tree`` member): the names the root reserves, lists and invalidates all
come from the trees registered here.

Tree attributes the router reads (declared by ``SyntheticTree``; a tree
built on ``mountd.synthetic.TreeDefaults`` gets the defaults):

``scope``     ``"file"`` (default): its paths start with a source file's path,
              so a change to that file touches only what lies below it;
              ``"all"``: any change may touch any of its nodes (``.review``).
``listed()``  whether the mount root lists it (default True; ``.versions``
              only with ``--versions=visible``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from mountd.generated import provide
from mountd.nodes import ROOT_INODE, Node, Tree
from mountd.synthetic import SyntheticTree

if TYPE_CHECKING:
    from mountd.provider import Mount, Provider


class Router:
    def __init__(
        self,
        trees: Mapping[Tree, SyntheticTree],
        *,
        native: Provider | None = None,
        mount: Mount | None = None,
    ) -> None:
        """``trees``: the generated trees by name.  With ``native`` (the native
        tree's provider) and ``mount`` (the adapter's shared tables), each tree
        is wrapped in its provider and ``route`` answers for every node."""
        self.trees = dict(trees)
        self.names = frozenset(str(t) for t in self.trees)  # reserved at the root
        self.providers: dict[Tree, Provider] = {}
        if native is not None:
            self.providers[Tree.NATIVE] = native
        if mount is not None:
            for tree, source in self.trees.items():
                self.providers[tree] = provide(mount, source)

    def provider(self, tree: Tree) -> SyntheticTree:
        """The generated tree (the data source) registered as ``tree``."""
        return self.trees[tree]

    def route(self, node: Node) -> Provider:
        """The provider that answers for ``node``."""
        return self.providers[node.tree]

    def route_child(self, parent: Node, name: str) -> Provider:
        """The provider that answers for ``name`` in directory ``parent``."""
        top = self.top(name) if parent.ino == ROOT_INODE else None
        return self.providers[parent.tree if top is None else top]

    def top(self, name: str) -> Tree | None:
        """The generated tree rooted at ``name`` in the mount root, if any."""
        return Tree(name) if name in self.names else None

    def listed(self) -> list[str]:
        """The generated trees the mount root lists, sorted."""
        out = []
        for tree, provider in self.trees.items():
            if provider.listed():
                out.append(str(tree))
        return sorted(out)

    def below(self, rel: str) -> Iterator[tuple[Tree, str]]:
        """(tree, path prefix) of every generated node a change to the native
        file ``rel`` may touch."""
        for tree, provider in self.trees.items():
            yield tree, ("" if provider.scope == "all" else rel)
