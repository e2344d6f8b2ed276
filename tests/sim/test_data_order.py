"""``data.order`` (the order a file is read in) from the YAML, without Ray or Spark: validated
like every key, handed to the file feed, refused in one line where it cannot hold (with a
watched directory or generated data, ``time`` on the executor route, sliced mode replaying a
file out of time order); and ``cluster.feeds.file_order`` (the driver route's file-order
reading and its time-order check) against a brute force on small random files.  The runs
themselves are tests/cluster/runs/test_file_order_runs.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers import examples, live_config
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.feeds.file_order import file_order_batches, first_disorder
from sim.config import ConfigError, config_from_mapping


def _with_file(path, **data) -> dict:
    raw = live_config("WG_TN", "slickdeque")
    raw["data"] = {"path": str(path), **data}
    return raw


def _debs_file(path, ts) -> None:
    ts = np.asarray(ts, dtype=np.int64)
    pq.write_table(pa.table({"ts_ms": ts, "mf01": np.arange(ts.shape[0])}), path)


def test_order_defaults_to_file_and_reaches_the_feed(tmp_path):
    from sim.run_options import file_feed_options

    _debs_file(tmp_path / "d.parquet", [1, 2, 3])
    cfg = config_from_mapping(_with_file(tmp_path / "d.parquet"))
    assert cfg.data.order == "file" and file_feed_options(cfg).order == "file"
    cfg = config_from_mapping(_with_file(tmp_path / "d.parquet", order="time"))
    assert file_feed_options(cfg).order == "auto"  # sorted on the driver where not in order
    generated = config_from_mapping(live_config("WG_TN", "slickdeque"))
    assert file_feed_options(generated).order == "file"  # generated data is in time order


@pytest.mark.parametrize(
    "change, message",
    [
        ({"data": {"order": "sorted"}}, r"data\.order.*'file'.*'time'"),
        ({"data": {"order": "time"}, "run": {"feed": "executors"}}, r"data\.order: 'time' sorts"),
        ({"directory": True, "data": {"order": "file"}}, r"data\.order: applies to a file .*"),
        ({"generated": True, "data": {"order": "time"}}, r"generated data is in time order"),
    ],
    ids=["unknown", "time-on-executors", "directory", "generated"],
)
def test_order_refused_in_one_line(change, message, tmp_path):
    _debs_file(tmp_path / "d.parquet", [1, 2, 3])
    raw = _with_file(tmp_path / "d.parquet")
    if change.get("directory"):
        raw["data"] = {"directory": {"path": str(tmp_path)}}
    if change.get("generated"):
        raw["data"] = {}
    raw["data"].update(change.get("data", {}))
    raw["run"].update(change.get("run", {}))
    with pytest.raises(ConfigError, match=message) as ei:
        config_from_mapping(raw)
    assert "\n" not in str(ei.value)


def _validate(tmp_path, raw):
    from typer.testing import CliRunner

    from sim.cli import app

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(app, ["validate", str(path)])
    return res.exit_code, [x for x in res.output.splitlines() if x.strip()], res.output


def test_validate_refuses_sliced_mode_replaying_a_disordered_file(tmp_path):
    """Sliced mode aggregates in time order: with ``data.order: file`` (the default) a file out
    of time order is refused before any start-up, on either feed route, naming the first row
    out of order; ``data.order: time`` (driver route) is accepted, and so is a sorted file."""
    _debs_file(tmp_path / "bad.parquet", [10, 20, 15, 30])
    _debs_file(tmp_path / "good.parquet", [10, 20, 20, 30])
    for feed in ("driver", "executors"):
        raw = _with_file(tmp_path / "bad.parquet")
        raw["run"].update({"feed_mode": "sliced", "feed": feed})
        code, lines, out = _validate(tmp_path, raw)
        assert code == 2 and "Traceback" not in out and len(lines) == 1, out
        assert "data.order: bad.parquet is not in time order (row 2: ts_ms 15 after 20)" in out
        assert "data.order: time" in lines[0] and "feed_mode: raw" in lines[0]
    raw = _with_file(tmp_path / "bad.parquet", order="time")
    raw["run"]["feed_mode"] = "sliced"
    assert _validate(tmp_path, raw)[0] == 0
    raw = _with_file(tmp_path / "good.parquet")
    raw["run"]["feed_mode"] = "sliced"
    assert _validate(tmp_path, raw)[0] == 0


def _oracle_first_disorder(ts):
    newest = None
    for i, t in enumerate(ts):
        if newest is not None and t < newest:
            return i, t, newest
        newest = t if newest is None else max(newest, t)
    return None


@settings(max_examples=examples(60))
@given(
    ts=st.lists(st.integers(-5, 40), min_size=0, max_size=60),
    group=st.integers(1, 9),
    batch=st.integers(1, 7),
)
def test_first_disorder_and_file_order_batches_equal_the_brute_force(ts, group, batch):
    """Any small file, any row-group and batch size: the first row older than a row before it
    (with that row's timestamp and the newest before it), and the rows back in file order."""
    t = pa.table({"ts_ms": pa.array(ts, pa.int64()), "v": pa.array(range(len(ts)), pa.int64())})
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.parquet"
        pq.write_table(t, path, row_group_size=group)
        assert first_disorder(path, batch_rows=batch) == _oracle_first_disorder(ts)
        got = list(file_order_batches(path, ["ts_ms", "v"], batch))
    assert all(0 < b.num_rows <= batch for b in got)
    back = pa.Table.from_batches(got, schema=t.schema) if got else t.slice(0, 0)
    assert back.equals(t)


def test_run_file_refuses_sliced_file_order_on_a_disordered_file_before_starting(tmp_path):
    """The Python entry point (``run_file``) makes the same refusal as ``weaveplace validate``
    before Ray, Spark or an actor starts (the runtime passed in is never touched)."""
    from cluster.deployment.options import DeploymentOptions
    from cluster.deployment.specs import DeploymentError
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    _debs_file(tmp_path / "bad.parquet", [10, 20, 15, 30])
    with pytest.raises(DeploymentError, match=r"row 2: ts_ms 15 after 20") as ei:
        run_file(
            {"queries": [], "nodes": []},
            tmp_path / "bad.parquet",
            tmp_path / "out",
            runtime=RuntimeOptions(ray_address="ray://unused:1", spark_master="unused"),
            deployment=DeploymentOptions(mode="sliced"),
            feed=FileFeedOptions(order="file"),
        )
    assert "\n" not in str(ei.value) and not (tmp_path / "out").exists()
