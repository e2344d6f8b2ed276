"""The recent load of a running deployment, in memory: what the load page plots over time.

Why its own class: ``load.jsonl`` (``cluster.service.status.sample_load``) holds every sample of
a deployment's life for ``weaveplace report``; the page needs only the last minutes, every 2 s,
without re-reading a growing file.  The samples carry cumulative counters per node (busy
seconds, answers), so rates come from differences of two samples: ``series`` turns them into
points, a point per interval of at least ``min_interval_s`` (rates over a few milliseconds
between two back-to-back samples would be noise).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

#: the per-node values of a series point, each a list aligned with the point times ``t``
NODE_SERIES = ("planned_cost", "busy_share", "queue_depth", "answers_per_s", "tuples_per_s")


class LoadHistory:
    """The latest load samples (``load.jsonl`` rows), at most ``max_samples``, and the rates
    of the last ``window_s`` seconds derived from them."""

    def __init__(self, window_s: float = 600.0, max_samples: int = 4000):
        self.window_s = float(window_s)
        self._rows: deque[dict] = deque(maxlen=max_samples)

    @classmethod
    def from_file(cls, path: Path, window_s: float = 600.0, max_samples: int = 4000):
        """A resumed deployment: the history continues from the samples ``path`` holds."""
        h = cls(window_s, max_samples)
        if path.is_file():
            for line in path.read_text().splitlines()[-max_samples:]:
                try:
                    h.add(json.loads(line))
                except ValueError:  # a line cut by a crash: skip it
                    continue
        return h

    def add(self, row: dict) -> None:
        """One sample: ``wall_time``, ``answers`` and per node ``planned_cost``, ``busy_s``,
        ``answers``, ``tuples``, ``queue_depth`` (cumulative counters where they count)."""
        self._rows.append(row)

    def __len__(self) -> int:
        return len(self._rows)

    def series(self, now: float, min_interval_s: float = 1.0) -> dict:
        """Points of the last ``window_s`` before ``now``: per node its planned cost and
        queue depth at the point, and over the interval since the previous point its busy
        share (busy seconds / wall seconds), answers/s and tuples/s; and the deployment's
        answers/s.  A node missing from either end of an interval, or whose counters went
        back (an actor restored from a checkpoint), has None there."""
        rows = [r for r in self._rows if r.get("wall_time", 0) >= now - self.window_s]
        points: list[tuple[dict, dict]] = []
        prev = rows[0] if rows else None
        for r in rows[1:]:
            if r["wall_time"] - prev["wall_time"] >= min_interval_s:
                points.append((prev, r))
                prev = r
        names = sorted({n for _, r in points for n in r.get("nodes", {})})
        nodes = {n: {k: [] for k in NODE_SERIES} for n in names}
        t, answers = [], []
        for a, b in points:
            dt = b["wall_time"] - a["wall_time"]
            t.append(b["wall_time"])
            answers.append(rate(a.get("answers"), b.get("answers"), dt))
            for n in names:
                na, nb = a.get("nodes", {}).get(n), b.get("nodes", {}).get(n)
                s = nodes[n]
                s["planned_cost"].append(None if nb is None else nb.get("planned_cost"))
                s["queue_depth"].append(None if nb is None else nb.get("queue_depth"))
                for key, counter in (
                    ("busy_share", "busy_s"),
                    ("answers_per_s", "answers"),
                    ("tuples_per_s", "tuples"),
                ):
                    s[key].append(
                        None
                        if na is None or nb is None
                        else rate(na.get(counter), nb.get(counter), dt)
                    )
        return {
            "now": now,
            "window_s": self.window_s,
            "t": t,
            "answers_per_s": answers,
            "nodes": nodes,
        }


def rate(before, after, dt: float) -> float | None:
    """``(after - before) / dt`` of a cumulative counter; None when unknown or gone back."""
    if before is None or after is None or dt <= 0 or after < before:
        return None
    return (after - before) / dt
