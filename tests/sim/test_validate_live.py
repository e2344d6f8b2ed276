"""``weaveplace validate`` makes the checks of the command that will run the config, with the
same one-line messages and exit code 2 as ``weaveplace run``.  Every case
fails before any work, so ``run`` here starts neither Ray nor Spark."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from sim.cli import app

BASE = {
    "workload": {
        "queries": [{"id": "q1", "stream": "mf01", "aggregate": "max", "range": 1000, "slide": 500}]
    },
    "streams": {"mf01": {"rate": 0.1}},
    "run": {"mode": "live"},
}


def _both(tmp_path, raw):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    runner = CliRunner()
    v = runner.invoke(app, ["validate", str(path)])
    r = runner.invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    return v, r


def _error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.output
    return lines[0]


def _parquet(path, cols):
    ts = np.arange(0, 5000, 10, dtype=np.int64)
    pq.write_table(pa.table({"ts_ms": ts, **{c: ts % 7 for c in cols}}), path)


@pytest.mark.parametrize(
    "case, needle",
    [
        ("no optimizer", "placement.optimizers: a live run takes one optimizer"),
        ("two workloads", "a live run takes one workload and one cluster layout"),
        ("not a column", "workload.queries[0].stream: 'zz01' is not a column of the data"),
        ("parquet lacks column", "workload.queries[0].stream: 'mf01' is not a column of the data"),
        ("unreadable parquet", "data.path: cannot read"),
        ("no ts_ms", "has no ts_ms column"),
    ],
)
def test_validate_refuses_what_run_refuses(tmp_path, case, needle):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    if case != "no optimizer":
        raw["placement"] = {"optimizers": "WG_TN"}
    if case == "two workloads":
        raw["cluster"] = {"nodes": [1, 2]}
    elif case == "not a column":
        raw["workload"]["queries"][0]["stream"] = "zz01"
        raw["streams"] = {"zz01": {"rate": 0.1}}
    elif case == "parquet lacks column":
        _parquet(tmp_path / "d.parquet", ["mf02"])
        raw["data"] = {"path": "d.parquet"}
    elif case == "unreadable parquet":
        (tmp_path / "d.parquet").write_bytes(b"not parquet at all")
        raw["data"] = {"path": "d.parquet"}
    elif case == "no ts_ms":
        pq.write_table(pa.table({"mf01": np.arange(10)}), tmp_path / "d.parquet")
        raw["data"] = {"path": "d.parquet"}
    v, r = _both(tmp_path, raw)
    assert v.exit_code == 2 and r.exit_code == 2, (v.output, r.output)
    assert needle in _error_line(v)
    assert _error_line(v) == _error_line(r)  # the same check, the same message
    assert not (tmp_path / "out").exists()  # run refused before any work


def test_validate_accepts_a_parquet_with_the_columns(tmp_path):
    _parquet(tmp_path / "d.parquet", ["mf01", "extra"])
    raw = {**BASE, "placement": {"optimizers": "WG_TN"}, "data": {"path": "d.parquet"}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "OK" in res.output, res.output


def test_validate_simulate_mode_applies_simulate_rules(tmp_path):
    raw = {**BASE, "run": {"mode": "simulate"}}  # two optimizers by default: fine to simulate
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "OK" in res.output and "mode=simulate" in res.output
