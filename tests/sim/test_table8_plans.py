"""Speed-ups of the optimizers keep every plan: plans of a sample of Table 8's grid
(``configs/pareto_table8.yaml``, all 15 optimizers, WG_PF's front included) hash to what the
code before the speed-ups wrote.

Why hashes: a plan file is the whole answer of an optimizer (trees, nodes, costs); equal bytes
mean equal plans, and the hashes are small enough to keep in the repository. Regenerate them
(only for a deliberate change of plans) with ``python -m tests.sim.test_table8_plans``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from sim.config import config_from_mapping
from sim.simulate import simulate

ROOT = Path(__file__).resolve().parents[2]
HASHES = Path(__file__).parent / "data" / "table8_plan_hashes.json"

# one workload point of the grid (every axis a single value) and its node counts
SAMPLES = {
    "q250_s25_r100_z1_o10_div": (
        {"qnum": 250, "smax": 25, "rate": 100, "zskew": 1, "omax": 10, "gen": "div"},
        [4, 32],
    ),
    "q500_s50_r10_z1_o100_nrm": (
        {"qnum": 500, "smax": 50, "rate": 10, "zskew": 1, "omax": 100, "gen": "nrm"},
        [8],
    ),
    "q250_s50_r10_z0_o100_div": (
        {"qnum": 250, "smax": 50, "rate": 10, "zskew": 0, "omax": 100, "gen": "div"},
        [16],
    ),
}
FAST = ("q250_s50_r10_z0_o100_div",)  # in make test; the others are slow


def sample_config(name: str):
    """``configs/pareto_table8.yaml`` narrowed to one sample's workload point and node counts."""
    raw = yaml.safe_load((ROOT / "configs" / "pareto_table8.yaml").read_text())
    point, nodes = SAMPLES[name]
    raw["workload"]["generator"].update(point)
    raw["cluster"]["nodes"] = nodes
    raw["run"]["workers"] = 1
    return config_from_mapping(raw)


def plan_hashes(name: str, out: Path) -> dict[str, str]:
    """sha256 of every plan file ``simulate`` writes for one sample."""
    simulate(sample_config(name), output_dir=out)
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((out / "plans").iterdir())
    }


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in SAMPLES]
)
def test_plans_are_those_of_before_the_speed_ups(name, tmp_path):
    want = json.loads(HASHES.read_text())[name]
    got = plan_hashes(name, tmp_path)
    assert len(got) == 15 * len(SAMPLES[name][1]) + len(SAMPLES[name][1])  # + WG_PF fronts
    assert got == want


if __name__ == "__main__":  # regenerate the hashes
    import tempfile

    table = {}
    for sample in SAMPLES:
        with tempfile.TemporaryDirectory() as d:
            table[sample] = plan_hashes(sample, Path(d))
            print(sample, len(table[sample]), file=sys.stderr)
    HASHES.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
