"""Live load shedding for ``weaveplace serve``: drop boxes at the sources with the fractions of
paper 003's LP (``placement.shedding.shed_load``) when the input outgrows the nodes.

The decision (as each file is fed, before its rows are split): the input rate is measured over
the files of the last ``rate_window_s`` event seconds, that file included (rows per ms: every DEBS row carries
every stream), the running plan is priced at it on the nodes there are, and the LP gives the
kept fraction of each stream that makes every node fit its capacity while keeping the most
(tuple x query) pairs.  While an autoscale policy can still add a node, nothing is shed (its
measurement adds nodes first).  The fractions in force change when one of them moves by at
least ``min_change`` (or all return to 1: the drops are lifted at once; a fraction within
``min_change`` of 1 counts as 1); each change is an event ``command: shed`` and applies from
the file that brought it on (the state saved after its micro-batch holds it).

Semantics (random drop boxes, docs/DESIGN.md s. 11): a tuple is kept or dropped by a hash of
(ts_ms, index) against its stream's fraction in force when its file is fed
(``cluster.feeds.drop_box``); every answer is the exact aggregate over the kept tuples of its
window, and carries ``kept``: the smallest fraction in force over its window's event time (1:
nothing was dropped there).  No estimate is scaled: a sum or count over a fraction ``kept`` of
the tuples estimates the whole one as ``value / kept``, min/max/avg need no scaling; the
reader chooses.  Streams a count-window query reads are never shed (their windows count
tuples).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cluster.feeds.drop_box import keep_mask


@dataclass(frozen=True)
class SheddingPolicy:
    """``placement.shedding``: ``min_change``, the smallest move of a kept fraction that changes
    the drops in force; ``rate_window_s``: event seconds of recent files the rate is measured
    over."""

    min_change: float = 0.02
    rate_window_s: float = 10.0


def measured_rate(files: list[tuple[int, int, int]], window_ms: float) -> float | None:
    """Rows per ms over the newest files (``(rows, ts_min, ts_max)`` each, in feed order)
    reaching back ``window_ms`` from the newest timestamp: the rows over their time span,
    the span widened by one mean gap (n rows cover n gaps, not n - 1).  None: too little."""
    if not files:
        return None
    newest = max(f[2] for f in files)
    rows, lo = 0, newest
    for n, a, b in reversed(files):
        if b < newest - window_ms:
            break
        rows += n
        lo = min(lo, a)
    span = newest - lo
    if rows < 2 or span <= 0:
        return None
    return rows / (span * rows / (rows - 1))


class LoadShedder:
    """The drop boxes of ``svc`` (a ``cluster.service.service.Service``) and the policy that
    sets them (module docstring)."""

    def __init__(self, svc: Any, policy: SheddingPolicy):
        self.svc = svc
        self.policy = policy
        self.keep: dict[str, float] = {}  # stream -> kept fraction in force (absent: 1)
        #: the changes so far: ``{"after_ts", "after_files", "keep"}`` (rows newer than
        #: ``after_ts``, in files after the first ``after_files``, use ``keep``)
        self.steps: list[dict] = []
        self.kept_rows: dict[str, int] = {}
        self.dropped_rows: dict[str, int] = {}
        self.last: dict | None = None  # the last decision's record, for status
        self._files: deque[tuple[int, int, int]] = deque(maxlen=10_000)
        self._stream_of: dict[str, str] = {}  # query id -> stream, of every query seen

    # -- the data path ------------------------------------------------------------------------
    @property
    def dropping(self) -> bool:
        return any(x < 1.0 for x in self.keep.values())

    def split(self, t: pa.Table, streams: list[str]) -> list[tuple[str | None, pa.Table]]:
        """One file's rows (``ts_ms``, ``index``, the streams; in feed order) as what to feed:
        all streams together while nothing is dropped; else one table per distinct kept
        fraction, its streams' columns over the rows it keeps (a stream at 0 is not fed)."""
        n = t.num_rows
        if n:
            ts = t.column("ts_ms").to_numpy()
            self._files.append((n, int(ts.min()), int(ts.max())))
            self.evaluate()  # the rate this file brings decides its own drops
        if not self.dropping:
            for s in streams:
                self.kept_rows[s] = self.kept_rows.get(s, 0) + n
            return [(None, t.select(["ts_ms", *streams]))]
        ts = t.column("ts_ms").to_numpy()
        idx = t.column("index").to_numpy()
        groups: dict[float, list[str]] = {}
        for s in streams:
            groups.setdefault(self.keep.get(s, 1.0), []).append(s)
        out: list[tuple[str | None, pa.Table]] = []
        for x, group in sorted(groups.items()):
            m = keep_mask(ts, idx, x)
            k = int(m.sum())
            for s in group:
                self.kept_rows[s] = self.kept_rows.get(s, 0) + k
                self.dropped_rows[s] = self.dropped_rows.get(s, 0) + n - k
            if k:
                part = t.select(["ts_ms", *group])
                out.append((None, part if k == n else part.filter(pa.array(m))))
        return out

    def with_kept(self, answers: pa.Table) -> pa.Table:
        """``answers`` with their ``kept`` column (module docstring)."""
        n = answers.num_rows
        kept = np.ones(n)
        if n and self.steps:
            # a query removed meanwhile still has its last answers: its stream is remembered
            for q, spec in self.svc.running.queries.items():
                self._stream_of[q] = spec["stream"]
            qid = answers.column("query_id")
            if pa.types.is_dictionary(qid.type):
                qid = qid.cast(pa.string())
            stream = pa.array([self._stream_of.get(q) for q in qid.to_pylist()], pa.string())
            ws = answers.column("window_start").to_numpy()
            we = answers.column("window_end").to_numpy()
            bounds = np.array([st["after_ts"] for st in self.steps], dtype=np.int64)
            for s in {step_s for st in self.steps for step_s in st["keep"]}:
                rows = np.asarray(pc.equal(stream, s).fill_null(False))
                if not rows.any():
                    continue
                vals = np.array([1.0] + [st["keep"].get(s, 1.0) for st in self.steps])
                lo = np.searchsorted(bounds, ws[rows], side="left")
                hi = np.searchsorted(bounds, we[rows] - 1, side="left")
                k = np.full(int(rows.sum()), np.inf)
                for j, v in enumerate(vals):
                    k = np.where((lo <= j) & (j <= hi), np.minimum(k, v), k)
                kept[rows] = k
        return answers.append_column("kept", pa.array(kept, pa.float64()))

    # -- the policy ---------------------------------------------------------------------------
    def evaluate(self) -> None:
        """One decision, as a file is fed, with its rows counted in the rate (module
        docstring)."""
        from placement.shedding import InfeasibleEvenWhenShedding, shed_load

        svc = self.svc
        rate = measured_rate(list(self._files), self.policy.rate_window_s * 1000.0)
        if rate is None:
            return
        plan, _ = svc.placement_plan()
        streams = sorted(plan.rates)
        whole = {q["stream"] for q in svc.running.queries.values() if q.get("kind") == "count"}
        rates = {s: rate for s in streams}
        a = svc.autoscaler
        why = None
        if a is not None and a.memory.enabled and len(svc.dep.nodes) < a.policy.max_nodes:
            target = {s: 1.0 for s in streams}
            why = "the autoscale policy can still add a node"
        else:
            try:
                res = shed_load(plan, rates, whole=whole)
                # a fraction within min_change of 1 keeps everything: no drops for a hair
                # over capacity (the band also keeps the lift from flapping)
                top = 1.0 - self.policy.min_change
                target = {s: 1.0 if x >= top else float(x) for s, x in res.keep.items()}
            except InfeasibleEvenWhenShedding as e:
                self._note("infeasible", rates, str(e))
                return
        now = {s: self.keep.get(s, 1.0) for s in target}
        lift = all(x >= 1.0 for x in target.values()) and self.dropping
        moved = max((abs(target[s] - now[s]) for s in target), default=0.0)
        if not lift and moved < self.policy.min_change:
            return
        self.keep = {s: x for s, x in target.items()}
        self.steps.append({**self._here(), "keep": dict(self.keep)})
        self._note("lift" if lift else "shed", rates, why)

    def _here(self) -> dict:
        """Where a change made now applies from: the files fed before the one being fed, and
        the newest timestamp of those (rows newer than it use the change)."""
        stream = self.svc.stream
        newest = [f[2] for f in list(self._files)[:-1]]
        if stream.stats.max_ts is not None:
            newest.append(int(stream.stats.max_ts))
        first = -(1 << 62)  # nothing fed yet: every row is newer
        return {"after_ts": max(newest, default=first), "after_files": int(stream.files_before)}

    def _note(self, action: str, rates: dict, why: str | None) -> None:
        svc = self.svc
        if action == "infeasible" and (self.last or {}).get("action") == "infeasible":
            return  # said once until something changes
        self.last = {
            "action": action,
            "keep": dict(self.keep),
            "rates_per_ms": rates,
            "why": why,
        }
        svc.record_event(
            "shed",
            svc.costs(),
            action=action,
            keep=dict(self.keep),
            rates_per_ms=rates,
            **self._here(),
            reason=why,
        )

    # -- status and state ---------------------------------------------------------------------
    def status(self) -> dict:
        return {
            "keep": dict(self.keep),
            "kept_rows": dict(self.kept_rows),
            "dropped_rows": dict(self.dropped_rows),
            "changes": len(self.steps),
            "last": self.last,
        }

    def to_state(self) -> dict:
        return {
            "keep": dict(self.keep),
            "steps": list(self.steps),
            "kept_rows": dict(self.kept_rows),
            "dropped_rows": dict(self.dropped_rows),
        }

    def restore_state(self, r: dict) -> None:
        self.keep = dict(r.get("keep", {}))
        self.steps = list(r.get("steps", []))
        self.kept_rows = dict(r.get("kept_rows", {}))
        self.dropped_rows = dict(r.get("dropped_rows", {}))
