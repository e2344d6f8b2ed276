"""``run.feed_mode`` (raw or sliced) from the YAML: validated and refused where it is not exact
(count windows), accepted with a watched directory and ``weaveplace serve``, handed to the
deployment, and
``weaveplace run``'s path (``sim.cluster_run.run_on_cluster``, in-process on the session's Ray
and Spark) in sliced mode gives the brute force's answers on both feed routes, with the actors
writing the answers on the executor route."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers import live_config

from executors.oracle import brute_force
from sim.config import ConfigError, config_from_mapping


def _sliced(**run) -> dict:
    raw = live_config("WG_TN", "slickdeque")
    raw["run"].update({"feed_mode": "sliced", **run})
    return raw


def test_feed_mode_validated_and_handed_to_the_deployment(tmp_path):
    from sim.run_options import deployment_options

    assert config_from_mapping(live_config("WG_TN", "slickdeque")).run.feed_mode == "raw"
    cfg = config_from_mapping(_sliced())
    assert deployment_options(cfg, tmp_path).mode == "sliced"
    assert "feed_mode=sliced" in cfg.summary()  # what `weaveplace validate` prints
    bad = _sliced()
    bad["run"]["feed_mode"] = "slices"
    with pytest.raises(ConfigError, match=r"run\.feed_mode") as ei:
        config_from_mapping(bad)
    assert "raw" in str(ei.value) and "sliced" in str(ei.value) and "\n" not in str(ei.value)
    watched = _sliced()
    watched["data"] = {"directory": {"path": str(tmp_path)}}
    assert config_from_mapping(watched).run.feed_mode == "sliced"
    counts = _sliced()
    counts["workload"]["queries"].append(
        {"id": "n1", "stream": "mf01", "aggregate": "sum", "range": 8, "slide": 4, "kind": "count"}
    )
    with pytest.raises(ConfigError, match=r"time windows only.*\['n1'\]"):
        config_from_mapping(counts)


def test_serve_takes_sliced_mode(tmp_path):
    import yaml

    from sim.serve_start import prepare

    raw = _sliced(output_dir=str(tmp_path / "svc"))
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert prepare(path, None)[0].run.feed_mode == "sliced"


def _check(raw, out, summary):
    data = pq.read_table(out / "data.parquet", columns=["ts_ms", "mf01"])
    ts, v = data["ts_ms"].to_numpy(), data["mf01"].to_numpy()
    got = pq.read_table(out / "answers.parquet").to_pylist()
    assert summary.tuples == len(ts) > 300 and summary.answers == len(got) > 0
    assert summary.metrics["feed"]["mode"] == "sliced" and summary.metrics["feed"]["slices"] > 0
    for q in raw["workload"]["queries"]:
        want, late = brute_force([{k: q[k] for k in ("id", "aggregate", "range", "slide")}], ts, v)
        assert not late
        mine = sorted(
            (r["window_start"], r["window_end"], r["value"])
            for r in got
            if r["query_id"] == q["id"]
        )
        assert [(s, e) for s, e, _ in mine] == [(s, e) for _, s, e, _ in want], q["id"]
        np.testing.assert_allclose([x for *_, x in mine], [x for *_, x in want], rtol=1e-9)


@pytest.mark.parametrize(
    "route",
    [
        {},
        # ~9 s here: make test-scenarios (make test stays under 8 min)
        pytest.param({"feed": "executors", "answers": "actors"}, marks=pytest.mark.scenario),
    ],
    ids=["driver", "executors"],
)
def test_weaveplace_run_in_sliced_mode_equals_the_brute_force(route, ray_session, spark, tmp_path):
    from sim.cluster_run import run_on_cluster

    raw = _sliced(output_dir=str(tmp_path / "out"), **route)
    summary = run_on_cluster(config_from_mapping(copy.deepcopy(raw)), spark=spark)
    assert summary.metrics["feed"]["route"] == route.get("feed", "driver")
    _check(raw, tmp_path / "out", summary)


def test_validate_refuses_sliced_count_windows_in_one_line(tmp_path):
    """`weaveplace validate`: exit 2 and one line naming the key, no traceback."""
    import yaml
    from typer.testing import CliRunner

    from sim.cli import app

    raw = _sliced()
    raw["workload"]["queries"][0]["kind"] = "count"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "run.feed_mode: 'sliced' runs time windows only" in lines[0]
