"""The autoscale policy acting on a running service: measure, decide, carry out.

Why a collaborator of its own: ``cluster.service.autoscale`` decides (a pure policy over an
observation); this module is where a decision meets the running deployment: it gathers the
observation (the nodes' counters, their event-time lag, the running plan's costs), and carries
a decision out as one change of the service (nodes added or retired through
``cluster.service.node_commands``, a slow node replaced, the model's plan reached by the
service's re-plan), recorded as one ``autoscale`` event.  It runs between micro-batches
(``after_batch``) and after each command that may have changed the load.
"""

from __future__ import annotations

import time
from typing import Any

from cluster.service.autoscale import Autoscaler, keep_nodes, match_nodes
from cluster.service.events import Change
from cluster.service.refusals import Conflict


class Elastic:
    """``svc``'s autoscale policy at work (``autoscaler``: the policy and its memory;
    ``resources``: Ray's autoscaler of an attached cluster, else None)."""

    def __init__(self, svc: Any, autoscaler: Autoscaler, resources: Any = None):
        self.svc = svc
        self.autoscaler = autoscaler
        self.resources = resources

    def after_batch(self) -> None:
        """After a micro-batch (the stream calls it, holding off the next one): evaluate the
        policy, unless a command is waiting (it evaluates after itself)."""
        with self.svc.gate.unless_busy() as free:
            if free and self.svc.state == "running":
                self.evaluate("micro-batch")

    def set_enabled(self, on: bool) -> dict:
        """``ctl autoscale on|off``: override the policy at run time; switched on, it
        evaluates at once (the load it finds may have changed while it was off)."""
        svc = self.svc
        with svc.gate.command("autoscale"):
            self.autoscaler.set_enabled(on)
            n = len(svc.dep.nodes)
            svc.record_event(
                "autoscale",
                svc.costs(),
                action="on" if on else "off",
                reason={"why": "switched"},
                nodes_before=n,
                nodes_after=n,
            )
            if on and svc.state == "running":
                self.evaluate("autoscale on")
            return self.autoscaler.status(time.monotonic())

    def evaluate(self, cause: str) -> None:
        """One evaluation of the policy (inside a command or between micro-batches) and, when
        it decides, the decision carried out as one change: nodes added (``add-node``'s path,
        Ray's autoscaler asked first on an attached cluster) or retired (``retire-node``'s
        path), a slow node replaced, then the model's plan reached by ``rebalance``'s
        re-weaving and moves."""
        from placement.queries import query_from_mapping

        svc, a = self.svc, self.autoscaler
        now = time.monotonic()
        try:
            metrics = svc.dep.metrics()["nodes"]
        except Exception:  # a node being recovered: measure next time
            return
        for nid, peak in svc.dep.liveness.take_lag_peaks().items():
            if nid in metrics:  # the lag between samples counts, not only at the sample
                metrics[nid]["lag_ms"] = max(metrics[nid].get("lag_ms") or 0, peak)
        busy, queue, lag = a.measure(metrics, now)
        if not a.memory.enabled:
            return
        running = svc.running
        qs = [query_from_mapping(running.queries[i]) for i in sorted(running.queries)]
        plan, _ = svc.placement_plan()
        planned = {n.id: n.cost for n in plan.nodes}
        obs = a.observe(planned, qs, svc.model, busy, queue, now, lag)
        d = a.decide(obs)
        if svc.dep.lagging and d.action not in ("replace", "vetoed"):
            return  # a node silent: nothing but the slow node's replacement moves meanwhile
        if d.action == "vetoed":
            last = a.last or {}
            if (last.get("action"), last.get("nodes_after")) != ("vetoed", d.nodes_after):
                a.record(d, now, time.time())
                svc.record_event("autoscale", svc.costs(), **_decision_fields(d, cause))
            return
        if not d.acts:
            return
        change = Change("autoscale", svc.costs())
        fresh = obs.need.plan if d.nodes_after == obs.need.nodes else None
        if d.action == "replace":  # the slow node's trees move whole: no re-plan
            fresh = None
        if fresh is None and d.action in ("replan", "in"):  # a plan on exactly that many nodes
            fresh = a.plan_on(qs, svc.model, d.nodes_after)
            if fresh is None:  # none fits there (e.g. above max_nodes): nothing to reach
                return
        extra = self._carry_out(d, fresh, change)
        a.record(d, now, time.time())
        change.detail.update(**_decision_fields(d, cause), **extra)
        change.detail["nodes_after"] = len(svc.dep.nodes)
        svc.commit(change)

    def _hosted(self) -> dict[str, set[str]]:
        running = self.svc.running
        return {
            nid: {q for t in running.trees.values() if t.node == nid for q in t.active}
            for nid in self.svc.dep.nodes
        }

    def _capacity(self) -> float | None:
        """An added node's capacity: the policy's, when the nodes have one (a re-plan needs
        all or none)."""
        has = any(c is not None for c in self.svc.running.capacity.values())
        return self.autoscaler.policy.capacity if has else None

    def _keep_first(self) -> dict[str, int] | None:
        """On Ray's autoscaler, which plan nodes a scale-in keeps first: those whose Ray node
        stays (``pinning.keep_rank``), so the emptied workers go; None elsewhere."""
        if self.resources is None:
            return None
        from cluster.deployment.pinning import head_ray_node, keep_rank

        pins = {nid: n.ray_node for nid, n in self.svc.dep.nodes.items()}
        return keep_rank(pins, head_ray_node())

    def _carry_out(self, d, fresh, change: Change) -> dict:
        """Carry out ``d``: add or retire nodes, then reach ``fresh`` (the model's plan on
        ``d.nodes_after`` nodes; None for a measured scale-out: the added node takes trees
        from the busiest as ``add-node`` does)."""
        svc = self.svc
        nodes = svc.node_commands
        if d.action == "replace":
            return self._replace(d.reason["slow_node"])
        hosted = self._hosted()
        extra: dict = {}
        if d.nodes_after > d.nodes_before:
            k = d.nodes_after - d.nodes_before
            if self.resources is not None:
                extra["resources"] = self.resources.scale_to(d.nodes_after)
            cap = self._capacity()
            extra["added"] = [nodes.add(None, cap, "autoscale")["node"] for _ in range(k)]
        elif d.nodes_after < d.nodes_before and fresh is not None:
            keep = keep_nodes(fresh, hosted, list(svc.dep.nodes), self._keep_first())
            ids = match_nodes(fresh, hosted, keep)
            where = {
                q.id: ids[j] for j, n in enumerate(fresh.nodes) for t in n.trees for q in t.queries
            }
            extra["retired"] = []
            for nid in [n for n in list(svc.dep.nodes) if n not in keep]:
                nodes.retire(nid, where, "autoscale")
                extra["retired"].append(nid)
            if self.resources is not None:
                extra["resources"] = self.resources.release_to(d.nodes_after)
        if fresh is not None and len(fresh.nodes) == len(svc.dep.nodes):
            ids = match_nodes(fresh, self._hosted(), list(svc.dep.nodes))
            reply = svc.replan_to(fresh, ids, change, None)
            extra["replan"] = {k: reply[k] for k in ("moved", "moves_skipped")}
        return extra

    def _replace(self, slow: str) -> dict:
        """A slow node replaced: a new node is added (``add-node``'s path) and ``slow``
        retired (``retire-node``'s path), its trees going to the new node."""
        svc = self.svc
        extra: dict = {}
        n = len(svc.dep.nodes)
        if self.resources is not None:
            extra["resources"] = self.resources.scale_to(n + 1)
        new = svc.node_commands.add(None, self._capacity(), "autoscale")["node"]
        running = svc.running
        where = {q: new for t in running.trees.values() if t.node == slow for q in t.active}
        svc.node_commands.retire(slow, where, "autoscale")
        if self.resources is not None:
            extra["resources"] = self.resources.release_to(n)
        return {**extra, "added": [new], "retired": [slow]}


def no_policy() -> Conflict:
    """The refusal of ``ctl autoscale`` without a policy."""
    return Conflict("autoscale: no placement.autoscale policy in this deployment's config")


def _decision_fields(d, cause: str) -> dict:
    return {
        "action": d.action,
        "cause": cause,
        "reason": d.reason,
        "nodes_before": d.nodes_before,
        "nodes_after": d.nodes_after,
    }
