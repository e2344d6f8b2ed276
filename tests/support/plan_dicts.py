"""Plan mappings written by hand, for checks that need a plan's shape and not a placement."""

from __future__ import annotations


def plan(nodes, queries):
    """A ``weaveplace.plan/1`` mapping with the given nodes and queries and no stream rates."""
    return {
        "schema": "weaveplace.plan/1",
        "ie": "slickdeque",
        "queries": queries,
        "nodes": nodes,
        "streams": {},
    }
