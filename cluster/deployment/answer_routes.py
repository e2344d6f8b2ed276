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

The end of a run on either route is one round asking every node at once
(``ask_every_node``), which survives a node dying in it: the deployment's recovery rebuilds
the node and the round is asked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        """One round asks every node for its answers, late tuples and metrics; a node that
        dies in it is rebuilt and asked again (``ask_every_node``): nothing was taken from
        it, so its regenerated answers are the ones wanted.  A drill at the batch after the
        last fires just before that round."""
        t0, t1, t2 = timings
        dep.fire_faults(dep.batches_fed)
        # one round: each node's answers, late tuples and metrics asked together (an actor
        # runs one caller's calls in order, so its metrics count the drain's answer time)
        replies = ask_every_node(
            dep, lambda a: (a.drain_blocks.remote(), a.late.remote(), a.metrics.remote())
        )
        nids = list(replies)
        answers = [r[0] for nid in nids for r in replies[nid]]
        lates = [replies[nid][-1][1] for nid in nids]  # cumulative: the last reply has all
        per_node = [replies[nid][-1][2] for nid in nids]
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
        written, is an orphan that ``finalize`` deletes.  Afterwards every answer is committed:
        a node rebuilt later (``finish``) drops the answers its replay regenerates."""
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
        then one round asks each node for its late tuples (written as its ``part-final`` of
        ``late.parquet``) and its metrics, and uncommitted parts are deleted
        (``cluster.answers.sink``'s protocol).  Only part names and counts reach the driver.

        After ``last_round`` every answer is committed.  A node whose actor dies from then on
        (or that a drill at the batch after the last kills or loses: fired here) is rebuilt by
        the deployment's recovery (``ask_every_node``): restarted from its last snapshot and
        replayed, or its trees re-placed on the other nodes.  That rebuilds the trees' state,
        hence their late tuples and counters, but regenerates answers already committed, so
        each node drops its pending answers (``forget_answers``) before writing its late
        tuples: exactly once.  A node that was not rebuilt has none to drop (checked)."""
        t0, t1, t2 = timings
        self.last_round(dep)
        failures = len(dep.fault_log.events)
        dep.fire_faults(dep.batches_fed)
        root = str(self.late_commits.root)
        # one round: each node's dropped answers, late part and metrics (in order per actor)
        replies = ask_every_node(
            dep,
            lambda a: (a.forget_answers.remote(), a.write_late.remote(root), a.metrics.remote()),
        )
        nids = list(replies)
        dropped = sum(int(r[0]) for rs in replies.values() for r in rs)
        if dropped and len(dep.fault_log.events) == failures:
            raise DeploymentError(
                f"internal: {dropped} answers were left after every node wrote its last part"
            )
        for nid in nids:  # a node asked twice wrote its late part twice: the last one has all
            self.late_commits.commit(replies[nid][-1][1])
        t3 = time.perf_counter()
        orphans = self.answer_commits.finalize() + self.late_commits.finalize()
        t4 = time.perf_counter()
        metrics = dep.metrics({nid: replies[nid][-1][2] for nid in nids})
        metrics["replayed_answers_dropped"] = dropped
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


def ask_every_node(dep, ask: Callable[[Any], tuple]) -> dict[str, list[tuple]]:
    """Node id -> the replies of ``ask(actor)`` (a tuple of refs, which the actor runs in
    order), every node asked in one round: the end of a run (after the flush).

    A node whose actor dies before all its replies came is rebuilt through the deployment's
    recovery (``Deployment.actor_died``: restarted from its last snapshot with the log
    replayed, or, its Ray node gone, lost and its trees re-placed on the others), and then
    every node is asked again, since a re-placement changes the adopters' state too.  Replies
    of an actor that was replaced since are dropped (its successor rebuilt the same state and
    answered again), as are the replies of nodes lost; so each node's list holds the replies
    of its current actor, oldest first.  Recoveries still waiting for a first answer are
    closed in the fault log: it is the end of input."""
    import ray

    got: dict[str, list[tuple[Any, tuple]]] = {}
    todo = list(dep.nodes)
    while todo:
        asked = {nid: (dep.nodes[nid].actor, ask(dep.nodes[nid].actor)) for nid in todo}
        died: list[tuple[str, BaseException]] = []
        for nid, (actor, refs) in asked.items():
            try:
                replies = tuple(ray.get(list(refs)))
            except ray.exceptions.RayActorError as e:
                died.append((nid, e))
                continue
            dep.nodes[nid].last_seen = time.time()
            got.setdefault(nid, []).append((actor, replies))
        for nid, e in died:
            if nid in dep.nodes:  # (not lost meanwhile by another's recovery)
                dep.actor_died(nid, e)
        todo = list(dep.nodes) if died else []
    dep.fault_log.close()  # recoveries since the flush (a drill's too): answered at the end
    return {
        nid: [r for actor, r in got.get(nid, []) if actor is n.actor]
        for nid, n in dep.nodes.items()
    }


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
