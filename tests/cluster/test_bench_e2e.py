"""``weaveplace bench e2e``'s timed run (sim/bench/e2e.py ``_run_mode``): with
``early_read`` the file's first read happens before the clock, as in a live run's start-up,
and the answers stay those of the reference run."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cluster


def test_an_early_read_is_left_out_of_the_clock_and_changes_no_answer(
    workload, live_result, ray_session, spark
):
    from sim.bench.e2e import E2eOptions, _run_mode

    opts = E2eOptions(early_read=True, batch_rows=1000, chunk_rows=4000, count_ops=False)
    fs, res, wall = _run_mode(workload["plan"], "raw", "driver", spark, workload["path"], opts)
    assert res.answers.equals(live_result.answers)
    assert fs.rows == workload["rows"] and wall >= fs.seconds
    assert fs.early_seconds > 0  # resolved and first chunk pulled before the clock (else 0)
