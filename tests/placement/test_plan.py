"""Plans as JSON (schema weaveplace.plan/1, docs/DESIGN.md s. 4): shape, checks, round trip."""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.plan import SCHEMA, PlanError, load_plan, single_node_plan, verify_plan
from placement.queries import Query
from placement.trees import CostModel
from placement.weaveshare import no_share, weaveshare

TOP_KEYS = {
    "schema",
    "optimizer",
    "ie",
    "slicing",
    "queries",
    "streams",
    "nodes",
    "total_cost",
    "max_cost",
}
QUERY_KEYS = {"id", "stream", "aggregate", "range", "slide", "kind"}
NODE_KEYS = {"id", "capacity", "cost", "trees"}
# docs/DESIGN.md's tree keys; the implementation adds "aggregate" (a tree holds one aggregate) and
# "axis" (the window kind its windows share).
TREE_KEYS = {"id", "stream", "queries", "composite_slide", "edges", "edge_rate", "omega", "cost"}

QUERIES = [
    Query("q1", 10000, 3000, "max", "mf01"),  # classes (3000, 0), (3000, 1000)
    Query("q2", 6000, 2000, "max", "mf01"),  # class (2000, 0)
    Query("q3", 5000, 5000, "sum", "mf02"),  # tumbling, invertible
]
RATES = {"mf01": 0.1, "mf02": 0.2}


def make_plan(technique="slickdeque", queries=QUERIES, rates=RATES, optimizer="WG_TN"):
    model = CostModel(technique, rates)
    return single_node_plan(optimizer, weaveshare(queries, model), model, rates)


def assert_same(a, b, path="plan"):
    """Equal JSON structures; floats equal to 1e-12 relative. (A woven tree's Omega is summed
    from its parts, a reloaded tree's Omega is recomputed with fsum: the last bit may differ.)"""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, a, b)
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


def tree_by_queries(d, ids):
    return next(t for n in d["nodes"] for t in n["trees"] if sorted(t["queries"]) == sorted(ids))


def test_plan_dict_shape_and_values():
    d = make_plan().to_dict()
    json.dumps(d)  # plain JSON types only (no Fractions, no numpy)
    assert set(d) == TOP_KEYS
    assert d["schema"] == SCHEMA == "weaveplace.plan/1"
    assert (d["optimizer"], d["ie"], d["slicing"]) == ("WG_TN", "slickdeque", "pairs")
    assert sorted(d["queries"], key=lambda q: q["id"]) == [
        {
            "id": "q1",
            "stream": "mf01",
            "aggregate": "max",
            "range": 10000,
            "slide": 3000,
            "kind": "time",
        },
        {
            "id": "q2",
            "stream": "mf01",
            "aggregate": "max",
            "range": 6000,
            "slide": 2000,
            "kind": "time",
        },
        {
            "id": "q3",
            "stream": "mf02",
            "aggregate": "sum",
            "range": 5000,
            "slide": 5000,
            "kind": "time",
        },
    ]
    assert all(set(q) == QUERY_KEYS for q in d["queries"])
    assert d["streams"] == {"mf01": {"rate": 0.1}, "mf02": {"rate": 0.2}}
    assert len(d["nodes"]) == 1
    node = d["nodes"][0]
    assert set(node) == NODE_KEYS
    assert (node["id"], node["capacity"]) == ("node-0", None)
    for t in node["trees"]:
        assert TREE_KEYS <= set(t) <= TREE_KEYS | {"aggregate", "axis"}
        assert t["axis"] == "time"
    assert sorted(t["id"] for t in node["trees"]) == ["t0", "t1"]

    # q1 and q2 weave: edges 0, 1000, 2000, 3000, 4000 in a composite slide of 6000.
    t12 = tree_by_queries(d, ["q1", "q2"])
    assert (t12["stream"], t12["aggregate"]) == ("mf01", "max")
    assert (t12["composite_slide"], t12["edges"]) == (6000, 5)
    assert t12["edge_rate"] == float(Fraction(5, 6000))
    # SlickDeque Non-Inv (max): nP_max = 10000 * 5/6000, Omega = 2 - 2/nP (value comparisons).
    np_max = 10000 * 5 / 6000
    om = 2 - 2 / np_max
    assert math.isclose(t12["omega"], om, rel_tol=1e-12)
    assert math.isclose(t12["cost"], 0.1 + 5 / 6000 * om, rel_tol=1e-12)

    # q3 alone: SlickDeque Inv (sum) counts 2 per unique range.
    t3 = tree_by_queries(d, ["q3"])
    assert (t3["composite_slide"], t3["edges"]) == (5000, 1)
    assert (t3["edge_rate"], t3["omega"]) == (1 / 5000, 2.0)
    assert math.isclose(t3["cost"], 0.2 + 2 / 5000, rel_tol=1e-12)

    assert math.isclose(node["cost"], t12["cost"] + t3["cost"], rel_tol=1e-12)
    assert d["total_cost"] == d["max_cost"] == node["cost"]


def test_fresh_plans_verify_clean():
    for tech in ("panes", "flatfat", "flatfit", "slickdeque"):
        d = make_plan(tech).to_dict()
        assert verify_plan(d) == []
        assert verify_plan(json.loads(json.dumps(d))) == []


@pytest.mark.parametrize(
    "field, delta, expect",
    [
        ("cost", 1.0, "t0: cost"),
        ("edges", 1, "t0: edges"),
        ("omega", 0.5, "t0: omega"),
        ("edge_rate", 1e-3, "t0: edge_rate"),
        ("composite_slide", 1, "t0: composite_slide"),
    ],
)
def test_verify_plan_reports_tampered_tree(field, delta, expect):
    d = make_plan().to_dict()
    bad = copy.deepcopy(d)
    bad["nodes"][0]["trees"][0][field] += delta
    problems = verify_plan(bad)
    assert len(problems) == 1
    assert problems[0].startswith(expect)
    assert str(bad["nodes"][0]["trees"][0][field]) in problems[0]


def test_verify_plan_reports_tampered_totals_and_node_cost():
    d = make_plan().to_dict()
    bad = copy.deepcopy(d)
    bad["total_cost"] *= 2
    assert verify_plan(bad) == [f"total_cost {bad['total_cost']} != {d['total_cost']}"]
    bad = copy.deepcopy(d)
    bad["nodes"][0]["cost"] += 0.5
    assert [p.split(":")[0] for p in verify_plan(bad)] == ["node-0"]
    bad = copy.deepcopy(d)
    bad["max_cost"] = 0.0
    assert [p.split(" ")[0] for p in verify_plan(bad)] == ["max_cost"]


def test_verify_plan_recomputes_from_queries_not_from_stated_numbers():
    """Changing a query's range changes what the tree must cost: the stated numbers are stale."""
    d = make_plan().to_dict()
    bad = copy.deepcopy(d)
    q1 = next(q for q in bad["queries"] if q["id"] == "q1")
    q1["range"] = 9000  # fragment 0 instead of 1000: fewer edges in the q1+q2 tree
    problems = verify_plan(bad)
    t12 = tree_by_queries(d, ["q1", "q2"])
    assert any(p.startswith(f"{t12['id']}: edges") for p in problems)
    assert any(p.startswith(f"{t12['id']}: cost") for p in problems)
    # A different stream rate makes every tree of that stream (and the totals) stale.
    bad = copy.deepcopy(d)
    bad["streams"]["mf02"]["rate"] = 0.3
    t3 = tree_by_queries(d, ["q3"])
    assert any(p.startswith(f"{t3['id']}: cost") for p in verify_plan(bad))


def test_verify_plan_query_in_two_trees():
    qs = [Query("a", 7, 5), Query("b", 10, 4)]
    model = CostModel("panes", 1.0)
    d = single_node_plan("NoShare", no_share(qs, model), model, {"s0": 1.0}).to_dict()
    assert verify_plan(d) == []
    bad = copy.deepcopy(d)
    bad["nodes"][0]["trees"][1]["queries"] = ["a", "b"]
    assert "every query must be in exactly one tree" in verify_plan(bad)


def test_load_plan_round_trip(tmp_path):
    plan = make_plan()
    d = plan.to_dict()
    path = plan.write(tmp_path / "sub" / "plan.json")
    for source in (path, str(path), json.loads(path.read_text()), d):
        again = load_plan(source)
        assert_same(again.to_dict(), d)
        assert math.isclose(again.total_cost, plan.total_cost, rel_tol=1e-12)
        assert [q.id for q in again.queries] == [q.id for q in plan.queries]
    for engine in ("f1", "bitset"):
        assert_same(load_plan(d, engine=engine).to_dict(), d)


def test_load_plan_errors():
    d = make_plan().to_dict()
    bad = dict(d, schema="weaveplace.plan/0")
    with pytest.raises(
        PlanError, match=r"schema: expected 'weaveplace.plan/1', got 'weaveplace.plan/0'"
    ):
        load_plan(bad)
    bad = copy.deepcopy(d)
    bad["nodes"][0]["trees"][0]["queries"].append("ghost")
    with pytest.raises(PlanError, match=r"unknown queries \['ghost'\]"):
        load_plan(bad)
    bad = copy.deepcopy(d)
    bad["queries"].append(dict(bad["queries"][0]))
    with pytest.raises(ValueError, match="duplicate query id"):
        load_plan(bad)
    bad = copy.deepcopy(d)
    bad["queries"][0]["slide"] = 0
    qid = bad["queries"][0]["id"]
    with pytest.raises(ValueError, match=rf"query '{qid}': slide must be an integer >= 1, got 0"):
        load_plan(bad)


@settings(max_examples=examples(25))
@given(
    spec=st.lists(
        st.tuples(
            st.integers(1, 60),
            st.integers(1, 20),
            st.sampled_from(["sum", "max"]),
            st.sampled_from(["a", "b"]),
        ),
        min_size=1,
        max_size=8,
    ),
    tech=st.sampled_from(["panes", "flatfat", "flatfit", "slickdeque"]),
    rate_a=st.floats(0.01, 5.0),
    rate_b=st.floats(0.01, 5.0),
)
def test_random_plans_round_trip_and_verify(spec, tech, rate_a, rate_b):
    qs = [Query(f"q{i}", r, s, agg, stream) for i, (r, s, agg, stream) in enumerate(spec)]
    rates = {"a": rate_a, "b": rate_b}
    d = make_plan(tech, qs, rates).to_dict()
    d = json.loads(json.dumps(d))
    assert verify_plan(d) == []
    again = load_plan(d).to_dict()
    assert_same(again, d)
    assert verify_plan(again) == []
    assert math.isclose(
        d["total_cost"], sum(t["cost"] for t in d["nodes"][0]["trees"]), rel_tol=1e-12
    )


def test_cutty_plan_records_slicing_round_trips_and_verifies(tmp_path):
    """A plan priced under Cutty says so (``slicing``), reloads under Cutty (costs recomputed
    from its queries), and its costs differ from the Pairs plan's (else the field is idle)."""
    model = CostModel("slickdeque", RATES, slicing="cutty")
    plan = single_node_plan("WG_TN", weaveshare(QUERIES, model), model, RATES)
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["slicing"] == "cutty" and verify_plan(d) == []
    again = load_plan(plan.write(tmp_path / "p.json"))
    assert again.slicing == "cutty" and all(t.slicing == "cutty" for t in again.trees)
    assert_same(again.to_dict(), d)
    pairs = make_plan().to_dict()
    assert d["total_cost"] != pytest.approx(pairs["total_cost"])
    # the same plan read as Pairs no longer verifies: the slicing is part of the costs
    as_pairs = dict(d, slicing="pairs")
    assert verify_plan(as_pairs) != []


def test_plan_without_slicing_loads_as_pairs_and_bad_slicing_is_refused():
    d = make_plan().to_dict()
    old = {k: v for k, v in d.items() if k != "slicing"}  # a plan written before the field
    assert verify_plan(old) == [] and load_plan(old).slicing == "pairs"
    with pytest.raises(
        PlanError,
        match=r"slicing: expected one of pairs, cutty \(default "
        r"pairs\), got 'Cutty'",
    ):
        load_plan(dict(d, slicing="Cutty"))


def test_plan_trees_share_one_slicing():
    from placement.plan import Node, Plan

    a = CostModel("panes", RATES).tree([QUERIES[0]])
    b = CostModel("panes", RATES, slicing="cutty").tree([QUERIES[2]])
    assert Plan("x", "panes", [Node("n", [b])], RATES).slicing == "cutty"
    with pytest.raises(ValueError, match="share one slicing"):
        Plan("x", "panes", [Node("n", [a, b])], RATES)
    with pytest.raises(ValueError, match="plan slicing 'pairs'"):
        Plan("x", "panes", [Node("n", [b])], RATES, "pairs")
