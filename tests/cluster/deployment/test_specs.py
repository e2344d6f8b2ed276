"""The checks a plan passes before it is deployed (cluster/deployment/specs.py), without Ray."""

from __future__ import annotations

import pytest
from support.plan_dicts import plan

from cluster.deployment.specs import DeploymentError, node_specs


def test_node_specs_checks():
    qs = [
        {"id": "x", "stream": "mf01", "aggregate": "sum", "range": 10, "slide": 5},
        {"id": "y", "stream": "mf01", "aggregate": "sum", "range": 10, "slide": 5, "kind": "count"},
    ]
    # count and time windows never share a tree: refused, not split
    with pytest.raises(DeploymentError, match="mixes count and time"):
        node_specs(
            plan([{"id": "n", "trees": [{"id": "t", "stream": "mf01", "queries": ["x", "y"]}]}], qs)
        )
    with pytest.raises(DeploymentError, match="not placed"):
        node_specs(plan([{"id": "n", "trees": [{"id": "t", "queries": ["x"]}]}], qs))
    with pytest.raises(DeploymentError, match="each query runs once"):
        node_specs(
            plan(
                [
                    {
                        "id": "n",
                        "trees": [{"id": "t", "queries": ["x"]}, {"id": "u", "queries": ["x"]}],
                    }
                ],
                qs,
            )
        )
    with pytest.raises(DeploymentError, match="unknown query"):
        node_specs(plan([{"id": "n", "trees": [{"id": "t", "queries": ["x", "y", "z"]}]}], qs))
    with pytest.raises(DeploymentError, match="stream"):
        node_specs(
            plan([{"id": "n", "trees": [{"id": "t", "stream": "mf02", "queries": ["x", "y"]}]}], qs)
        )
    with pytest.raises(DeploymentError, match="schema"):
        node_specs({"schema": "nope"})
