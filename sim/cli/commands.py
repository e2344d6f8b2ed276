"""The ``weaveplace`` Typer app: every command of the command modules, in the order
``weaveplace --help`` lists them, and the ``data`` and ``bench`` groups.

Why its own module: the command modules (``sim.cli.plans``, ``runs``, ...) are plain functions
with their options; registering them here, once, keeps the listing's order in one place and
lets no command module import the app.
"""

from __future__ import annotations

import typer

from sim.bench.cli import bench_app
from sim.cli import plans, reports, runs, serving, simulation, tour
from sim.cli.data import data_app

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Place and run shared sliding-window aggregate queries.",
)
app.add_typer(bench_app, name="bench")
app.add_typer(data_app, name="data")
app.command()(plans.plan)
app.command()(tour.warmup)
app.command("verify-plan")(plans.verify_plan_cmd)
app.command()(plans.shed)
app.command("report")(reports.report)
app.command()(tour.quickstart)
app.command()(runs.validate)
app.command()(runs.run)
app.command()(simulation.simulate)
app.command()(serving.serve)
app.command()(serving.ctl)
