"""How ``weaveplace serve`` starts: the checks made before any work (``prepare``), the
initial plan (``initial_plan``, as ``weaveplace run`` plans) or the saved state of
``--resume``, Ray and Spark, the deployment and ``cluster.service.service.Service`` over
``data.directory`` (or a synthetic feed) until ``ctl ... stop`` or Ctrl-C (``run_service``).

Why apart from the CLI (``sim.serve_cli``): tests and the serve benchmark start a deployment
exactly as the command does, without Typer or a console. ``RUN_DIR`` is ``run.output_dir``;
``RUN_DIR/state/`` holds what a resume needs (the config text included, so ``--resume`` takes
no config).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from placement.messages import one_line
from sim.synthetic_feed import SyntheticFeed


class ServeError(ValueError):
    """A user mistake or a deployment that cannot start: one line, exit code 2."""


def _load_state(run_dir: Path) -> dict:
    p = run_dir / "state" / "service.json"
    if not p.is_file():
        raise ServeError(f"--resume {run_dir}: no saved deployment there ({p} not found)")
    from cluster.service.query_log import QueryLogError
    from cluster.service.resume import load_state

    try:
        state = load_state(p.parent)
    except QueryLogError as e:
        raise ServeError(str(e)) from None
    except ValueError as e:
        raise ServeError(f"{p}: not valid JSON ({e})") from None
    if state.get("final"):
        raise ServeError(
            f"--resume {run_dir}: the deployment was stopped with --flush (end of "
            "input); there is nothing to resume"
        )
    return state


def prepare(config_path: Path | None, resume: Path | None):
    """(config, run_dir, state or None, config text, base dir) with the checks done up front."""
    from sim.config import ConfigError, load_config, load_config_text
    from sim.config.paths import check_path

    if (config_path is None) == (resume is None):
        raise ServeError(
            "give a CONFIG to start a deployment, or --resume RUN_DIR to continue one (not both)"
        )
    if resume is not None:
        run_dir = Path(resume)
        try:
            check_path("--resume", run_dir)
        except ConfigError as e:
            raise ServeError(str(e)) from None
        state = _load_state(run_dir)
        sd = run_dir / "state"
        text = (sd / "config.yaml").read_text()
        base = (sd / "config_dir").read_text().strip()
        try:
            cfg = load_config_text(text, base, str(sd / "config.yaml"))
        except ConfigError as e:
            raise ServeError(str(e)) from None
    else:
        try:
            cfg = load_config(config_path)
        except ConfigError as e:
            raise ServeError(str(e)) from None
        text = Path(config_path).read_text()
        base = str(Path(config_path).resolve().parent)
        run_dir = Path(cfg.run.output_dir)
        state = None
        if (run_dir / "state" / "service.json").exists():
            raise ServeError(
                f"run.output_dir: {str(run_dir)!r} holds a deployment; continue it "
                f"with `weaveplace serve --resume {run_dir}` or choose another "
                "run.output_dir"
            )
    if cfg.data.path is not None:
        raise ServeError(
            "data.path: `weaveplace serve` reads data.directory (files as they "
            "arrive) or, without both, a synthetic real-time feed at data.rate_hz"
        )
    if (
        cfg.data.directory is not None
        and run_dir.resolve() == Path(cfg.data.directory.path).resolve()
    ):
        raise ServeError(f"run.output_dir: {str(run_dir)!r} is the watched directory")
    if shutil.which("java") is None:
        raise ServeError(
            "Java is not installed or not on PATH: PySpark 4 needs Java 17 "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
    return cfg, run_dir, state, text, base


def initial_plan(cfg) -> tuple[dict, Any, Any, dict | None]:
    """The config's plan (as ``weaveplace run``), its cost model, the planner re-plans use
    (``cluster.service.planning.Planner``) and, for WG_PF, how the plan was chosen.  WG_PF: the
    plan ``placement.choose`` picks, by the planner re-plans use; a rule no plan meets stops
    the start with its one-line note (``ServeError``), as ``weaveplace run`` does."""
    from cluster.debs.format import VALUE_COLUMNS
    from cluster.service.planning import Planner
    from placement.optimizers import DISTRIBUTED
    from placement.trees import CostModel
    from sim.config import ConfigError
    from sim.simulate import plan_for, workload_point

    points = cfg.points()
    if len(points) != 1:
        raise ServeError(
            f"a deployment takes one workload and one cluster layout; this config "
            f"expands to {len(points)} (remove the list-valued parameters)"
        )
    names = cfg.placement.optimizer_list
    if len(names) != 1:
        raise ServeError(f"placement.optimizers: a deployment takes one optimizer, got {names}")
    point = points[0]
    try:
        queries, rates, _ = workload_point(cfg, point["workload"])
    except ConfigError as e:
        raise ServeError(str(e)) from None
    bad = sorted({q.stream for q in queries} - set(VALUE_COLUMNS))
    if bad:
        raise ServeError(f"workload: stream(s) {bad} are not DEBS columns (e.g. mf01, mf02)")
    if cfg.streams is None:
        rates = {s: cfg.data.rate_hz / 1000.0 for s in {q.stream for q in queries}}
    else:  # every declared stream: queries added later on it are priced at its rate
        rates = {**{s: v.rate for s, v in cfg.streams.items()}, **rates}
    model = CostModel(cfg.placement.ie, rates, cfg.placement.engine, cfg.placement.slicing)
    planner = Planner.from_config(cfg)
    choice = None
    if names[0] in DISTRIBUTED:
        try:
            plan, choice = planner.plan(queries, model, point["capacities"])
        except (ValueError, KeyError) as e:
            msg = one_line(str(e))
            raise ServeError(f"placement.optimizers: {names[0]}: {msg}") from None
        if choice is not None and not choice["met"]:
            raise ServeError(choice["note"])
    else:  # a single-node optimizer: all trees on the first node (re-plans are refused)
        plan = plan_for(names[0], queries, model, point["capacities"], cfg)
    for node, node_id in zip(plan.nodes, point["node_ids"]):
        node.id = node_id
    d = plan.to_dict()
    if choice is not None:
        d["choose"] = choice
    return d, model, planner, choice


def autoscale_policy(cfg):
    """``placement.autoscale`` as ``cluster.service.autoscale.AutoscalePolicy`` (None when the
    key is absent); a node's capacity defaults to the cluster nodes' one capacity (the config
    check made sure there is one)."""
    from cluster.service.autoscale import AutoscalePolicy
    from sim.config.base import as_list

    a = cfg.placement.autoscale
    if a is None:
        return None
    caps = [c for _, cs in cfg.cluster.layouts() for c in cs]
    return AutoscalePolicy(
        capacity=float(a.capacity if a.capacity is not None else caps[0]),
        min_nodes=a.min_nodes,
        max_nodes=a.max_nodes,
        high=a.high,
        low=a.low,
        cooldown_s=a.cooldown_s,
        busy_high=a.busy_high,
        sustain=a.sustain,
        max_queue=a.max_queue,
        lag_high_s=a.lag_high_s,
        spare_nodes=a.spare_nodes,
        ray_wait_s=a.ray_wait_s,
        optimizers=tuple(as_list(a.optimizers)),
        exact_max_queries=a.exact_max_queries,
    )


def shedding_policy(cfg):
    """``placement.shedding`` as ``cluster.service.load_shedding.SheddingPolicy`` (None when
    the key is absent)."""
    from cluster.service.load_shedding import SheddingPolicy

    s = cfg.placement.shedding
    if s is None:
        return None
    return SheddingPolicy(min_change=s.min_change, rate_window_s=s.rate_window_s)


def run_service(
    cfg,
    run_dir: Path,
    state: dict | None,
    text: str,
    base: str,
    spark=None,
    progress=None,
    say=None,
):
    """Start (or resume) the deployment and serve until stopped; returns the stream stats.
    ``say``: gets one-line notices (the token an attached Ray connection used; with WG_PF,
    the rule that chose the initial plan)."""
    from cluster.deployment.churn import ChurnDeployment, plan_from_state
    from cluster.deployment.options import DeploymentOptions
    from cluster.feeds.directory_options import StreamOptions
    from cluster.runs.options import RuntimeOptions, default_pinning
    from cluster.runs.startup import started_runtimes
    from cluster.service.options import ServiceOptions, ServiceStart
    from cluster.service.planning import Planner
    from cluster.service.resume import restore_nodes
    from cluster.service.service import Service
    from placement.trees import CostModel

    w = cfg.data.directory
    run_dir.mkdir(parents=True, exist_ok=True)
    feeder = None
    if w is None:  # a synthetic DEBS-style feed in real time, through the same directory path
        feeder = SyntheticFeed(run_dir / "feed", cfg.data.rate_hz, cfg.data.seed)
        opts = StreamOptions(poll_s=0.5, files_per_batch=8, batch_rows=cfg.run.batch_rows)
        watch = feeder.directory
    else:
        opts = StreamOptions(
            pattern=w.pattern,
            files_per_batch=w.files_per_batch,
            poll_s=w.poll_s,
            idle_timeout_s=None,
            max_files=None,
            timeout_s=w.timeout_s,
            batch_rows=cfg.run.batch_rows,
        )
        watch = w.path
    if state is None:
        plan, model, planner, choice = initial_plan(cfg)
        (run_dir / "plan.json").write_text(json.dumps(plan, indent=1))
        sd = run_dir / "state"
        sd.mkdir(exist_ok=True)
        (sd / "config.yaml").write_text(text)
        (sd / "config_dir").write_text(base)
        optimizer = plan["optimizer"]
        if choice is not None and say is not None:
            say(
                f"WG_PF: the plan `{choice['rule']}` picks of a {len(choice['front'])}-plan "
                f"front (TotalCost {plan['total_cost']:.6g}, MaxCost {plan['max_cost']:.6g})"
            )
    else:
        m = state["model"]
        model = CostModel(m["ie"], dict(m["rates"]), cfg.placement.engine, m["slicing"])
        plan = plan_from_state(state["nodes"], m, state["capacity"])
        optimizer = state["optimizer"]
        # the state's planner and choice win (Service restores them); states saved before
        # they were kept plan as the config does
        planner, choice = Planner.from_config(cfg), None
    ray_address = cfg.cluster.ray.address
    policy = autoscale_policy(cfg)
    resources = None
    if policy is not None and ray_address is not None:  # Ray's autoscaler gives Ray nodes
        from cluster.runtime.resources import RayResources

        resources = RayResources(wait_s=policy.ray_wait_s)
    runtime = RuntimeOptions(
        ray_address=ray_address,
        num_cpus=2,
        failure_timeout_s=cfg.cluster.failure_timeout_s,
        spark=spark,
        spark_master=cfg.cluster.spark.master,
    )
    with started_runtimes(runtime) as runtimes:
        startup = runtimes.startup
        if say is not None and startup.get("ray_auth"):
            say(f"Ray: {startup['ray_auth']}")
        if say is not None and startup.get("failure_detection_s"):
            say(
                "Ray: a silent host is declared lost after at most "
                f"{startup['failure_detection_s']:.0f} s (its health checks)"
            )
        with ChurnDeployment(
            plan,
            DeploymentOptions(
                allowed_lateness=cfg.run.allowed_lateness,
                checkpoint_every=cfg.run.checkpoint_every,
                pin_nodes=default_pinning(None, ray_address),
                mode=cfg.run.feed_mode,
                call_timeout_s=cfg.cluster.call_timeout_s,
            ),
        ) as dep:
            if state is not None:
                restore_nodes(dep, run_dir, state)
            svc = Service(
                dep,
                runtimes.spark(),  # started meanwhile (cluster.runs.startup)
                watch,
                run_dir,
                ServiceStart(plan, model, choice=choice, resume_state=state),
                ServiceOptions(
                    stream=opts,
                    progress=progress,
                    default_rate=cfg.data.rate_hz / 1000.0,
                    tolerance=cfg.placement.tolerance,
                    max_moves=cfg.placement.max_moves,
                    optimizer=optimizer,
                    planner=planner,
                    announce=say,
                    autoscale=policy,
                    resources=resources,
                    shedding=shedding_policy(cfg),
                ),
            )
            if feeder is not None:
                feeder.start()
            try:
                return svc.run(port=cfg.run.control.port)
            finally:
                if feeder is not None:
                    feeder.stop()
