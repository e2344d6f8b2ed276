"""``cluster.failure_timeout_s``: one setting turned into Ray's health-check keys (the bound on
declaring a silent host dead), checked like every config key."""

from __future__ import annotations

import pytest

from cluster.runtime.ray_runtime import HEALTH_CHECKS, RayRuntime, health_check_config


@pytest.mark.parametrize("t", [1.0, 2.5, 10.0, 30.0, 600.0])
def test_health_checks_bound_detection_by_the_timeout(t):
    c = health_check_config(t)
    assert c["health_check_failure_threshold"] == HEALTH_CHECKS
    assert c["health_check_period_ms"] == c["health_check_timeout_ms"] >= 100
    # a hung node: every check times out, then the next one comes a period later
    bound_ms = HEALTH_CHECKS * (c["health_check_period_ms"] + c["health_check_timeout_ms"])
    assert bound_ms == pytest.approx(t * 1000, abs=HEALTH_CHECKS * 2)
    assert c["health_check_initial_delay_ms"] <= 5000


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_a_bad_timeout_is_refused_before_ray_starts(bad):
    with pytest.raises(ValueError, match="failure_timeout_s"):
        RayRuntime(failure_timeout_s=bad)


def test_config_key_is_validated_in_one_line(tmp_path):
    from sim.config import load_config

    def cfg(v):
        p = tmp_path / "c.yaml"
        p.write_text(
            "workload: {queries: [{id: q, stream: mf01, aggregate: sum, range: 10, slide: 5}]}\n"
            "streams: {mf01: {rate: 1}}\n"
            f"cluster: {{nodes: 2, failure_timeout_s: {v}}}\n"
        )
        return p

    assert load_config(cfg(12)).cluster.failure_timeout_s == 12.0
    for bad in ("0", "-3", "4000", "soon"):
        with pytest.raises(Exception) as e:
            load_config(cfg(bad))
        msg = str(e.value)
        assert "cluster.failure_timeout_s" in msg and "\n" not in msg.strip(), msg
