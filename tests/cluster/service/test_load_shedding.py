"""The drop boxes' policy pieces without a deployment: the measured input rate."""

from __future__ import annotations

import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.service.load_shedding import measured_rate


@settings(max_examples=examples(60))
@given(
    gap=st.integers(1, 50),
    sizes=st.lists(st.integers(2, 200), min_size=1, max_size=8),
    window_files=st.integers(1, 8),
)
def test_evenly_spaced_rows_measure_their_rate(gap, sizes, window_files):
    """Files of rows every ``gap`` ms, back to back: the rate is 1/gap exactly, whatever the
    window holds; a window reaching into older files counts them whole."""
    files, t = [], 0
    for n in sizes:
        files.append((n, t, t + (n - 1) * gap))
        t += n * gap
    newest = files[-1][2]
    window = newest - files[max(0, len(files) - window_files)][1]
    assert measured_rate(files, window) == pytest.approx(1.0 / gap, rel=1e-12)


def test_the_window_forgets_older_rates():
    slow = [(10, k * 1000, k * 1000 + 900) for k in range(5)]  # 10 rows a second
    fast = [(100, 5000 + k * 1000, 5000 + k * 1000 + 990) for k in range(3)]  # 100 a second
    assert measured_rate(slow + fast, 2500) == pytest.approx(0.1, rel=0.01)
    assert measured_rate(slow + fast, 1e9) < 0.06
    assert measured_rate([], 1000) is None and measured_rate([(1, 5, 5)], 1000) is None


@pytest.mark.parametrize(
    "cluster,shedding,msg",
    [
        ({"nodes": 2}, {}, "placement.shedding: needs node capacities"),
        ({"nodes": [{"id": "a", "capacity": 1.0}]}, {"min_change": 0}, "min_change"),
        ({"nodes": [{"id": "a", "capacity": 1.0}]}, {"rate_window_s": -1}, "rate_window_s"),
        ({"nodes": [{"id": "a", "capacity": 1.0}]}, {"window": 3}, "window"),
    ],
)
def test_shedding_config_mistakes_are_one_line(cluster, shedding, msg):
    from sim.config import ConfigError, config_from_mapping

    cfg = {
        "workload": {"generator": {"qnum": 5, "smax": 5, "rate": 1.0}},
        "cluster": cluster,
        "placement": {"optimizers": "WG_TN", "shedding": shedding},
    }
    with pytest.raises(ConfigError) as e:
        config_from_mapping(cfg)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_shedding_config_defaults():
    from sim.config import config_from_mapping
    from sim.serve_start import shedding_policy

    cfg = config_from_mapping(
        {
            "workload": {"generator": {"qnum": 5, "smax": 5, "rate": 1.0}},
            "cluster": {"nodes": [{"id": "a", "capacity": 1.0}]},
            "placement": {"optimizers": "WG_TN", "shedding": {}},
        }
    )
    p = shedding_policy(cfg)
    assert (p.min_change, p.rate_window_s) == (0.02, 10.0)
