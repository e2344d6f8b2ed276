"""``RUN_DIR/events.jsonl``: one line per change of the running plan (command or cause, wall
and event time, trees moved, planned costs before and after), and the latest ones in memory.

Why its own module: the file is the service's log (``status``, the load page and
``weaveplace report`` read it), it outlives a resume (the latest lines are read back), and a
fresh start clears it; the commands only hand it events.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cluster.answers.files import jsonable

if TYPE_CHECKING:
    from cluster.service.plan_file import PreparedPlan

#: events kept in memory (and shown by ``status``)
LATEST = 20


@dataclass
class Change:
    """One command's transaction: its event's name, the planned (TotalCost, MaxCost) before
    it and the event's details (filled in by the command; ``Service.commit`` logs it)."""

    command: str
    before: tuple[float, float]
    detail: dict = field(default_factory=dict)
    #: the command ended with a checkpoint of every node (``ChurnDeployment.apply_changes``):
    #: ``commit`` hands over its answers without taking another, identical one
    checkpointed: bool = False
    #: offline WeaveShare's TotalCost of the queries running once the command is done, priced
    #: while the actors changed their trees (None: the drift check prices it)
    reference: float | None = None
    #: the plan file encoded meanwhile (``cluster.service.plan_file``; None: the commit does)
    plan: PreparedPlan | None = None

    def warmed(self, result: object) -> None:
        """Keep what ``apply_changes``' warm-up returned (``Service.while_changing``:
        ``(reference, prepared plan or None)``; None when it failed)."""
        if isinstance(result, tuple):
            self.reference, self.plan = result


class EventLog:
    """Appends events to ``path`` and keeps the latest in ``latest``."""

    def __init__(self, path: Path):
        self.path = path
        self.latest: list[dict] = []
        #: events so far per ``command`` (``/metrics`` counts recoveries, failures, ... by it)
        self.counts: Counter[str] = Counter()

    def clear(self) -> None:
        """A fresh deployment: no events yet."""
        if self.path.exists():
            self.path.unlink()

    def reload(self) -> None:
        """A resumed deployment: the latest events from the file."""
        if self.path.exists():
            self.latest = [
                json.loads(x) for x in self.path.read_text().splitlines()[-LATEST:] if x.strip()
            ]
            self.counts = Counter(
                json.loads(x).get("command")
                for x in self.path.read_text().splitlines()
                if x.strip()
            )

    def append(self, event: dict) -> None:
        self.latest.append(event)
        self.counts[event.get("command")] += 1
        with open(self.path, "a") as f:
            f.write(json.dumps(event, default=jsonable) + "\n")
