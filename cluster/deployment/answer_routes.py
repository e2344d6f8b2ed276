"""Where a deployment's answers go: back to the driver, or written by the node actors.

Why a strategy: the two routes differ at exactly three points, the checkpoint call an actor
gets (answers back as blocks, or written as this round's Parquet part), what the driver does
with its reply (keep the blocks, or commit the part), and how ``finish`` collects what is
left.  One small class per route behind ``AnswerRoute`` keeps those differences in one place
instead of ``if answers == "actors"`` branches through the deployment.

* ``DriverAnswers``: checkpoints hand the answers over as ``AnswerBlocks``; the driver keeps
  them and merges every node's and checkpoint's blocks into one sorted table
  (``merge_blocks``).  ``take_answers`` hands the committed ones over as they come.
* ``ActorAnswers``: each actor writes its answers as ``part-<round>`` under
  ``out_dir/answers.parquet`` and its late tuples once at the end; the driver commits the parts
  (``AnswerCommits``: the protocol of ``cluster.answers.sink``) and never sees an answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from cluster.answers.blocks import AnswerBlocks, empty_late, merge_blocks, trees_answer_int
from cluster.answers.sink import AnswerCommits, WrittenPart
from cluster.deployment.options import DeploymentOptions
from cluster.deployment.result import RunResult
from cluster.deployment.specs import DeploymentError


class AnswerRoute:
    """How answers leave the nodes (one implementation per ``ANSWER_ROUTES`` entry)."""

    name = ""

    def checkpoint_call(self, actor, round_no: int, value_type: str | None):
        """The ref of the actor's checkpoint call: ``(snapshot, answers, last seq)``."""
        raise NotImplementedError

    def commit(self, answers: AnswerBlocks | WrittenPart) -> None:
        """Keep the answers of a checkpoint reply (its snapshot is now the node's)."""
        raise NotImplementedError

    def take_answers(self, checkpoint: Callable[[], None]) -> pa.Table:
        """Hand over (and forget) the answers committed so far, after ``checkpoint()``."""
        raise NotImplementedError

    def finish(self, dep, timings: tuple[float, float, float]) -> RunResult:
        """The run's result once every node is flushed (``timings``: start, queues worked
        off, flushed), with the route's metrics."""
        raise NotImplementedError


class DriverAnswers(AnswerRoute):
    """Answers come back to the driver as blocks and are merged there."""

    name = "driver"

    def __init__(self) -> None:
        from executors import answer_order

        self.committed: list[AnswerBlocks] = []
        answer_order.warm()  # the merge's compiled loops, loaded before any timed work

    def checkpoint_call(self, actor, round_no: int, value_type: str | None):
        return actor.checkpoint_blocks.remote()

    def commit(self, answers: AnswerBlocks | WrittenPart) -> None:
        if answers.num_rows:
            self.committed.append(answers)

    def take_answers(self, checkpoint: Callable[[], None]) -> pa.Table:
        checkpoint()
        parts, self.committed = self.committed, []
        return merge_blocks(parts)

    def finish(self, dep, timings: tuple[float, float, float]) -> RunResult:
        import ray

        t0, t1, t2 = timings
        nids = list(dep.nodes)
        # one round: each node's answers, late tuples and metrics asked together (an actor
        # runs one caller's calls in order, so its metrics count the drain's answer time)
        asked = [
            (a.drain_blocks.remote(), a.late.remote(), a.metrics.remote())
            for a in (dep.nodes[nid].actor for nid in nids)
        ]
        got = ray.get([ref for refs in asked for ref in refs])
        answers, lates, per_node = got[0::3], got[1::3], got[2::3]
        t3 = time.perf_counter()
        table = merge_blocks(self.committed + list(answers))
        t4 = time.perf_counter()
        late = (
            pa.concat_tables([x for x in lates if x.num_rows])
            if any(x.num_rows for x in lates)
            else empty_late()
        )
        metrics = dep.metrics(dict(zip(nids, per_node)))
        metrics["answers"] = table.num_rows
        metrics["answers_route"] = "driver"
        # what crossed into the driver: answer blocks travel as window_start + value
        metrics["answer_bytes_to_driver"] = int(
            sum(p.nbytes for p in self.committed + list(answers)) + sum(x.nbytes for x in lates)
        )
        # where finish spends its time: the nodes working off their queues, flushing, handing
        # over answers (drain + transfer), the driver merging them
        metrics["finish"] = {
            "queue_s": t1 - t0,
            "flush_s": t2 - t1,
            "collect_s": t3 - t2,
            "merge_s": t4 - t3,
        }
        return RunResult(table, late, metrics)


class ActorAnswers(AnswerRoute):
    """The actors write answers (per checkpoint round) and late tuples (at the end) as
    Parquet parts under ``out_dir``; the driver commits the parts it got a reply for."""

    name = "actors"

    def __init__(self, out_dir) -> None:
        self.answer_commits = AnswerCommits(Path(str(out_dir)) / "answers.parquet")
        self.late_commits = AnswerCommits(Path(str(out_dir)) / "late.parquet")
        self.answer_commits.reset()
        self.late_commits.reset()

    def checkpoint_call(self, actor, round_no: int, value_type: str | None):
        return actor.checkpoint_write.remote(
            str(self.answer_commits.root), f"{round_no:06d}", value_type
        )

    def commit(self, answers: AnswerBlocks | WrittenPart) -> None:
        self.answer_commits.commit(answers)

    def take_answers(self, checkpoint: Callable[[], None]) -> pa.Table:
        raise DeploymentError(
            "take_answers: the actors write the answers themselves (answers='actors'); "
            "use the driver route for answers handed over as they come"
        )

    def last_round(self, dep) -> None:
        """The end: every node writes the answers since its last checkpoint as ``part-final``,
        without a snapshot (nothing is replayed after the end, as the driver route takes its
        last answers without one); the parts of the nodes that reply are committed.  If an
        actor died instead, a checkpoint round restores it from its last snapshot (replayed and
        flushed again, ``recovery.py``) and writes its answers under that round's name, while
        the other nodes have nothing left to write; the dead writer's ``part-final``, if it got
        written, is an orphan that ``finalize`` deletes."""
        import ray

        dep.wait_all()
        root, vt = str(self.answer_commits.root), dep.value_type
        refs = [n.actor.write_answers.remote(root, "final", vt) for n in dep.nodes.values()]
        died = False
        for ref in refs:
            try:
                self.answer_commits.commit(ray.get(ref))
            except ray.exceptions.RayActorError:
                died = True
        if died:
            dep.checkpoint()

    def finish(self, dep, timings: tuple[float, float, float]) -> RunResult:
        """A last round writes (and commits) every node's remaining answers (``last_round``),
        each node writes its late tuples, and uncommitted parts are deleted
        (``cluster.answers.sink``'s protocol).  Only part names and counts reach the driver."""
        import ray

        t0, t1, t2 = timings
        self.last_round(dep)
        root = str(self.late_commits.root)
        nids = list(dep.nodes)
        # one round: each node's late part and metrics asked together (in order per actor)
        asked = [
            (a.write_late.remote(root), a.metrics.remote())
            for a in (dep.nodes[nid].actor for nid in nids)
        ]
        got = ray.get([ref for refs in asked for ref in refs])
        for part in got[0::2]:
            self.late_commits.commit(part)
        t3 = time.perf_counter()
        orphans = self.answer_commits.finalize() + self.late_commits.finalize()
        t4 = time.perf_counter()
        metrics = dep.metrics(dict(zip(nids, got[1::2])))
        metrics["answers"] = self.answer_commits.num_rows
        metrics["answers_route"] = "actors"
        metrics["answer_bytes_to_driver"] = 0
        metrics["answer_parts"] = len(self.answer_commits.parts)
        metrics["answer_bytes_written"] = self.answer_commits.nbytes
        metrics["late_tuples"] = self.late_commits.num_rows
        metrics["orphan_parts_removed"] = orphans
        metrics["finish"] = {
            "queue_s": t1 - t0,
            "flush_s": t2 - t1,
            "collect_s": t3 - t2,  # the last round of writes
            "merge_s": t4 - t3,  # the commit (orphans removed, manifest)
        }
        return RunResult(
            None,
            None,
            metrics,
            answers_dir=str(self.answer_commits.root),
            late_dir=str(self.late_commits.root),
        )


def answer_route(options: DeploymentOptions) -> AnswerRoute:
    """The route ``options.answers`` names (checked by ``DeploymentOptions``)."""
    if options.answers == "actors":
        return ActorAnswers(options.out_dir)
    return DriverAnswers()


def answer_value_type(schema: pa.Schema, trees: list[dict]) -> str:
    """The run's answer value type for input of ``schema`` (the actor route writes every part
    with one schema): ``"int64"`` iff every query's aggregate gives integers on its stream's
    type (sliced batches: the type of ``sum``), as the trees themselves decide, else
    ``"float64"``."""
    names = set(schema.names)

    def is_int(stream: str) -> bool:
        col = "sum" if "slice_start" in names else stream
        return col not in names or pa.types.is_integer(schema.field(col).type)

    ok = trees_answer_int(trees, is_int)
    return "int64" if ok else "float64"
