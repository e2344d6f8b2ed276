"""``data.order`` through ``weaveplace run``'s path (``sim.cluster_run.run_on_cluster``, what the
CLI calls, on the session's Ray and Spark) from YAML: a file out of time order, with disorder
within ``run.allowed_lateness`` and rows later than it, gives on both feed routes and both
answer routes the brute force replaying the file order (``support.cluster_oracles
.file_order_oracle``), answers and late tuples; ``data.order: time`` gives the sorted file's
brute force, nothing late, in raw and sliced mode.  Every run is checked against the same
oracle, so the routes equal each other too."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_oracles import assert_answers_close, file_order_oracle

from sim.config import config_from_mapping
from sim.debs_generator import generate_debs

pytestmark = pytest.mark.cluster

LATENESS = 300  # ms; the data is 100 Hz, so ~30 tuples


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``sorted`` (10 s at 100 Hz) and ``disordered``: every row delayed by up to 250 ms of
    event time (< LATENESS), then 8 rows moved 3-4.5 s later in the file (late); ``text``:
    ``disordered`` as DEBS text."""
    from cluster.debs import format as debs_format
    from cluster.debs.format import BOOL_COLUMNS, INT_COLUMNS

    d = tmp_path_factory.mktemp("file_order")
    generate_debs(d / "sorted.parquet", duration_s=10, rate_hz=100, seed=17)
    full = pq.read_table(d / "sorted.parquet")
    t = full.select(["ts_ms", "index", "mf01", "mf02"])
    pq.write_table(t, d / "sorted.parquet")
    ts = t.column("ts_ms").to_numpy()
    rng = np.random.default_rng(8)
    rows = list(np.argsort(ts + rng.integers(0, 251, ts.shape[0]), kind="stable"))
    for i in sorted(rng.choice(np.arange(100, len(rows) - 500), 8, replace=False))[::-1]:
        rows.insert(i + int(rng.integers(300, 450)), rows.pop(i))
    pq.write_table(t.take(pa.array(rows)), d / "disordered.parquet", row_group_size=250)
    text = full.take(pa.array(rows))
    cols = {c: text.column(c).to_numpy(zero_copy_only=False) for c in INT_COLUMNS + BOOL_COLUMNS}
    (d / "disordered.tsv").write_bytes(
        debs_format.tsv_bytes(text.column("ts_ms").to_numpy() * 10_000, cols)
    )
    return {
        "sorted": d / "sorted.parquet",
        "disordered": d / "disordered.parquet",
        "text": d / "disordered.tsv",
    }


def _config(path, out, **run) -> dict:
    q = [
        ("s", "mf01", "sum", 500, 200),
        ("x", "mf01", "max", 300, 300),
        ("a", "mf02", "avg", 1000, 300),
        ("n", "mf02", "min", 200, 500),  # hopping: gaps no window covers
        ("c", "mf02", "count", 700, 250),
    ]
    return {
        "workload": {
            "queries": [
                {"id": i, "stream": s, "aggregate": a, "range": r, "slide": sl}
                for i, s, a, r, sl in q
            ]
        },
        "streams": {"mf01": {"rate": 0.1}, "mf02": {"rate": 0.1}},
        "cluster": {"nodes": 2},
        "placement": {"optimizers": "WG_TN", "ie": "slickdeque"},
        "data": {"path": str(path)},
        "run": {
            "mode": "live",
            "output_dir": str(out),
            "allowed_lateness": LATENESS,
            "batch_rows": 128,
            **run,
        },
    }


def _run(raw: dict, spark):
    import json

    from sim.cluster_run import run_on_cluster

    summary = run_on_cluster(config_from_mapping(copy.deepcopy(raw)), spark=spark)
    out = summary.out_dir
    answers = pq.read_table(out / "answers.parquet").sort_by(
        [("query_id", "ascending"), ("window_start", "ascending")]
    )
    late = pq.read_table(out / "late.parquet")
    late_rows = sorted(
        (r["tree_id"], r["ts_ms"], float(r["value"]))
        for r in late.select(["tree_id", "ts_ms", "value"]).to_pylist()
    )
    return summary, json.loads((out / "plan.json").read_text()), answers, late_rows


@pytest.mark.parametrize(
    "route",
    [
        {"feed": "driver", "answers": "driver"},
        # the other routes, ~7-14 s each here: make test-scenarios (make test stays under 8
        # min; the executor feed and the actor route each keep a make-test run in
        # tests/cluster/answers/test_driver_out.py, the two together in make test-hosts)
        pytest.param({"feed": "driver", "answers": "actors"}, marks=pytest.mark.scenario),
        pytest.param({"feed": "executors", "answers": "driver"}, marks=pytest.mark.scenario),
        pytest.param({"feed": "executors", "answers": "actors"}, marks=pytest.mark.scenario),
    ],
    ids=["driver-driver", "driver-actors", "executors-driver", "executors-actors"],
)
def test_file_order_equals_the_brute_force_on_every_route(
    route, files, ray_session, spark, tmp_path
):
    """The default ``data.order: file``: the file's own order on every route; rows within the
    lateness are folded in (nothing late among them), rows later than it are late, the same
    ones as the brute force's."""
    raw = _config(files["disordered"], tmp_path / "out", **route)
    summary, plan, answers, late = _run(raw, spark)
    assert summary.metrics["feed"]["route"] == route["feed"]
    want, want_late = file_order_oracle(plan, files["disordered"], LATENESS)
    assert late == want_late and late and summary.late == len(late)
    assert_answers_close(answers, want)
    in_time_order, none_late = file_order_oracle(plan, files["sorted"], LATENESS)
    assert not none_late and want.to_pylist() != in_time_order.to_pylist()  # late rows left out


@pytest.mark.parametrize("mode", ["raw", "sliced"])
def test_time_order_equals_the_sorted_files_brute_force(mode, files, ray_session, spark, tmp_path):
    """``data.order: time`` sorts the disordered file on the driver route: nothing is late,
    the answers are the sorted file's, in raw and sliced mode."""
    raw = _config(files["disordered"], tmp_path / "out", feed_mode=mode)
    raw["data"]["order"] = "time"
    summary, plan, answers, late = _run(raw, spark)
    assert summary.metrics["feed"]["mode"] == mode and summary.metrics["feed"]["order"] == "auto"
    want, want_late = file_order_oracle(plan, files["sorted"], LATENESS)
    assert not want_late and not late and summary.late == 0
    assert_answers_close(answers, want)


@pytest.mark.scenario  # ~12 s here: make test-scenarios (make test stays under 8 min)
def test_a_text_file_in_file_order_equals_its_conversion(files, ray_session, spark, tmp_path):
    """DEBS text in ``data.order: file``: its lines' order is the rows' order, so the answers
    and late tuples are the brute force's over the disordered Parquet file holding the same
    rows; in sliced mode the same file is refused in one line once Spark has parsed it."""
    from cluster.deployment.specs import DeploymentError

    summary, plan, answers, late = _run(_config(files["text"], tmp_path / "raw"), spark)
    want, want_late = file_order_oracle(plan, files["disordered"], LATENESS)
    assert late == want_late and late
    assert_answers_close(answers, want)
    raw = _config(files["text"], tmp_path / "sliced", feed_mode="sliced")
    with pytest.raises(DeploymentError, match=r"disordered\.tsv is not in time order") as ei:
        _run(raw, spark)
    assert "\n" not in str(ei.value) and "data.order: time" in str(ei.value)
