"""What a run produced, as ``Deployment.finish`` returns it.

Why its own module: both answer routes (``answer_routes``) build it, and the runs
(``cluster.runs``) write it, without needing the deployment itself.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from cluster.answers.sink import read_answers, read_late


class RunResult:
    """What a run produced: answers (query_id, window_start, window_end, value), late tuples
    (node_id, tree_id, stream, ts_ms, value), per-node metrics, the re-placements of nodes
    lost for good (also in ``metrics["replacements"]``) and the nodes added (``additions``).

    On the actor route (``DeploymentOptions(answers="actors")``) the answers and late tuples are the
    datasets the actors wrote (``answers_dir``, ``late_dir``); ``answers``/``late`` read them
    on first access (one table each, sorted as on the driver route): the run itself never
    brings them to the driver."""

    def __init__(
        self,
        answers: pa.Table | None,
        late: pa.Table | None,
        metrics: dict[str, Any] | None = None,
        *,
        answers_dir: str | None = None,
        late_dir: str | None = None,
    ):
        self._answers, self._late = answers, late
        self.metrics: dict[str, Any] = metrics if metrics is not None else {}
        self.answers_dir, self.late_dir = answers_dir, late_dir

    @property
    def answers(self) -> pa.Table:
        if self._answers is None:
            self._answers = read_answers(self.answers_dir) if self.answers_dir else None
        return self._answers

    @property
    def late(self) -> pa.Table:
        if self._late is None:
            self._late = read_late(self.late_dir) if self.late_dir else None
        return self._late

    @property
    def replacements(self) -> list[dict[str, Any]]:
        return list(self.metrics.get("replacements", []))

    @property
    def additions(self) -> list[dict[str, Any]]:
        """Nodes added while the run went on (``Deployment.add_node``), with the trees moved."""
        return list(self.metrics.get("additions", []))
