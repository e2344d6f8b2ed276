"""``weaveplace bench autoscale``'s own arithmetic (``sim/bench/autoscale.py``): the ramp and
what counts as flapping (the live run itself is the benchmark)."""

from __future__ import annotations

from sim.bench.autoscale import AutoscaleBenchOptions, _flaps, ramp


def test_ramp_goes_up_by_steps_to_the_peak_and_back_to_zero():
    assert ramp(AutoscaleBenchOptions(peak=150, step=50)) == [50, 100, 150, 100, 50, 0]
    assert ramp(AutoscaleBenchOptions(peak=120, step=50)) == [50, 100, 120, 100, 50, 0]
    assert ramp(AutoscaleBenchOptions(peak=30, step=50)) == [30, 0]


def test_flaps_are_opposite_node_changes_within_one_cooldown():
    ev = [
        {"wall_time": 0.0, "command": "autoscale", "action": "out"},
        {"wall_time": 4.0, "command": "autoscale", "action": "out"},
        {"wall_time": 9.0, "command": "autoscale", "action": "replan"},
        {"wall_time": 20.0, "command": "autoscale", "action": "in"},
        {"wall_time": 25.0, "command": "add-node"},
    ]
    assert _flaps(ev, 10.0) == [{"first": "retire", "then": "add", "seconds": 5.0}]
    assert _flaps(ev, 5.0) == []
