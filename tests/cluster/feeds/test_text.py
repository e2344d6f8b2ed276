"""A DEBS *text* file as the input of a live run (``cluster.feeds.text``), raw and sliced.

Oracle: the rows the reader keeps (the converted Parquet file, ``cluster.debs.reader.convert_debs``)
answered by the brute force of ``executors.oracle``; the live run over the damaged text (glued
records, a trailing extra column, garbage, disorder across Spark's byte ranges) must give
exactly those answers, the same as a live run over the converted file, with the rejects of a
whole-file read in ``rejects/<file>.rejects.tsv``.  One Ray and one Spark for the session.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cluster_plans import make_plan

from cluster.debs.reader import convert_debs
from executors.oracle import brute_force
from placement.queries import Query
from sim.debs_generator import generate_debs

pytestmark = [pytest.mark.cluster, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

QUERIES = [
    Query("s1", 1000, 1000, "sum", "mf01", "time"),
    Query("m1", 2500, 500, "max", "mf02", "time"),
    Query("a1", 1700, 400, "avg", "mf03", "time"),
    Query("n1", 3000, 750, "min", "mf01", "time"),
    Query("c1", 64, 24, "count", "mf02", "count"),
]


def _damage(lines: list[bytes], swap: bool) -> bytes:
    """Glue lines 10+11 and 200+201 (one with a lone CR), give line 30 and 400 a machine id,
    add garbage and a blank line; ``swap``: exchange two lines far apart (disorder)."""
    out = list(lines)
    if swap:
        out[150], out[900] = out[900], out[150]
    out[30] += b"\tm-07"
    out[400] += b"\tm-07"
    out[10] = out[10] + out[11]
    out[200] = out[200] + b"\r" + out[201]
    del out[201], out[11]
    out.insert(500, b"garbage\tline")
    out.insert(700, b"")
    return b"\r\n".join(out) + b"\r\n"


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    generate_debs(d / "clean.txt", duration_s=20, rate_hz=100, seed=4, fmt="tsv")
    lines = (d / "clean.txt").read_bytes()[:-2].split(b"\r\n")
    out = {}
    for name, swap in (("ordered.txt", False), ("swapped.txt", True)):
        p = d / name
        p.write_bytes(_damage(lines, swap))
        for extra in ("ignore", "reject"):
            conv = d / f"{name}.{extra}.parquet"
            st = convert_debs(
                p, conv, rejects_path=d / f"{name}.{extra}.rejects.tsv", extra_columns=extra
            )
            assert st.glued_lines == 2
            assert (st.extra_column_lines, st.rows_rejected) == (
                (2, 2) if extra == "ignore" else (0, 4)
            )
            out[name, extra] = (p, conv)
    plans = {
        "raw": make_plan(QUERIES, n_nodes=2),  # sliced mode runs time windows only
        "sliced": make_plan([q for q in QUERIES if q.kind == "time"], n_nodes=2),
    }
    return {"dir": d, "files": out, "plans": plans}


def _oracle(table: pa.Table, queries) -> pa.Table:
    """Brute-force answers over the rows in (ts_ms, index) order, per query."""
    t = table.sort_by([("ts_ms", "ascending"), ("index", "ascending")])
    rows = []
    for q in queries:
        ans, late = brute_force([q], t["ts_ms"].to_numpy(), t[q.stream].to_numpy())
        assert late == []
        rows += ans
    rows.sort(key=lambda r: (r[0], r[1]))
    return pa.table(
        {
            "query_id": [r[0] for r in rows],
            "window_start": [r[1] for r in rows],
            "window_end": [r[2] for r in rows],
            "value": [float(r[3]) for r in rows],
        }
    )


def _answers(res) -> pa.Table:
    a = res.answers.sort_by([("query_id", "ascending"), ("window_start", "ascending")])
    return a.set_column(3, "value", a["value"].cast(pa.float64()))


def _assert_same(a: pa.Table, b: pa.Table) -> None:
    assert a.num_rows == b.num_rows
    for c in ("query_id", "window_start", "window_end"):
        assert a[c].to_pylist() == b[c].to_pylist()
    np.testing.assert_allclose(a["value"].to_numpy(), b["value"].to_numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "mode,name,extra",
    [
        # ~18 s, ~16 s and ~23 s here: make test-scenarios (make test stays under 8 min)
        pytest.param("raw", "ordered.txt", "ignore", marks=pytest.mark.scenario),
        pytest.param("raw", "swapped.txt", "reject", marks=pytest.mark.scenario),
        pytest.param("sliced", "swapped.txt", "ignore", marks=pytest.mark.scenario),
    ],
)
def test_text_run_equals_converted_and_oracle(
    texts, mode, name, extra, ray_session, spark, tmp_path
):
    from cluster.deployment.options import DeploymentOptions
    from cluster.runs.file_run import run_file
    from cluster.runs.options import FileFeedOptions, RuntimeOptions

    text, conv = texts["files"][name, extra]
    qs = QUERIES if mode == "raw" else [q for q in QUERIES if q.kind == "time"]
    want = _oracle(pq.read_table(conv), qs)
    # small byte ranges: several Spark tasks, the glued and swapped lines in different ones
    runtime, deployment = RuntimeOptions(spark=spark), DeploymentOptions(mode=mode)
    res_t = run_file(
        texts["plans"][mode],
        text,
        tmp_path / "t",
        runtime=runtime,
        deployment=deployment,
        feed=FileFeedOptions(batch_rows=700, extra_columns=extra, text_range_bytes=20_000),
    )
    res_p = run_file(
        texts["plans"][mode],
        conv,
        tmp_path / "p",
        runtime=runtime,
        deployment=deployment,
        feed=FileFeedOptions(batch_rows=700),
    )
    _assert_same(_answers(res_t), want)
    _assert_same(_answers(res_p), want)
    assert res_t.late.num_rows == res_p.late.num_rows == 0
    m = json.loads((tmp_path / "t" / "metrics.json").read_text())
    tm = m["text"]
    assert tm["ranges"] > 3 and tm["in_order"] == (name == "ordered.txt")
    assert tm["glued_lines"] == 2
    if extra == "ignore":
        assert tm["extra_column_lines"] == 2 and tm["rows_rejected"] == 2
        assert tm["rejects_by_reason"] == {"field_count": 1, "empty": 1}
    else:  # rejected, the reason naming the option
        assert tm["extra_column_lines"] == 0 and tm["rows_rejected"] == 4
        assert tm["rejects_by_reason"] == {"field_count": 3, "empty": 1}
    assert m["feed"]["rows"] == pq.read_metadata(conv).num_rows
    # the rejects of a whole-file read, renumbered across the ranges
    rej = tmp_path / "t" / "rejects" / f"{name}.rejects.tsv"
    assert rej.read_bytes() == (texts["dir"] / f"{name}.{extra}.rejects.tsv").read_bytes()
    rows = [ln.split(b"\t") for ln in rej.read_bytes().splitlines()[1:]]
    want_lines = [b"501", b"701"] if extra == "ignore" else [b"30", b"399", b"501", b"701"]
    assert [r[0] for r in rows] == want_lines
    assert sum(b"data.extra_columns: ignore" in r[1] for r in rows) == (extra == "reject") * 2
    assert not (tmp_path / "t" / ".text-stage").exists()
