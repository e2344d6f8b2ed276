"""``weaveplace report RUN_DIR``: a self-contained HTML report (+ PNGs) of a simulation or live run.

Modules: ``data`` (loading a run directory), ``plots`` (figures), ``html`` (tables, page),
``sim_page`` / ``live_page`` / ``serve_page`` (the body of each run kind), ``terminal`` (the
summary on the terminal); ``build_report`` (here) writes the page.

Why: the tables ``simulate`` and ``run_file`` write are exact but hard to read; the dissertation
reads its results from a few figures (Figure 40: plan quality, Figure 41: per-node costs,
Table 10: optimizer runtimes).  This module draws them from the run's own files.

No re-computation drift: every number shown is read from the run's files, never re-priced.  Plan
costs (per node, TotalCost, MaxCost) come from the plan JSON files; runtimes, exact optima and gaps
from the results table (``results.parquet``, else ``results.csv`` read with round-trip floats);
plan quality (Figure 40) and runtime statistics (Table 10) from ``fig40_quality.csv`` /
``table10_runtime.csv`` when present (computed from the results table only when they are
missing).  Every numeric table cell carries the exact value in ``data-value`` (Python ``repr``,
which round-trips) and a ``title`` tooltip; the "Plans (full precision)" table shows the plan JSON
values at full precision.  Disagreements between the results table and the plan files are listed
at the top of the report as warnings, never silently fixed.

Run directories:

* simulation (``sim.simulate``): ``plans/c<config>_<optimizer>.json`` (schema
  ``weaveplace.plan/1``), ``results.{parquet,csv}``, ``fig40_quality.csv``, ``table9_best.csv``,
  ``table10_runtime.csv``, ``best_per_config.csv``.  A folder with only ``plans/*.json`` works too
  (plans named ``c<N>_<name>.json`` are grouped by configuration ``N``).  Fronts
  (``c<N>_WG_PF_front.json``, ``c<N>_EXACT_front.json``: lists of plans, ``sim.pareto_sim``) are
  drawn on the configuration's TotalCost-vs-MaxCost scatter with WG_PF's chosen plan marked, and
  ``pareto_summary.csv`` is shown as a table.
* live (``cluster.runs.file_run.run_file``; or ``cluster.runs.directory_run.run_directory``, whose
  ``answers.parquet``/``late.parquet`` are directories of parts and whose metrics add
  ``stream``): ``metrics.json``, ``answers.parquet``, ``late.parquet`` and,
  if present, the deployed plan (``plan.json``, any ``*.json`` in the folder with the plan schema,
  or the single plan in ``plans/``).  Per node, the plan's estimated cost is compared, as shares of
  the cluster total, with measured operations when ``metrics.json`` carries them (a node key among
  ``MEASURED_OPS_KEYS``), otherwise with busy seconds, and with "model ops on counted slices"
  (tree tuples + executor slice counts x the plan tree's Omega) when per-tree slice counts exist.  ``metrics.json`` has no wall-clock
  timeline today; when it has one (``timeline``: list of ``{"t_s": ..., "rows": ...}``) it is
  plotted as throughput over time, otherwise answers and late tuples are plotted over event time.

Output (``out_dir``, default ``RUN_DIR/report``): ``report.html`` (plots embedded as base64 PNG,
inline CSS, no scripts, no URLs) and the same plots as PNG files next to it.  Matplotlib is used
through the Agg canvas only (the global backend is not touched).
"""

from __future__ import annotations

from pathlib import Path

from sim.report.data import DEFAULT_MAX_CONFIG_FIGURES, LiveRun, SimRun, load_run
from sim.report.html import page
from sim.report.live_page import live_body
from sim.report.sim_page import sim_body


def build_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    plan: str | Path | None = None,
    max_config_figures: int = DEFAULT_MAX_CONFIG_FIGURES,
    run: SimRun | LiveRun | None = None,
) -> Path:
    """Write ``report.html`` and its PNGs for a simulation or live run; return the HTML path.

    ``out_dir`` defaults to ``RUN_DIR/report``; ``plan`` names the deployed plan of a live run
    when it is not in the run directory; ``run``, the run already read (``load_run``).
    """
    run_dir = Path(run_dir)
    run = run if run is not None else load_run(run_dir, plan)
    out = Path(out_dir) if out_dir is not None else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(run, SimRun):
        body, plots = sim_body(run, max_config_figures)
        title = f"weaveplace simulation report — {(run.config or {}).get('name') or run_dir.name}"
    else:
        body, plots = live_body(run)
        title = f"weaveplace live run report — {run_dir.name}"
        if (run_dir / "events.jsonl").exists():  # weaveplace serve: its events and changes
            from sim.report.serve_page import serve_section

            more, more_plots = serve_section(run_dir)
            body, plots = body + more, plots + more_plots
    for p in plots:
        (out / p.name).write_bytes(p.png)
    path = out / "report.html"
    path.write_text(page(title, body), encoding="utf-8")
    return path
