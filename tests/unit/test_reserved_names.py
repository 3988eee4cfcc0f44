"""One set of reserved root names: the generated trees the router serves are
exactly ``swfs.api.RESERVED_ROOTS``, the names the engine keeps out of the
workspace (a tree added to one and not the other would either shadow a
native folder the engine still scans, or hide one the router never serves)."""

from __future__ import annotations

from mountd.nodes import SYNTHETIC_TREES, Tree
from swfs.api import RESERVED_ROOTS, STORE_NAME
from swfs.evidence import access


def test_the_routers_trees_are_the_reserved_roots() -> None:
    assert {str(t) for t in SYNTHETIC_TREES} == RESERVED_ROOTS
    assert {str(t) for t in Tree if t is not Tree.NATIVE} == RESERVED_ROOTS


def test_the_store_is_no_generated_tree() -> None:
    assert STORE_NAME not in RESERVED_ROOTS


def test_the_access_journals_tree_names_are_reserved_roots() -> None:
    # The access journal names the trees its events fall in (a unit's read
    # under .parsed, a version's under .versions): the same names.
    assert {access.PARSED, access.VERSIONS, access.REVIEW} <= RESERVED_ROOTS
