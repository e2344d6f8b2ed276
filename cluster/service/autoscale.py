"""Elastic deployments: the placement decides how many nodes ``weaveplace serve`` runs on.

Why from the placement: a query may cost almost nothing when it weaves into a running tree, or
a whole tree when it cannot; the priced plan knows which, so the count a query set needs is
the smallest count whose plan fits (``placement.node_count``), and that plan is also where the
trees go, in one step.  Measurement (each node's busy share, its queue depth) confirms or
vetoes: it catches what the model under-prices, and it holds back a scale-in while nodes are
busy.

The policy (``placement.autoscale`` in the config, ``AutoscalePolicy``), equal nodes of
``capacity``:

- **scale out** when a node's planned cost passes ``high`` x capacity and the deployment's
  count cannot fit the running queries: to the smallest count that fits at ``high``, several
  nodes at once (never held by the cool-down: the plan says a node cannot keep up); when the
  count can fit, the plan fitting it is run instead (a re-plan, no node added);
- **scale out by one** when a node's measured busy share stays above ``busy_high`` for
  ``sustain`` samples in a row (the model under-prices it), outside the cool-down;
- **replace a slow node** when one node's event-time lag (the newest event time fed minus the
  newest it applied) stays more than ``lag_high_s`` above the least lagging node's for
  ``sustain`` samples in a row (a throttled or sick host: the model prices the work, not the machine), outside
  the cool-down: a new node is added and the slow one retired, its trees moving to the new
  one (the node count is unchanged);
- **scale in** when the running queries fit on fewer nodes below ``low`` x capacity, or the
  deployment has more than ``spare_nodes`` nodes above the smallest count that fits at
  ``high``: to that smallest count, retiring the nodes the new plan leaves empty; outside the
  cool-down only, and vetoed while a node's busy share is above ``busy_high`` or its queue
  above ``max_queue``.

Hysteresis: a scale-out needs a node past ``high`` on a count that cannot fit; a scale-in the
load to fit on fewer nodes at ``low``, or the smallest fitting count ``spare_nodes`` + 1
below the running one, so after a decision the load must fall or grow by a margin before
the opposite one; with the cool-down after every decision no node is added and retired within
one cool-down unless the planned load grew past ``high`` meanwhile.  ``spare_nodes`` (1)
bounds how far above the smallest feasible count the band lets a deployment stay.

The decision (``decide``) is pure: an ``Observation`` (planned costs, the counts the model
needs, measurements, the clock) and the ``Memory`` of earlier decisions in, a ``Decision``
out.  ``Autoscaler`` gathers the observation and keeps the memory; ``cluster.service.service``
acts on decisions through its add-node / retire-node / re-plan paths.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from placement.node_count import REL, NodeCount, node_count
from placement.plan import Plan


@dataclass(frozen=True)
class AutoscalePolicy:
    """``placement.autoscale`` (configs/README.md).  ``capacity``: every node's capacity (the
    nodes the policy adds get it); ``high`` / ``low``: fractions of it; ``cooldown_s``: wall
    seconds after a decision without a scale-in or a measured scale-out; ``busy_high``,
    ``sustain``, ``max_queue``, ``lag_high_s``: the measurement's bounds; ``ray_wait_s``: how
    long a scale-out
    on an attached Ray cluster waits for Ray's autoscaler; ``optimizers`` and
    ``exact_max_queries``: how the node count is found (``placement.node_count``)."""

    capacity: float
    min_nodes: int = 1
    max_nodes: int = 8
    high: float = 0.9
    low: float = 0.6
    cooldown_s: float = 30.0
    busy_high: float = 0.9
    sustain: int = 3
    max_queue: int = 8
    lag_high_s: float = 30.0
    spare_nodes: int = 1
    ray_wait_s: float = 60.0
    optimizers: tuple[str, ...] = ("WG_TN", "WG_I", "WG_LS")
    exact_max_queries: int = 10

    def __post_init__(self):
        if not self.capacity > 0:
            raise ValueError(f"capacity must be > 0, got {self.capacity!r}")
        if not 1 <= self.min_nodes <= self.max_nodes:
            raise ValueError(
                f"need 1 <= min_nodes <= max_nodes, got {self.min_nodes}, {self.max_nodes}"
            )
        if not 0 < self.low < self.high:
            raise ValueError(f"need 0 < low < high, got low {self.low}, high {self.high}")
        if not self.lag_high_s > 0:
            raise ValueError(f"lag_high_s must be > 0, got {self.lag_high_s!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["optimizers"] = list(self.optimizers)
        return d

    def count(self, queries, model, fraction: float) -> NodeCount:
        """The smallest count whose plan fits at ``fraction`` x capacity."""
        return node_count(
            queries,
            model,
            fraction * self.capacity,
            self.min_nodes,
            self.max_nodes,
            self.optimizers,
            self.exact_max_queries,
        )


@dataclass(frozen=True)
class Observation:
    """What one evaluation sees: ``planned`` cost per running node; ``need``: the count fitting
    the running queries at ``high`` (its plan is what a decision runs); ``need_low``: the count
    fitting at ``low``; ``busy`` share, ``queue`` depth and event-time ``lag`` (seconds) per
    node (None: not measured yet); ``now``: monotonic seconds."""

    now: float
    planned: Mapping[str, float]
    need: NodeCount
    need_low: NodeCount
    busy: Mapping[str, float | None] = field(default_factory=dict)
    queue: Mapping[str, int | None] = field(default_factory=dict)
    lag: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Memory:
    """What decisions remember: on/off (``ctl autoscale``), the last decision's time, action
    and node counts, samples in a row with a node above ``busy_high``, and the node lagging
    more than ``lag_high_s`` behind the least lagging one with its samples in a row (``slow``)."""

    enabled: bool = True
    last_at: float | None = None
    last_action: str | None = None
    last_nodes: tuple[int, int] | None = None
    busy_streak: int = 0
    slow: tuple[str, int] | None = None


@dataclass(frozen=True)
class Decision:
    """``action``: ``out``, ``in``, ``replan`` (the count fits: run the model's plan on the
    nodes there are), ``replace`` (a slow node, ``reason["slow_node"]``, retired for a new
    one), ``hold`` (nothing to do), ``vetoed`` (a scale-in the measurement or the cool-down
    holds back); ``nodes_before`` / ``nodes_after``: the counts; ``reason``: the costs and
    measurements behind it."""

    action: str
    nodes_before: int
    nodes_after: int
    reason: dict

    @property
    def acts(self) -> bool:
        return self.action in ("out", "in", "replan", "replace")


def over_limit(planned: Mapping[str, float], limit: float) -> list[str]:
    return sorted(n for n, c in planned.items() if c > limit * (1 + REL))


def decide(policy: AutoscalePolicy, obs: Observation, mem: Memory) -> Decision:
    """The decision for ``obs`` (module doc; pure)."""
    p = policy
    n = len(obs.planned)
    high, low = p.high * p.capacity, p.low * p.capacity
    busy = {k: v for k, v in obs.busy.items() if v is not None}
    queue = {k: v for k, v in obs.queue.items() if v is not None}
    cooling = mem.last_at is not None and obs.now - mem.last_at < p.cooldown_s
    over = over_limit(obs.planned, high)
    reason: dict[str, Any] = {
        "planned_max": max(obs.planned.values(), default=0.0),
        "high_limit": high,
        "low_limit": low,
        "over_high": over,
        "need_at_high": obs.need.nodes,
        "need_fits": obs.need.fits,
        "need_exact": obs.need.exact,
        "need_at_low": obs.need_low.nodes,
        "busy_max": max(busy.values(), default=None),
        "queue_max": max(queue.values(), default=None),
        "busy_streak": mem.busy_streak,
        "lag_max_s": max((v for v in obs.lag.values() if v is not None), default=None),
        "slow": None if mem.slow is None else list(mem.slow),
        "cooldown_left_s": max(0.0, p.cooldown_s - (obs.now - mem.last_at)) if cooling else 0.0,
    }

    def decision(action: str, after: int, why: str) -> Decision:
        return Decision(action, n, after, {"why": why, **reason})

    if not mem.enabled:
        return decision("hold", n, "autoscale is off")
    target = max(p.min_nodes, min(obs.need.nodes, p.max_nodes))
    if n < p.min_nodes or (over and target > n):
        why = (
            f"planned cost over high on {over}; {target} nodes fit"
            if obs.need.fits
            else f"planned cost over high on {over}; no count up to max_nodes fits, taking {target}"
        )
        return decision("out", max(target, n), why if n >= p.min_nodes else "below min_nodes")
    if n > p.max_nodes:
        return decision("in", p.max_nodes, "above max_nodes")
    if over and obs.need.fits:
        return decision("replan", n, f"planned cost over high on {over}; {n} nodes fit")
    if mem.slow is not None and mem.slow[1] >= p.sustain and mem.slow[0] in obs.planned:
        slow = mem.slow[0]
        reason["slow_node"] = slow
        if cooling:
            return decision(
                "vetoed", n, f"{slow} lags over lag_high_s behind the others; cooling down"
            )
        return decision(
            "replace",
            n,
            f"{slow} lags over lag_high_s {p.lag_high_s:g} s behind the others; replaced",
        )
    if mem.busy_streak >= p.sustain and n < p.max_nodes:
        if cooling:
            return decision("vetoed", n + 1, "measured busy share above busy_high; cooling down")
        return decision("out", n + 1, f"measured busy share above busy_high {p.busy_high}")
    fits_low = obs.need_low.fits and obs.need_low.nodes < n
    spare = n - target > p.spare_nodes
    if target < n and (fits_low or spare):
        hot = sorted(k for k, v in busy.items() if v > p.busy_high)
        queued = sorted(k for k, v in queue.items() if v > p.max_queue)
        if cooling:
            return decision("vetoed", target, "fits on fewer nodes; cooling down")
        if hot or queued:
            return decision(
                "vetoed",
                target,
                f"fits on fewer nodes; measured busy {hot} queued {queued}",
            )
        why = (
            f"fits on {obs.need_low.nodes} nodes below low"
            if fits_low
            else f"{n - target} nodes above the {target} that fit at high (spare_nodes "
            f"{p.spare_nodes})"
        )
        return decision("in", target, why)
    return decision("hold", n, "within the band")


def after(mem: Memory, d: Decision, now: float) -> Memory:
    """The memory once ``d`` was carried out at ``now`` (an acting decision starts the cool-down;
    a node count change clears the busy streak)."""
    if not d.acts:
        return mem
    streak = 0 if d.nodes_after != d.nodes_before else mem.busy_streak
    return replace(
        mem,
        last_at=now,
        last_action=d.action,
        last_nodes=(d.nodes_before, d.nodes_after),
        busy_streak=streak,
        slow=None if d.action == "replace" else mem.slow,
    )


def with_lag_sample(mem: Memory, lag: Mapping[str, float | None], lag_high_s: float) -> Memory:
    """Count a measurement of event-time lag: the node whose lag exceeds the least lagging
    node's by most, and by more than ``lag_high_s``, extends its streak; otherwise it ends.
    Relative to the node keeping up best, because what every node shares (files arriving in
    bursts, a busy driver, the load) lags them all alike and is scale-out's, not one node's."""
    known = {k: v for k, v in lag.items() if v is not None}
    if len(known) < 2:
        return replace(mem, slow=None)
    floor = min(known.values())
    over = {k: v - floor for k, v in known.items() if v - floor > lag_high_s}
    if not over:
        return replace(mem, slow=None)
    worst = max(sorted(over), key=lambda k: over[k])
    streak = mem.slow[1] + 1 if mem.slow is not None and mem.slow[0] == worst else 1
    return replace(mem, slow=(worst, streak))


def with_busy_sample(mem: Memory, busy: Mapping[str, float | None], busy_high: float) -> Memory:
    """Count a measurement: the streak grows while some node's busy share is above
    ``busy_high``, and ends at a sample where none is."""
    hot = any(v is not None and v > busy_high for v in busy.values())
    return replace(mem, busy_streak=mem.busy_streak + 1 if hot else 0)


def match_nodes(fresh: Plan, hosted: Mapping[str, set[str]], keep: Sequence[str]) -> list[str]:
    """A running node id for each node of ``fresh`` (in its order), as many of its queries
    staying where they run as the greedy pairing gives: pairs (fresh node, running node) by
    shared queries, largest first; fresh nodes left over take the running nodes left over in
    ``keep``'s order.  ``hosted``: the queries each running node runs; only ids in ``keep``
    are used (``len(keep) == len(fresh.nodes)``)."""
    if len(keep) != len(fresh.nodes):
        raise ValueError(f"{len(fresh.nodes)} plan nodes for {len(keep)} running nodes")
    pairs = []
    for j, node in enumerate(fresh.nodes):
        ids = {q.id for t in node.trees for q in t.queries}
        for nid in keep:
            shared = len(ids & hosted.get(nid, set()))
            if shared:
                pairs.append((-shared, j, nid))
    out: list[str | None] = [None] * len(fresh.nodes)
    used: set[str] = set()
    for _, j, nid in sorted(pairs):
        if out[j] is None and nid not in used:
            out[j] = nid
            used.add(nid)
    rest = iter(n for n in keep if n not in used)
    return [nid if nid is not None else next(rest) for nid in out]


def keep_nodes(
    fresh: Plan,
    hosted: Mapping[str, set[str]],
    running: Sequence[str],
    first: Mapping[str, int] | None = None,
) -> list[str]:
    """For a scale-in to ``len(fresh.nodes)`` nodes: the running nodes to keep, those sharing
    the most queries with the fresh plan's nodes (``match_nodes`` over every running node,
    the others retire).  ``first``: a rank per running node that comes before the shared
    queries (lower kept first; on Ray's autoscaler, the plan nodes whose Ray node stays:
    ``cluster.deployment.pinning.keep_rank``)."""
    k = len(fresh.nodes)
    scored = []
    for nid in running:
        best = max(
            (len({q.id for t in n.trees for q in t.queries} & hosted.get(nid, set())))
            for n in fresh.nodes
        )
        scored.append(((first or {}).get(nid, 0), -best, running.index(nid), nid))
    return [s[-1] for s in sorted(scored)[:k]]


class Autoscaler:
    """The policy, its memory and the measurement it keeps between samples (the busy share
    is the growth of each actor's cumulative ``busy_s`` over wall time since the last
    sample)."""

    def __init__(self, policy: AutoscalePolicy):
        self.policy = policy
        self.memory = Memory()
        self.last: dict | None = None  # the last decision that acted or was vetoed, JSON-ready
        self.decisions = 0
        self._prev: dict[str, tuple[float, float]] = {}  # node -> (wall s, busy_s)
        self._counts: tuple | None = None  # (query set, need at high, need at low)

    def set_enabled(self, on: bool) -> None:
        self.memory = replace(self.memory, enabled=bool(on))

    def measure(self, metrics: Mapping[str, Mapping], now: float) -> tuple[dict, dict, dict]:
        """(busy share, queue depth, event-time lag in seconds) per node from the actors'
        counters at ``now``."""
        busy: dict[str, float | None] = {}
        queue: dict[str, int | None] = {}
        lag: dict[str, float | None] = {}
        for nid, m in metrics.items():
            prev = self._prev.get(nid)
            b = float(m.get("busy_s", 0.0))
            busy[nid] = None if prev is None or now <= prev[0] else (b - prev[1]) / (now - prev[0])
            queue[nid] = m.get("queue_depth")
            lag[nid] = None if m.get("lag_ms") is None else float(m["lag_ms"]) / 1000.0
            self._prev[nid] = (now, b)
        for gone in set(self._prev) - set(metrics):
            del self._prev[gone]
        self.memory = with_busy_sample(self.memory, busy, self.policy.busy_high)
        self.memory = with_lag_sample(self.memory, lag, self.policy.lag_high_s)
        return busy, queue, lag

    def observe(self, planned, queries, model, busy, queue, now, lag=None) -> Observation:
        """The observation of the running plan's ``planned`` costs and ``queries`` (the counts
        are kept for the last query set: between changes only the measurement changes)."""
        r = model.rates
        key = (
            tuple(sorted(q.id for q in queries)),
            tuple(sorted(r.items())) if isinstance(r, Mapping) else r,
        )
        if self._counts is None or self._counts[0] != key:
            need = self.policy.count(queries, model, self.policy.high)
            low = self.policy.count(queries, model, self.policy.low)
            self._counts = (key, need, low)
        _, need, low = self._counts
        return Observation(now, dict(planned), need, low, busy, queue, dict(lag or {}))

    def plan_on(self, queries, model, k: int) -> Plan | None:
        """A plan of ``queries`` on exactly ``k`` nodes fitting at ``high`` (None: none found)."""
        p = self.policy
        res = node_count(
            queries, model, p.high * p.capacity, k, k, p.optimizers, p.exact_max_queries
        )
        return res.plan if res.fits else None

    def decide(self, obs: Observation) -> Decision:
        return decide(self.policy, obs, self.memory)

    def record(self, d: Decision, now: float, wall: float) -> None:
        """Remember ``d`` (carried out, or vetoed) for the cool-down and ``status``."""
        self.memory = after(self.memory, d, now)
        if d.acts:
            self.decisions += 1
        self.last = {
            "wall_time": wall,
            "action": d.action,
            "nodes_before": d.nodes_before,
            "nodes_after": d.nodes_after,
            "reason": d.reason,
        }

    def to_state(self, now: float, wall: float) -> dict:
        """What ``serve --resume`` needs to go on where the policy was (``ctl autoscale off``,
        the last decision and its cool-down, the streaks): JSON-ready, the last decision's
        time as wall time (``now``: this process's monotonic clock, ``wall``: ``time.time``
        at the same moment)."""
        m = self.memory
        return {
            "enabled": m.enabled,
            "last_wall": None if m.last_at is None else wall - (now - m.last_at),
            "last_action": m.last_action,
            "last_nodes": None if m.last_nodes is None else list(m.last_nodes),
            "busy_streak": m.busy_streak,
            "slow": None if m.slow is None else list(m.slow),
            "last": self.last,
            "decisions": self.decisions,
        }

    def restore_state(self, saved: dict, now: float, wall: float) -> None:
        """Go on from ``to_state``'s record (the cool-down counts the time the deployment
        was down)."""
        last_wall = saved.get("last_wall")
        self.memory = Memory(
            enabled=bool(saved.get("enabled", True)),
            last_at=None if last_wall is None else now - (wall - float(last_wall)),
            last_action=saved.get("last_action"),
            last_nodes=None if saved.get("last_nodes") is None else tuple(saved["last_nodes"]),
            busy_streak=int(saved.get("busy_streak", 0)),
            slow=None if saved.get("slow") is None else (saved["slow"][0], int(saved["slow"][1])),
        )
        self.last = saved.get("last")
        self.decisions = int(saved.get("decisions", 0))

    def status(self, now: float) -> dict:
        """``status``'s ``autoscale`` key: the policy, on/off, the last decision, the cool-down
        left."""
        m = self.memory
        left = 0.0 if m.last_at is None else max(0.0, self.policy.cooldown_s - (now - m.last_at))
        return {
            "enabled": m.enabled,
            "policy": self.policy.to_dict(),
            "last_decision": self.last,
            "decisions": self.decisions,
            "cooldown_left_s": left,
            "busy_streak": m.busy_streak,
            "slow": None if m.slow is None else list(m.slow),
        }
