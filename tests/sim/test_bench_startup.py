"""``weaveplace bench startup --alone``: each side of a run's start-up timed again alone, and the
floor (the later side) set against the goal (the slower start alone plus the slack).  The
children themselves start Ray and Spark (the bench's own runs); here they are stand-ins that
check what they are handed and report set figures."""

from __future__ import annotations

import json

import yaml
from helpers import live_config
from rich.console import Console

import sim.bench.startup as startup


def _stand_in(seen: list, ray: dict, spark: dict):
    def child(script, args, timeout_s):
        seen.append((script, args))
        return "a log line\n" + json.dumps(ray if script is startup._RAY_ALONE else spark) + "\n"

    return child


def _config(tmp_path, data: dict):
    c = live_config("weaveshare", "panes")
    c["data"] = data
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(c))
    return path


def test_alone_takes_the_later_side_as_floor(monkeypatch, tmp_path):
    (tmp_path / "in.parquet").write_bytes(b"")  # only its name is handed on
    config = _config(tmp_path, {"path": "in.parquet"})
    seen: list = []
    ray = {"ray_s": 5.5, "deployment_s": 2.0, "ready_s": 7.5}
    spark = {"spark_s": 5.0, "early_s": 2.25}
    monkeypatch.setattr(startup, "_child", _stand_in(seen, ray, spark))
    got = startup.alone(config, tmp_path / "run1")
    assert got == {
        "ray_alone_s": 5.5,
        "deployment_alone_s": 2.0,
        "spark_alone_s": 5.0,
        "early_alone_s": 2.25,
        "floor_s": 7.5,  # Ray + actors, later than Spark + its first read (7.25)
        "goal_alone_s": 6.5,  # the slower start (Ray) + 1 s
    }
    plan = str(tmp_path / "run1" / "plan.json")
    data = str(tmp_path / "in.parquet")
    assert [a for _, a in seen] == [[str(config), plan], [str(config), plan, data]]


def test_alone_reads_the_runs_generated_file(monkeypatch, tmp_path):
    """No ``data.path``: the run generated its input, ``data.parquet`` in its folder; the
    Spark side later than Ray's here, and the goal within reach."""
    config = _config(tmp_path, {"duration_s": 10})
    seen: list = []
    ray = {"ray_s": 6.0, "deployment_s": 0.5, "ready_s": 6.5}
    spark = {"spark_s": 4.0, "early_s": 2.5}
    monkeypatch.setattr(startup, "_child", _stand_in(seen, ray, spark))
    got = startup.alone(config, tmp_path / "run2")
    assert got["floor_s"] == 6.5 and got["goal_alone_s"] == 7.0
    assert seen[1][1][2] == str(tmp_path / "run2" / "data.parquet")
    row = {"run": 1, "ray_s": 8, "spark_s": 8, "deployment_s": 3, "ready_s": 11}
    row |= {"early_s": 2, "first_row_s": 11, "slower_s": 8, "met": False, **got}
    console = Console(width=200, record=True)
    console.print(startup.format_table([row]))
    text = console.export_text()
    assert "missed" in text and "within reach" in text and "6.00 + 0.50" in text


def test_the_children_are_python():
    for script in (startup._RUN, startup._RAY_ALONE, startup._SPARK_ALONE):
        compile(script, "<child>", "exec")
