"""The query log (``cluster.service.query_log``): a state saved with queries named by id loads
back to exactly what a state holding them whole said (the oracle: the version-1 form), through
adds, removals, growing and replaced trees, uncommitted appends and a resume in between."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.service.query_log import NAME, QueryLog, QueryLogError, load
from cluster.service.state import executor_query, query_mapping

AGGS = ("sum", "max", "min", "count", "avg")


def _query(i: int, rng) -> dict:
    return query_mapping(
        {
            "id": f"q{i}",
            "stream": rng.choice(["mf01", "mf02"]),
            "aggregate": rng.choice(AGGS),
            "range": rng.randint(1, 50) * 100,
            "slide": rng.randint(1, 10) * 100,
            "kind": rng.choice(["time", "count"]),
        }
    )


class Deployment:
    """A toy service's bookkeeping as ``resume.save_state`` sees it: running queries, ids used,
    and one node whose tree specs only grow (``dict(t, queries=[...])``) or are replaced."""

    def __init__(self):
        self.queries: dict[str, dict] = {}
        self.used: set[str] = set()
        self.trees: list[dict] = []
        self.next = 0

    def add(self, rng, k: int) -> None:
        for _ in range(k):
            q = _query(self.next, rng)
            self.next += 1
            self.queries[q["id"]] = q
            self.used.add(q["id"])
            same = [i for i, t in enumerate(self.trees) if t["stream"] == q["stream"]]
            if same and rng.random() < 0.7:
                i = rng.choice(same)
                t = self.trees[i]
                self.trees[i] = dict(t, queries=[*t["queries"], executor_query(q)])
            else:
                tid = f"t{len(self.trees)}-{self.next}"
                self.trees.append(
                    {"id": tid, "stream": q["stream"], "queries": [executor_query(q)]}
                )

    def remove(self, rng, k: int) -> None:
        # the trees keep the queries (they still answer windows from before the removal)
        for qid in rng.sample(sorted(self.queries), min(k, len(self.queries))):
            del self.queries[qid]

    def rebuild_tree(self, rng) -> None:
        """A tree replaced by one holding other objects (a restore, an adoption)."""
        if self.trees:
            i = rng.randrange(len(self.trees))
            t = self.trees[i]
            self.trees[i] = dict(t, queries=[dict(q) for q in t["queries"]])

    def whole(self) -> dict:
        """The oracle: the state's query fields as version 1 saved them."""
        return {
            "queries": dict(self.queries),
            "used_ids": sorted(self.used),
            "nodes": {"n0": {"trees": [dict(t) for t in self.trees], "seq": 1}},
        }


def save(log: QueryLog, dep: Deployment) -> dict:
    """What ``resume.save_state`` writes of the queries (as read back from JSON)."""
    size = log.write(dep.used, dep.queries, dep.trees)
    state = {
        "queries": list(dep.queries),
        "query_log": size,
        "nodes": {"n0": {"trees": log.refer(dep.trees), "seq": 1}},
    }
    return json.loads(json.dumps(state))


def same_as_whole(loaded: dict, dep: Deployment) -> None:
    want = json.loads(json.dumps(dep.whole()))
    assert loaded["queries"] == want["queries"]
    assert list(loaded["queries"]) == list(dep.queries)  # the running order kept
    assert sorted(loaded["used_ids"]) == want["used_ids"]
    assert loaded["nodes"] == want["nodes"]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    steps=st.lists(st.sampled_from(["add", "remove", "rebuild", "save", "resume"]), max_size=14),
)
def test_saved_states_load_as_whole_ones(tmp_path_factory, seed, steps):
    import random

    rng = random.Random(seed)
    sd = tmp_path_factory.mktemp("state")
    dep = Deployment()
    dep.add(rng, 3)
    log = QueryLog.start(sd)
    state = save(log, dep)
    for step in steps:
        if step == "add":
            dep.add(rng, rng.randint(1, 6))
        elif step == "remove":
            dep.remove(rng, rng.randint(1, 3))
        elif step == "rebuild":
            dep.rebuild_tree(rng)
        elif step == "save":
            state = save(log, dep)
            same_as_whole(load(sd, state), dep)
        else:  # an uncommitted add, then a resume from the last state saved
            committed = dep.next
            dep.add(rng, 2)
            log.write(dep.used, dep.queries, dep.trees)
            loaded = load(sd, state)
            log = QueryLog.start(sd, loaded)
            dep = Deployment()
            dep.queries = loaded["queries"]
            dep.used = set(loaded["used_ids"])
            dep.trees = loaded["nodes"]["n0"]["trees"]
            dep.next = committed  # the uncommitted ids are free again (other definitions)
            assert (sd / NAME).stat().st_size == state["query_log"]  # the append cut off
    state = save(log, dep)
    same_as_whole(load(sd, state), dep)
    # what the log holds: each id used, once
    ids = [json.loads(x)["id"] for x in (sd / NAME).read_text().splitlines()]
    assert sorted(ids) == sorted(dep.used)


def test_trees_name_logged_queries_by_id(tmp_path):
    import random

    dep = Deployment()
    dep.add(random.Random(1), 20)
    log = QueryLog.start(tmp_path)
    state = save(log, dep)
    named = [q for t in state["nodes"]["n0"]["trees"] for q in t["queries"]]
    assert named and all(isinstance(q, str) for q in named)
    # a query whose spec differs from its definition stays whole
    t = dep.trees[0]
    odd = dict(t["queries"][0], range=t["queries"][0]["range"] + 1)
    dep.trees[0] = dict(t, queries=[odd, *t["queries"][1:]])
    state = save(log, dep)
    assert state["nodes"]["n0"]["trees"][0]["queries"][0] == odd
    same_as_whole(load(tmp_path, state), dep)


def test_a_state_without_the_log_is_logged_at_its_first_save(tmp_path):
    import random

    dep = Deployment()
    dep.add(random.Random(2), 8)
    dep.remove(random.Random(3), 3)
    dep.used.add("gone")  # an id used before, defined nowhere any more
    v1 = json.loads(json.dumps(dep.whole()))
    assert load(tmp_path, v1) is v1
    (tmp_path / NAME).write_text("stale\n")
    log = QueryLog.start(tmp_path, v1)
    assert not (tmp_path / NAME).exists()
    state = save(log, dep)
    loaded = load(tmp_path, state)
    same_as_whole(loaded, dep)
    lines = [json.loads(x) for x in (tmp_path / NAME).read_text().splitlines()]
    assert {"id": "gone"} in lines
    held = [x for x in lines if x["id"] not in dep.queries and x["id"] != "gone"]
    assert held and all(set(x) == set(query_mapping(x)) for x in held)  # from the trees


def test_a_log_shorter_than_the_state_is_refused(tmp_path):
    import random

    dep = Deployment()
    dep.add(random.Random(4), 5)
    state = save(QueryLog.start(tmp_path), dep)
    data = (tmp_path / NAME).read_bytes()
    (tmp_path / NAME).write_bytes(data[:-10])
    with pytest.raises(QueryLogError, match="bytes, but the saved state needs"):
        load(tmp_path, state)
    (tmp_path / NAME).unlink()
    with pytest.raises(QueryLogError, match="cannot read the query log"):
        load(tmp_path, state)
    (tmp_path / NAME).write_bytes(data)
    state["queries"].append("q-nowhere")
    with pytest.raises(QueryLogError, match="'q-nowhere' is not in the log"):
        load(tmp_path, state)
