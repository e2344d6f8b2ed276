"""Run configuration: valid files load, and every broken file ends in one clear ConfigError.

Why a fuzz test: the promise is "a mistake in a config is one line naming the key", never a
pydantic dump or a stray TypeError. Hypothesis mutates valid configs (unknown keys, deleted
required keys, wrong types and out-of-range values) and feeds random YAML text.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.configs import EXPLICIT
from typer.testing import CliRunner

from sim.cli import app
from sim.config import (
    SECTIONS,
    Config,
    ConfigError,
    config_from_mapping,
    load_config,
    load_config_text,
)

ROOT = Path(__file__).resolve().parents[2]

GEN = {
    "name": "fuzz",
    "workload": {
        "generator": {
            "qnum": [20, 30],
            "smax": 25,
            "rate": 10.0,
            "zskew": 1,
            "omax": 10,
            "gen": ["nrm", "div"],
            "seed": 0,
        }
    },
    "cluster": {"nodes": [2, 4], "ray": {"address": None}},
    "placement": {
        "optimizers": ["WG_TN", "WG_I", "WG_LS", "weaveshare"],
        "ie": "panes",
        "engine": "fast",
        "preprocess": False,
        "exact": 8,
    },
    "data": {"duration_s": 10.0, "rate_hz": 100.0, "seed": 1},
    "run": {"mode": "simulate", "allowed_lateness": 0, "output_dir": "out/x", "seed": 0},
}
PATH_RE = re.compile(r"^([A-Za-z_][\w-]*|\[.+?\])((\[\d+\])|(\[.+?\])|(\.[A-Za-z_][\w-]*))*: ")


# ---- valid configs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "quickstart.yaml",
        "table8_grid.yaml",
        "fig41.yaml",
        "live_quickstart.yaml",
        "live_drill.yaml",
    ],
)
def test_shipped_configs_load(name):
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.points()
    assert cfg.summary()


def test_table8_is_the_256_point_grid():
    cfg = load_config(ROOT / "configs" / "table8_grid.yaml")
    points = cfg.points()
    assert len(points) == 256
    assert len(cfg.placement.optimizer_list) == 14
    combos = {
        (
            p["workload"]["qnum"],
            len(p["node_ids"]),
            p["workload"]["rate"],
            p["workload"]["smax"],
            p["workload"]["zskew"],
            p["workload"]["omax"],
            p["workload"]["gen"],
        )
        for p in points
    }
    assert len(combos) == 256
    assert {c[1] for c in combos} == {4, 8, 16, 32}


def test_generator_grid_and_defaults():
    cfg = config_from_mapping(GEN)
    assert len(cfg.points()) == 2 * 2 * 2  # qnum x gen x nodes
    minimal = config_from_mapping({"workload": {"generator": {"qnum": 5, "smax": 3}}})
    assert minimal.placement.optimizer_list == ["WG_TN", "WG_I"]
    assert minimal.placement.exact_max_queries == 0
    assert minimal.cluster.layouts() == [(["node-0"], [None])]
    assert minimal.run.mode == "simulate" and minimal.run.output_dir == "out/run"


def test_explicit_queries_capacities_and_exact_true():
    cfg = config_from_mapping(EXPLICIT)
    assert cfg.cluster.layouts() == [(["n0", "n1"], [50.0, 80.0])]
    assert cfg.placement.exact_max_queries == 12
    assert cfg.placement.optimizer_list == ["WG_I"]


def test_data_path_relative_to_config(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "feed.tsv").write_text("x\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({**GEN, "data": {"path": "sub/feed.tsv"}}))
    cfg = load_config(tmp_path / "c.yaml")
    assert Path(cfg.data.path) == (tmp_path / "sub" / "feed.tsv").resolve()


def test_data_directory_relative_to_config_and_defaults(tmp_path):
    (tmp_path / "sub" / "in").mkdir(parents=True)
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                **EXPLICIT,
                "data": {"directory": {"path": "in", "idle_timeout_s": 5}},
                "run": {"mode": "live"},
            }
        )
    )
    (tmp_path / "c.yaml").rename(tmp_path / "sub" / "c.yaml")
    d = load_config(tmp_path / "sub" / "c.yaml").data.directory
    assert Path(d.path) == (tmp_path / "sub" / "in").resolve()
    assert (d.pattern, d.files_per_batch, d.poll_s, d.idle_timeout_s, d.max_files, d.timeout_s) == (
        "*",
        8,
        1.0,
        5.0,
        None,
        None,
    )


def test_live_stream_example_loads(tmp_path):
    """configs/live_stream.yaml watches <checkout>/out/incoming: valid once that exists."""
    text = (ROOT / "configs" / "live_stream.yaml").read_text()
    (tmp_path / "configs").mkdir()
    with pytest.raises(ConfigError, match=r"^data\.directory\.path: directory not found"):
        load_config_text(text, tmp_path / "configs")
    (tmp_path / "out" / "incoming").mkdir(parents=True)
    cfg = load_config_text(text, tmp_path / "configs")
    assert cfg.run.mode == "live" and cfg.data.directory.idle_timeout_s == 30


@pytest.mark.parametrize(
    "directory,extra,expected",
    [
        ({"path": "nope"}, {}, "data.directory.path: directory not found"),
        ({"path": "f.tsv"}, {}, "data.directory.path: "),
        ({"path": "in", "pattern": "in/*.tsv"}, {}, "data.directory.pattern: 'in/*.tsv' is a path"),
        ({"path": "in", "idle_timeout_s": 0}, {}, "data.directory.idle_timeout_s"),
        ({"path": "in", "max_files": 1.5}, {}, "data.directory.max_files"),
        (
            {"path": "in", "idle_timeout_s": 1, "poll_s": 2},
            {},
            "data.directory.idle_timeout_s: 1 must exceed poll_s (2)",
        ),
        ({"path": "in", "files_per_batch": 0}, {}, "data.directory.files_per_batch"),
        ({"path": "in", "idle": 3}, {}, "data.directory.idle: unknown key"),
        ({}, {}, "data.directory.path: required key is missing"),
        ("in", {}, "data.directory: expected a mapping"),
        ({"path": "in"}, {"path": "f.tsv"}, "data.directory: next to data.path"),
        (
            {"path": "in"},
            {"rate_hz": 5.0},
            "data.rate_hz: a synthetic-feed parameter next to data.directory",
        ),
    ],
)
def test_bad_data_directory(tmp_path, directory, extra, expected):
    (tmp_path / "in").mkdir()
    (tmp_path / "f.tsv").write_text("")
    raw = {**EXPLICIT, "data": {"directory": directory, **extra}}
    with pytest.raises(ConfigError) as err:
        config_from_mapping(raw, base_dir=tmp_path)
    assert str(err.value).startswith(expected), str(err.value)
    assert "\n" not in str(err.value)


# ---- specific errors: the message names the key path ------------------------------------------


def _with(base, path, value=..., delete=False):
    d = copy.deepcopy(base)
    *head, last = path
    cur = d
    for k in head:
        cur = cur[k]
    if delete:
        del cur[last]
    else:
        cur[last] = value
    return d


BAD = [
    (("placement", "optimizers", 2), "WG_XX", "placement.optimizers[2]: unknown optimizer"),
    (("placement", "optimizers"), ["WG_TN", "WG_TN"], "placement.optimizers[1]"),
    (("placement", "ie"), "pains", "placement.ie: expected 'panes'"),
    (("placement", "engine"), "turbo", "placement.engine"),
    (("placement", "slicing"), "cuty", "placement.slicing: expected 'pairs' or 'cutty'"),
    (("placement", "exact"), 25, "placement.exact"),
    (("placement", "exact_time_limit"), 0, "placement.exact_time_limit"),
    (("workload", "generator", "qnum"), 0, "workload.generator.qnum"),
    (("workload", "generator", "qnum"), "100", "workload.generator.qnum"),
    (("workload", "generator", "qnum"), [10, -1], "workload.generator.qnum[1]"),
    (("workload", "generator", "gen"), ["nrm", "zipf"], "workload.generator.gen[1]"),
    (("workload", "generator", "rate"), 0, "workload.generator.rate"),
    (("workload", "generator", "omax"), 0.5, "workload.generator.omax"),
    (("workload", "generator", "aggregate"), "median", "workload.generator.aggregate"),
    (("workload", "generator", "qnumm"), 3, "workload.generator.qnumm: unknown key"),
    (("cluster", "nodes"), 0, "cluster.nodes"),
    (("cluster", "nodes"), [{"capacity": 3}, {}], "cluster.nodes[1].capacity"),
    (("cluster", "nodes"), "four", "cluster.nodes"),
    (("cluster", "ray", "port"), 1, "cluster.ray.port: unknown key"),
    (("data",), {"path": "missing.tsv"}, "data.path: file not found"),
    (("data", "path"), "missing.tsv", "data.duration_s: a synthetic-feed parameter next to"),
    (("run", "mode"), "dry", "run.mode"),
    (("run", "allowed_lateness"), -1, "run.allowed_lateness"),
    (("extra",), 1, "extra: unknown key"),
]


@pytest.mark.parametrize("path,value,expected", BAD)
def test_bad_values_name_the_key(path, value, expected):
    with pytest.raises(ConfigError) as err:
        config_from_mapping(_with(GEN, path, value))
    assert str(err.value).startswith(expected), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "path,value,expected",
    [
        (("workload", "queries", 1, "range"), 0, "workload.queries[1].range"),
        (("workload", "queries", 1, "id"), "a", "workload.queries[1].id: duplicate"),
        (("workload", "queries", 0, "aggregate"), "med", "workload.queries[0].aggregate"),
        (("streams",), {"mf01": {"rate": 1}}, "streams: no rate for stream 'mf02'"),
        (("streams", "mf01", "rate"), -1, "streams.mf01.rate"),
    ],
)
def test_bad_explicit_queries(path, value, expected):
    with pytest.raises(ConfigError) as err:
        config_from_mapping(_with(EXPLICIT, path, value))
    assert str(err.value).startswith(expected), str(err.value)


LIVE = _with(_with(EXPLICIT, ("run", "mode"), "live"), ("cluster", "nodes"), 3)
DRILL = [
    {"kind": "kill", "node": "node-0", "at_batch": 2},
    {"kind": "lose", "node": "node-1", "at_batch": 4},
]


def test_fault_drill_and_live_feed_knobs():
    cfg = config_from_mapping(
        _with(_with(LIVE, ("run", "faults"), DRILL), ("run", "batch_rows"), 500)
    )
    assert [f.model_dump(exclude_none=True) for f in cfg.run.faults] == DRILL
    assert cfg.run.batch_rows == 500 and cfg.run.checkpoint_every is None
    assert "fault drill: 2 fault(s)" in cfg.summary()
    minimal = config_from_mapping(EXPLICIT)
    assert minimal.run.faults == [] and minimal.run.batch_rows == 1 << 18


def test_fault_drill_adds_nodes():
    """``kind: add``: the node id is optional (node-<k>, the smallest unused k) and later faults
    may name the added node; a capacity is taken exactly when the cluster's nodes have one."""
    drill = [
        {"kind": "add", "at_batch": 2},
        {"kind": "add", "node": 7, "at_batch": 2},
        {"kind": "kill", "node": "node-3", "at_batch": 3},
        {"kind": "lose", "node": "7", "at_batch": 4},
    ]
    cfg = config_from_mapping(_with(LIVE, ("run", "faults"), drill))
    assert [f.model_dump(exclude_none=True) for f in cfg.run.faults] == [
        {"kind": "add", "at_batch": 2},
        {"kind": "add", "node": "7", "at_batch": 2},
        *drill[2:],
    ]
    caps = _with(LIVE, ("cluster", "nodes"), [{"capacity": 2}, {"capacity": 3}])
    with pytest.raises(ConfigError, match=r"run.faults\[0\].capacity: required"):
        config_from_mapping(_with(caps, ("run", "faults"), [{"kind": "add", "at_batch": 1}]))
    ok = config_from_mapping(
        _with(caps, ("run", "faults"), [{"kind": "add", "at_batch": 1, "capacity": 2}])
    )
    assert ok.run.faults[0].capacity == 2.0
    # an unnamed add skips ids that a later add names explicitly
    both = config_from_mapping(
        _with(
            LIVE,
            ("run", "faults"),
            [
                {"kind": "add", "at_batch": 1},
                {"kind": "add", "node": "node-3", "at_batch": 2},
                {"kind": "lose", "node": "node-4", "at_batch": 3},
            ],
        )
    )
    assert len(both.run.faults) == 3


@pytest.mark.parametrize(
    "faults,expected",
    [
        ([{"kind": "explode", "node": "node-0", "at_batch": 1}], "run.faults[0].kind: expected"),
        ([{"kind": "kill", "node": "node-0", "at_batch": -1}], "run.faults[0].at_batch"),
        ([{"kind": "kill", "node": "node-0"}], "run.faults[0].at_batch: required"),
        (
            [{"kind": "kill", "node": "n9", "at_batch": 1}],
            "run.faults[0].node: unknown node 'n9'; nodes: node-0, node-1, node-2",
        ),
        (
            [
                {"kind": "lose", "node": "node-0", "at_batch": 5},
                {"kind": "kill", "node": "node-0", "at_batch": 7},
            ],
            "run.faults[1]: node 'node-0' is already lost (by run.faults[0]); nothing to kill",
        ),
        (
            [{"kind": "lose", "node": f"node-{i}", "at_batch": i} for i in range(3)],
            "run.faults[2]: losing node 'node-2' loses every node",
        ),
        (
            [{"kind": "lose", "node": "node-0", "at_batch": 1, "when": 3}],
            "run.faults[0].when: unknown",
        ),
        ([{"kind": "kill", "at_batch": 1}], "run.faults[0].node: required for kind kill"),
        (
            [{"kind": "lose", "node": "node-0", "at_batch": 1, "capacity": 2}],
            "run.faults[0].capacity: only a node added (kind: add) takes a capacity",
        ),
        ([{"kind": "add", "at_batch": 1, "capacity": 0}], "run.faults[0].capacity"),
        (
            [{"kind": "add", "at_batch": 1, "capacity": 2.0}],
            "run.faults[0].capacity: the cluster's nodes have no capacity",
        ),
        (
            [{"kind": "add", "node": "node-1", "at_batch": 1}],
            "run.faults[0].node: node 'node-1' already exists (in cluster.nodes)",
        ),
        (
            [
                {"kind": "add", "node": "x", "at_batch": 1},
                {"kind": "add", "node": "x", "at_batch": 2},
            ],
            "run.faults[1].node: node 'x' already exists (in run.faults[0])",
        ),
        (
            [
                {"kind": "kill", "node": "big", "at_batch": 1},
                {"kind": "add", "node": "big", "at_batch": 3},
            ],
            "run.faults[0]: node 'big' is added only by run.faults[1] at batch 3, after this fault",
        ),
        (
            [{"kind": "add", "at_batch": 1}]
            + [{"kind": "lose", "node": f"node-{i}", "at_batch": 2} for i in range(4)],
            "run.faults[4]: losing node 'node-3' loses every node",
        ),
    ],
)
def test_bad_fault_drills_name_the_key(faults, expected):
    with pytest.raises(ConfigError) as err:
        config_from_mapping(_with(LIVE, ("run", "faults"), faults))
    assert str(err.value).startswith(expected), str(err.value)
    with pytest.raises(ConfigError, match="run.faults: a fault drill needs a live run"):
        config_from_mapping(_with(EXPLICIT, ("run", "faults"), DRILL[:1]))
    with pytest.raises(ConfigError, match="run.batch_rows"):
        config_from_mapping(_with(LIVE, ("run", "batch_rows"), 0))


def test_yaml_syntax_and_top_level_errors(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML at line 1"):
        load_config_text("workload: [")
    with pytest.raises(ConfigError, match="empty"):
        load_config_text("")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="keys must be strings"):
        load_config_text("1: 2\n")
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="invalid YAML"):  # no Python objects from YAML
        load_config_text("workload: !!python/object/apply:os.system ['true']\n")


# ---- fuzz -------------------------------------------------------------------------------------

REQUIRED = [
    ("workload",),
    ("workload", "generator", "qnum"),
    ("workload", "generator", "smax"),
    ("workload", "generator"),
]
REQUIRED_EXPLICIT = [
    ("workload", "queries"),
    ("workload", "queries", 0, "id"),
    ("workload", "queries", 2, "range"),
    ("workload", "queries", 1, "slide"),
    ("streams",),
    ("streams", "mf02"),
]
NOT_POS_INT = st.one_of(
    st.integers(max_value=0),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=2), max_size=2),
)
NOT_NUMBER = st.one_of(
    st.text(max_size=5), st.booleans(), st.none(), st.just(float("nan")), st.just(float("inf"))
)
NOT_NAME = st.text(max_size=8).filter(
    lambda s: (
        s
        not in {
            "nrm",
            "div",
            "factors",
            "panes",
            "flatfat",
            "flatfit",
            "slickdeque",
            "slickdeque_inv",
            "slickdeque_noninv",
            "fast",
            "f1",
            "bitset",
            "simulate",
            "live",
            "sum",
            "count",
            "min",
            "max",
            "avg",
            "stddev",
            "range",
            "time",
        }
    )
)
LEAF_BAD = {
    ("workload", "generator", "qnum"): NOT_POS_INT,
    ("workload", "generator", "smax"): NOT_POS_INT,
    ("workload", "generator", "rate"): st.one_of(NOT_NUMBER, st.floats(max_value=0)),
    ("workload", "generator", "zskew"): st.one_of(NOT_NUMBER, st.floats(max_value=-1e-9)),
    ("workload", "generator", "omax"): st.one_of(NOT_NUMBER, st.floats(max_value=0.999)),
    ("workload", "generator", "gen"): st.one_of(NOT_NAME, st.lists(NOT_NAME, max_size=3)),
    ("workload", "generator", "seed"): st.one_of(st.integers(max_value=-1), st.text(max_size=3)),
    ("cluster", "nodes"): st.one_of(
        st.integers(max_value=0),
        st.text(max_size=4),
        st.booleans(),
        st.just([]),
        st.just([1, "x"]),
        st.just([{"capacity": -1}]),
        st.just([{"cap": 1}]),
    ),
    ("cluster", "ray", "address"): st.one_of(st.integers(), st.lists(st.integers(), min_size=1)),
    ("placement", "optimizers"): st.one_of(
        NOT_NAME.filter(
            lambda s: s not in ("weaveshare", "no_share", "shared", "insert_then_weave")
        ),
        st.just([]),
        st.just(["WG_TN", "nope"]),
        st.integers(),
    ),
    ("placement", "ie"): NOT_NAME,
    ("placement", "engine"): NOT_NAME,
    ("placement", "slicing"): NOT_NAME.filter(lambda s: s not in ("pairs", "cutty")),
    ("placement", "preprocess"): st.one_of(
        NOT_NAME.filter(lambda s: s not in ("none", "classes", "slides")), st.integers()
    ),
    ("placement", "exact"): st.one_of(
        st.integers(min_value=25), st.integers(max_value=-1), st.text(max_size=3), st.floats()
    ),
    ("data", "duration_s"): st.one_of(NOT_NUMBER, st.floats(max_value=0)),
    ("data", "rate_hz"): st.one_of(NOT_NUMBER, st.floats(max_value=0)),
    ("data", "seed"): st.one_of(st.integers(max_value=-1), st.floats(), st.text(max_size=3)),
    ("run", "mode"): NOT_NAME,
    ("run", "allowed_lateness"): st.one_of(
        st.integers(max_value=-1), st.text(max_size=3), st.floats()
    ),
    ("run", "output_dir"): st.one_of(st.just(""), st.integers(), st.lists(st.text(), max_size=2)),
    ("run", "seed"): st.one_of(st.integers(max_value=-1), st.text(max_size=3)),
    ("name",): st.one_of(st.just(""), st.integers(), st.booleans()),
}
EXPLICIT_LEAF_BAD = {
    ("workload", "queries", 0, "range"): NOT_POS_INT,
    ("workload", "queries", 1, "slide"): NOT_POS_INT,
    ("workload", "queries", 2, "aggregate"): NOT_NAME,
    ("workload", "queries", 0, "kind"): NOT_NAME,
    ("workload", "queries", 1, "id"): st.one_of(
        st.just(""), st.just("a"), st.booleans(), st.none()
    ),
    ("streams", "mf01", "rate"): st.one_of(NOT_NUMBER, st.floats(max_value=0)),
    ("cluster", "nodes", 1, "capacity"): st.one_of(st.floats(max_value=0), st.text(max_size=3)),
}


#: paths the OS refuses for their length or characters (sim.config.paths), for every key that
#: names a path: a name above NAME_MAX, a path above PATH_MAX, a NUL byte, a lone surrogate
BAD_OS_PATHS = st.one_of(
    st.integers(256, 6000).map(lambda n: "x" * n),
    st.integers(256, 400).map(lambda n: "in/" + "y" * n + "/f.tsv"),
    st.integers(21, 40).map(lambda k: "/".join(["z" * 200] * k)),
    st.tuples(st.text(max_size=5), st.text(max_size=5)).map(lambda t: t[0] + "\0" + t[1]),
    st.text(max_size=5).map(lambda t: t + "\ud800"),
)
PATH_KEYS = {  # where each key goes, as (section, mapping with the bad path in it)
    "data.path": lambda v: ("data", {"path": v}),
    "data.directory.path": lambda v: ("data", {"directory": {"path": v}}),
    "run.output_dir": lambda v: ("run", {"mode": "simulate", "output_dir": v}),
}


def _dict_paths(node, path=()):
    """Every mapping in the config (where an unknown key can be planted)."""
    if isinstance(node, dict):
        yield path
        for k, v in node.items():
            yield from _dict_paths(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _dict_paths(v, path + (i,))


def _get(d, path):
    for k in path:
        d = d[k]
    return d


@st.composite
def broken_config(draw):
    """A valid config with 1-3 invalidating mutations; returns (mapping, mutated sections)."""
    base_name = draw(st.sampled_from(["gen", "explicit"]))
    d = copy.deepcopy(GEN if base_name == "gen" else EXPLICIT)
    leaves = {**LEAF_BAD, **(EXPLICIT_LEAF_BAD if base_name == "explicit" else {})}
    if base_name == "explicit":
        leaves = {
            p: s
            for p, s in leaves.items()
            if p[:2] != ("workload", "generator") and p != ("cluster", "nodes")
        }
    required = REQUIRED if base_name == "gen" else REQUIRED_EXPLICIT
    sections = set()
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["unknown_key", "delete", "leaf", "dict_at_leaf", "os_path"]))
        if kind == "os_path":  # a path key the OS would refuse (its whole section replaced)
            section, value = PATH_KEYS[draw(st.sampled_from(sorted(PATH_KEYS)))](draw(BAD_OS_PATHS))
            d[section] = value
            sections.add(section)
        elif kind == "unknown_key":
            path = draw(st.sampled_from(sorted(_dict_paths(d), key=str)))
            key = "zz_" + draw(st.text("abcxyz_", min_size=1, max_size=6))
            _get(d, path)[key] = draw(st.one_of(st.integers(), st.text(max_size=3), st.none()))
            sections.add(path[0] if path else key)
        elif kind == "delete":
            path = draw(st.sampled_from(required))
            try:
                parent = _get(d, path[:-1])
                del parent[path[-1]]
            except (KeyError, IndexError, TypeError):
                continue
            sections.add(path[0])
        else:
            path = draw(st.sampled_from(sorted(leaves, key=str)))
            try:
                parent = _get(d, path[:-1])
            except (KeyError, IndexError, TypeError):
                continue
            if not isinstance(parent, (dict, list)):
                continue
            if isinstance(parent, list) and path[-1] >= len(parent):
                continue
            value = {"zz": 1} if kind == "dict_at_leaf" else draw(leaves[path])
            parent[path[-1]] = value
            sections.add(path[0])
    if not sections:  # every mutation was skipped (its parent was deleted): plant a sure one
        d["zz_top"] = 1
        sections.add("zz_top")
    return d, sections


def _assert_clear(msg: str) -> str:
    assert "\n" not in msg, msg
    assert "validation error" not in msg and "pydantic" not in msg, msg
    if "invalid YAML" in msg:
        return "yaml"
    m = PATH_RE.match(msg)
    assert m, f"message does not start with a key path: {msg!r}"
    return m.group(1)


@settings(max_examples=examples(1200), suppress_health_check=list(HealthCheck))
@given(broken_config())
def test_fuzz_mutated_configs_raise_config_error(case):
    d, sections = case
    text = yaml.safe_dump(d, allow_unicode=True)
    try:
        load_config_text(text)
    except ConfigError as exc:
        head = _assert_clear(str(exc))
        # deleting or breaking a query stream may surface as the cross-check on `streams`
        assert head in sections | {"config", "streams", "workload"}, (str(exc), sections)
    else:
        pytest.fail(f"accepted a broken config: {d}")


@settings(max_examples=examples(300), suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(PATH_KEYS)), BAD_OS_PATHS, st.sampled_from(["gen", "explicit"]))
def test_fuzz_paths_the_os_refuses_name_their_key(key, value, base):
    """A path the OS refuses for its length or characters, in any key that names one: one
    line naming that key and what is wrong, whatever the rest of the (valid) config."""
    d = copy.deepcopy(GEN if base == "gen" else EXPLICIT)
    section, mapping = PATH_KEYS[key](value)
    d[section] = mapping
    with pytest.raises(ConfigError) as err:
        load_config_text(yaml.safe_dump(d, allow_unicode=True))
    msg = str(err.value)
    assert _assert_clear(msg) == section
    assert msg.startswith(f"{key}: "), msg
    assert re.search(
        r"contains a NUL byte|cannot be written in the file system's encoding|"
        r"expected a valid string, unable to parse raw data as a unicode string|"  # pydantic
        r"a name of [\d,]+ bytes.*at most \d+ bytes per name|"
        r"bytes long as an absolute path; the system allows at most \d+",
        msg,
    ), msg
    assert len(msg) < 400, msg  # the value cut to its start and length


YAMLISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.one_of(
                st.sampled_from(SECTIONS + ("generator", "qnum", "queries", "nodes")),
                st.text(max_size=4),
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=examples(400), suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        st.text(max_size=80),
        st.lists(
            st.sampled_from(
                [
                    "workload:",
                    " generator:",
                    "  qnum: 1",
                    "- x",
                    "{",
                    "}",
                    "[",
                    ":",
                    "&a",
                    "*a",
                    "!!int x",
                    "? x",
                    "\t",
                    "'",
                    "%YAML 1.1",
                    "---",
                    "...",
                ]
            ),
            max_size=8,
        ).map("\n".join),
    )
)
def test_fuzz_random_yaml_text(text):
    with pytest.raises(ConfigError) as err:
        load_config_text(text)
    _assert_clear(str(err.value))


@settings(max_examples=examples(400), suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from(SECTIONS + ("zz",)), YAMLISH, max_size=5))
def test_fuzz_random_structures(raw):
    try:
        config_from_mapping(raw)
    except ConfigError as exc:
        _assert_clear(str(exc))


def test_yaml_aliases_do_not_explode():
    text = "a: &a [1, 1, 1]\nb: &b [*a, *a, *a]\nc: &c [*b, *b, *b]\nworkload: *c\n"
    with pytest.raises(ConfigError) as err:
        load_config_text(text)
    _assert_clear(str(err.value))


# ---- CLI --------------------------------------------------------------------------------------


def test_cli_validate_exit_codes(tmp_path):
    runner = CliRunner()
    good = runner.invoke(app, ["validate", str(ROOT / "configs" / "quickstart.yaml")])
    assert good.exit_code == 0, good.output
    assert "OK" in good.output
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(yaml.safe_dump(_with(GEN, ("placement", "optimizers", 2), "WG_XX")))
    bad = runner.invoke(app, ["validate", str(bad_file)])
    assert bad.exit_code == 2
    assert "placement.optimizers[2]: unknown optimizer 'WG_XX'" in bad.output
    missing = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2
    assert "config file not found" in missing.output
    assert "Traceback" not in bad.output + missing.output


def test_config_model_is_importable_for_code():
    """Code can build a Config without YAML (same validation): the values of the mapping, the
    same model as ``config_from_mapping`` builds, and the same check naming the key."""
    from pydantic import ValidationError

    cfg = Config.model_validate(GEN)
    assert cfg.model_dump() == config_from_mapping(GEN).model_dump()
    assert cfg.name == "fuzz"
    assert cfg.placement.optimizer_list == ["WG_TN", "WG_I", "WG_LS", "weaveshare"]
    assert cfg.placement.exact_max_queries == 8
    assert cfg.cluster.layouts() == [
        (["node-0", "node-1"], [None, None]),
        (["node-0", "node-1", "node-2", "node-3"], [None] * 4),
    ]
    assert len(cfg.points()) == 2 * 2 * 2  # qnum x gen x nodes
    assert (cfg.data.duration_s, cfg.data.rate_hz, cfg.data.seed) == (10.0, 100.0, 1)
    assert cfg.run.mode == "simulate" and cfg.run.output_dir == "out/x"
    with pytest.raises(ValidationError, match=r"placement.optimizers\[2\]: unknown optimizer"):
        Config.model_validate(_with(GEN, ("placement", "optimizers", 2), "WG_XX"))


def test_run_on_cluster_passes_the_drill_to_run_file(tmp_path, monkeypatch):
    """``weaveplace run``'s path (sim.cluster_run.run_on_cluster) hands batch_rows,
    checkpoint_every and the drill to cluster.runs.file_run.run_file (Ray and Spark replaced by
    a recorder here)."""
    import cluster.runs.file_run
    from cluster.answers.blocks import empty_answers, empty_late
    from cluster.deployment.result import RunResult
    from sim.cluster_run import run_on_cluster

    seen = {}

    def fake_run_file(plan, data_path, out_dir, *, runtime, deployment, feed, then=None):
        from cluster.runs.startup import load_plan  # the plan is made while Ray starts

        seen.update(runtime=runtime, deployment=deployment, feed=feed, plan=load_plan(plan))
        return RunResult(empty_answers(), empty_late(), {"feed": {"rows": 0}})

    monkeypatch.setattr(cluster.runs.file_run, "run_file", fake_run_file)
    raw = _with(
        _with(_with(LIVE, ("run", "faults"), DRILL), ("run", "batch_rows"), 300),
        ("run", "checkpoint_every"),
        4,
    )
    raw["data"] = {"duration_s": 2.0}
    raw["placement"] = {"optimizers": "WG_TN", "ie": "slickdeque"}
    cfg = config_from_mapping(raw)
    run_on_cluster(cfg, tmp_path / "out")
    assert list(seen["deployment"].faults) == DRILL and seen["feed"].batch_rows == 300
    assert seen["deployment"].checkpoint_every == 4 and seen["runtime"].ray_address is None
    assert [n["id"] for n in seen["plan"]["nodes"]] == ["node-0", "node-1", "node-2"]
    assert seen["plan"]["slicing"] == "pairs"
    # placement.slicing: cutty -> the plan handed to the cluster is priced under Cutty
    from placement.plan import verify_plan

    raw["placement"]["slicing"] = "cutty"
    run_on_cluster(config_from_mapping(raw), tmp_path / "out2")
    assert seen["plan"]["slicing"] == "cutty" and verify_plan(seen["plan"]) == []


def test_run_on_cluster_passes_an_add_drill_without_empty_keys(tmp_path, monkeypatch):
    """An ``add`` fault reaches run_file as written (no ``node``/``capacity: None`` keys, so
    ``cluster.deployment.drills.check_faults`` names the node itself); summary lines say what moved."""
    import cluster.runs.file_run
    from cluster.answers.blocks import empty_answers, empty_late
    from cluster.deployment.drills import check_faults
    from cluster.deployment.result import RunResult
    from sim.cluster_run import drill_lines, run_on_cluster

    seen = {}

    def fake_run_file(plan, data_path, out_dir, *, runtime, deployment, feed, then=None):
        seen.update(faults=list(deployment.faults))
        return RunResult(empty_answers(), empty_late(), {"feed": {"rows": 0}})

    monkeypatch.setattr(cluster.runs.file_run, "run_file", fake_run_file)
    drill = [{"kind": "add", "at_batch": 1}, {"kind": "kill", "node": "node-3", "at_batch": 2}]
    raw = _with(LIVE, ("run", "faults"), drill)
    raw["data"] = {"duration_s": 2.0}
    raw["placement"] = {"optimizers": "WG_TN", "ie": "slickdeque"}
    run_on_cluster(config_from_mapping(raw), tmp_path / "out")
    assert seen["faults"] == drill
    assert [f["node"] for f in check_faults(seen["faults"], ["node-0", "node-1", "node-2"])] == [
        "node-3",
        "node-3",
    ]
    rec = {
        "node": "node-3",
        "before_batch": 1,
        "reason": "fault drill at batch 1",
        "moved": 2,
        "trees": {"t0": "node-0", "t4": "node-0"},
        "snapshot_seq": 0,
        "planned": {"max_change": -1.5, "total_change": 0.0},
    }
    assert drill_lines({"additions": [rec]}) == [
        "node node-3 added before batch 1 (fault drill at batch 1): 2 tree(s) moved to it "
        "(from node-0: 2), restored from their hosts' snapshots after batch 0; MaxCost -1.5, "
        "TotalCost +0"
    ]


def test_run_on_cluster_passes_drill_and_spark_to_both_feeds(monkeypatch, tmp_path):
    """A file run and a watched-directory run get the same drill knobs (batch_rows,
    checkpoint_every, faults) and the caller's Spark session (Ray and Spark replaced by
    recorders): in directory mode the drill counts the feed batches of the files."""
    import cluster.runs.directory_run
    import cluster.runs.file_run
    from cluster.answers.blocks import empty_answers, empty_late
    from cluster.deployment.result import RunResult
    from cluster.feeds.directory_options import StreamStats
    from cluster.runs.directory_run import StreamResult
    from sim.cluster_run import run_on_cluster

    seen: dict[str, dict] = {}

    def fake_run_file(plan, data_path, out_dir, *, runtime, deployment, feed, then=None):
        seen["file"] = dict(runtime=runtime, deployment=deployment, feed=feed)
        return RunResult(empty_answers(), empty_late(), {"feed": {"rows": 0}})

    def fake_run_directory(plan, directory, out_dir, *, stream, runtime, deployment, progress):
        seen["stream"] = dict(runtime=runtime, deployment=deployment, stream=stream)
        return StreamResult(StreamStats(), {"feed": {"rows": 0}}, Path(out_dir))

    monkeypatch.setattr(cluster.runs.file_run, "run_file", fake_run_file)
    monkeypatch.setattr(cluster.runs.directory_run, "run_directory", fake_run_directory)
    (tmp_path / "in").mkdir()
    raw = _with(
        _with(_with(LIVE, ("run", "faults"), DRILL), ("run", "batch_rows"), 300),
        ("run", "checkpoint_every"),
        4,
    )
    raw["placement"] = {"optimizers": "WG_TN", "ie": "slickdeque"}
    spark = object()
    run_on_cluster(
        config_from_mapping({**raw, "data": {"duration_s": 2.0}}), tmp_path / "o1", spark=spark
    )
    run_on_cluster(
        load_config_text(yaml.safe_dump({**raw, "data": {"directory": {"path": "in"}}}), tmp_path),
        tmp_path / "o2",
        spark=spark,
    )
    for kind in ("file", "stream"):
        dep, runtime = seen[kind]["deployment"], seen[kind]["runtime"]
        assert list(dep.faults) == DRILL and dep.checkpoint_every == 4 and runtime.spark is spark
    assert seen["file"]["feed"].batch_rows == 300 and seen["stream"]["stream"].batch_rows == 300


def test_data_extra_columns_reaches_run_file_and_old_names_are_unknown(tmp_path, monkeypatch):
    """``data.extra_columns`` is validated (one line naming the key), handed to run_file,
    refused for generated data; a query naming an old column name (b11) is refused."""
    import cluster.runs.file_run
    from cluster.answers.blocks import empty_answers, empty_late
    from cluster.deployment.result import RunResult
    from sim.cluster_run import run_on_cluster

    seen = {}

    def fake_run_file(plan, data_path, out_dir, *, runtime, deployment, feed, then=None):
        seen.update(extra_columns=feed.extra_columns, data_path=data_path)
        return RunResult(empty_answers(), empty_late(), {"feed": {"rows": 0}})

    monkeypatch.setattr(cluster.runs.file_run, "run_file", fake_run_file)
    feed = tmp_path / "feed.txt"
    feed.write_bytes(b"")
    raw = dict(
        LIVE,
        data={"path": str(feed), "extra_columns": "ignore"},
        placement={"optimizers": "WG_TN", "ie": "slickdeque"},
    )
    run_on_cluster(config_from_mapping(raw), tmp_path / "out")
    assert seen["extra_columns"] == "ignore" and seen["data_path"] == str(feed.resolve())
    raw["data"] = {"path": str(feed)}
    run_on_cluster(config_from_mapping(raw), tmp_path / "out")
    assert seen["extra_columns"] == "reject"
    for data, needle in (
        ({"path": str(feed), "extra_columns": "keep"}, "data.extra_columns"),
        ({"extra_columns": "ignore"}, "data.extra_columns: applies to DEBS"),
    ):
        with pytest.raises(ConfigError) as err:
            config_from_mapping(dict(raw, data=data))
        assert str(err.value).startswith(needle) and "\n" not in str(err.value)
    old = _with(
        raw,
        ("workload",),
        {
            "queries": [
                {"id": "q", "stream": "b11", "aggregate": "max", "range": 1000, "slide": 500}
            ]
        },
    )
    old["streams"] = {"b11": {"rate": 0.1}}
    with pytest.raises(ConfigError, match=r"'b11' is not a column of the data"):
        run_on_cluster(config_from_mapping(old), tmp_path / "out")
    ok = _with(old, ("workload", "queries", 0, "stream"), "pp31")
    ok["streams"] = {"pp31": {"rate": 0.1}}
    run_on_cluster(config_from_mapping(ok), tmp_path / "out")  # a real column name: accepted


def test_a_file_runs_plan_is_made_beside_the_start_and_its_error_stays_a_config_error(
    tmp_path, monkeypatch
):
    """``run_on_cluster`` makes a file run's plan on a thread while Ray and Spark start
    (``sim.cluster_run.in_background``): ``run_file`` gets a callable that waits for it; a
    plan that cannot be made (a ``ConfigError`` from the optimizer) is raised where the plan
    is waited for, and leaves ``run_on_cluster`` as the same ``ConfigError``."""
    import json
    import threading

    import cluster.runs.file_run
    import sim.cluster_run as cr
    from cluster.answers.blocks import empty_answers, empty_late
    from cluster.deployment.result import RunResult
    from cluster.runs.startup import load_plan

    seen = {}

    def fake_run_file(plan, data_path, out_dir, *, runtime, deployment, feed, then=None):
        assert callable(plan)
        seen["plan"] = load_plan(plan)
        return RunResult(empty_answers(), empty_late(), {"feed": {"rows": 0}})

    real_plan_for = cr.plan_for

    def plan_for(*args, **kw):
        seen["thread"] = threading.current_thread()
        return real_plan_for(*args, **kw)

    monkeypatch.setattr(cluster.runs.file_run, "run_file", fake_run_file)
    monkeypatch.setattr(cr, "plan_for", plan_for)
    raw = dict(LIVE, data={"duration_s": 2.0}, placement={"optimizers": "WG_TN"})
    summary = cr.run_on_cluster(config_from_mapping(raw), tmp_path / "out")
    assert seen["thread"] is not threading.current_thread() and seen["thread"].daemon
    assert seen["plan"] == json.loads((tmp_path / "out" / "plan.json").read_text())
    assert summary.nodes == len(seen["plan"]["nodes"]) == 3

    def no_plan(*args, **kw):
        raise ConfigError("placement.choose: no plan meets max_cost <= 1")

    monkeypatch.setattr(cr, "plan_for", no_plan)
    with pytest.raises(ConfigError, match="no plan meets"):
        cr.run_on_cluster(config_from_mapping(raw), tmp_path / "out2")
