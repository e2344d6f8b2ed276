"""``simulate`` with a Ray address: whole workloads as Ray tasks give the rows and plan files of
the local route, and the progress bar still counts every (configuration, optimizer).

Why: a user with a Ray cluster runs the grid there (``sim.workload_runners.on_ray``); the
results must not depend on where a workload was priced. The session's embedded Ray stands in
for a cluster (a Ray this process already runs is used as it is).
"""

from __future__ import annotations

import pandas as pd
import pytest

from sim.config import config_from_mapping
from sim.simulate import simulate

SMALL = {
    "workload": {"generator": {"qnum": [6, 9], "smax": 12, "rate": 10.0, "omax": 5, "seed": 0}},
    "cluster": {"nodes": [2, 3]},
    "placement": {
        "optimizers": ["G_RAND", "W_TN", "WG_I", "WG_LS", "WG_PF", "weaveshare"],
        "ie": "panes",
        "exact": 6,
    },
    "run": {"seed": 3},
}


@pytest.mark.scenario  # ~13 s here: make test-scenarios (make test stays under 8 min)
def test_ray_tasks_give_the_rows_and_plans_of_local_processes(ray_session, tmp_path):
    local = simulate(config_from_mapping(SMALL), output_dir=tmp_path / "local")
    calls = []
    on_ray = simulate(
        config_from_mapping(SMALL),
        progress=lambda *a: calls.append(a),
        output_dir=tmp_path / "ray",
        ray_address="local",  # the session's Ray
    )
    one = pd.read_csv(local.files["results_csv"], float_precision="round_trip")
    two = pd.read_csv(on_ray.files["results_csv"], float_precision="round_trip")
    assert len(one) == 2 * 2 * 6 and on_ray.runs == local.runs
    cols = [c for c in one.columns if c not in ("runtime_s", "compile_s")]  # timings
    pd.testing.assert_frame_equal(one[cols], two[cols])
    files = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local").rglob("*.json"))
    assert len(files) > len(one)  # plans, WG_PF fronts, exact plans, config.json
    for rel in files:
        if rel.name != "config.json":
            assert (tmp_path / "ray" / rel).read_bytes() == (tmp_path / "local" / rel).read_bytes()
    done = [c[0] for c in calls]
    assert done == sorted(done) and calls[-1][:2] == (len(one), len(one))
    labels = {c[2] for c in calls[1:]}
    assert labels == {f"c{r.config_id} {r.optimizer}" for r in one.itertuples()}
