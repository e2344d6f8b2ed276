"""weaveplace queries as Flink SQL window TVFs, and the comparison of two answer tables.

Why a module of its own: it is the pure half of ``weaveplace bench flink`` (no Flink, no Ray,
no Spark), so ``make test`` checks it without the extra.  The job itself runs in Flink's own
Python (``sim/bench/flink_job.py``) from the statements built here.

The translation keeps docs/DESIGN.md s. 1's window convention: window ``k`` of ``(r, s)``
covers ``[k*s, k*s + r)`` of event-time milliseconds, aligned at 0.  Flink's window TVFs
(``HOP``/``TUMBLE``, offset 0) align at the epoch in the session time zone, so the job runs in
UTC.  ``HOP`` needs the range to be a whole number of slides (its slices are
``gcd(r, s) = s`` long), so only those queries are translated; the others are left out and
counted.  One statement per distinct ``(r, s)``, each query of it one aggregate column (the
same grouping as ``bench e2e``'s Spark SQL jobs): Flink reads the input once per statement
set and the windows of one ``(r, s)`` once.

Lateness: weaveplace's watermark is ``max_ts - allowed_lateness`` and it emits a window when
the watermark reaches its end; Flink fires a window when its watermark reaches ``end - 1``
and drops a row whose slice already ended at or below it.  A Flink watermark of
``ts - (allowed_lateness + 1) ms`` gives both the same emission and the same late rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from placement.queries import Query

#: aggregate -> (Flink SQL expression over column ``c``, Flink result type); avg and stddev over
#: DOUBLE (Flink's AVG of a BIGINT is a BIGINT, truncated), range as max - min
SQL_AGGREGATES = {
    "sum": ("SUM({c})", "BIGINT"),
    "count": ("COUNT({c})", "BIGINT"),
    "min": ("MIN({c})", "BIGINT"),
    "max": ("MAX({c})", "BIGINT"),
    "avg": ("AVG(CAST({c} AS DOUBLE))", "DOUBLE"),
    "stddev": ("STDDEV_POP(CAST({c} AS DOUBLE))", "DOUBLE"),
    "range": ("MAX({c}) - MIN({c})", "BIGINT"),
}
#: aggregates whose answers are floating point on integer streams: compared with a tolerance
FLOAT_AGGREGATES = frozenset({"avg", "stddev"})
#: relative tolerance for FLOAT_AGGREGATES (docs/DESIGN.md s. 1: agreement with a brute force
#: to 1e-9 relative); the others must be equal exactly
REL_TOL = 1e-9
#: ``DAY TO SECOND(3)`` intervals (a 2-digit day): below 100 days
MAX_INTERVAL_MS = 100 * 86_400_000


def expressible(q: Query) -> bool:
    """Flink SQL's window TVFs can run ``q``: a time window whose range is a whole number of
    slides (``HOP``; ``TUMBLE`` when equal), over an aggregate it has."""
    return (
        q.kind == "time"
        and q.range % q.slide == 0
        and q.aggregate in SQL_AGGREGATES
        and q.range < MAX_INTERVAL_MS
    )


def split_queries(queries: Iterable[Query]) -> tuple[list[Query], list[Query]]:
    """``(kept, left_out)``: the queries Flink can run, in order, and the others."""
    kept, left = [], []
    for q in queries:
        (kept if expressible(q) else left).append(q)
    return kept, left


def interval_sql(ms: int) -> str:
    """A Flink SQL interval of ``ms`` milliseconds, ``DAY TO SECOND(3)``.  Why not ``SECOND``:
    its leading precision is 2 digits (99 s at most) and Flink's planner refuses a larger
    one, while a day-to-second literal reaches 99 days."""
    if not 1 <= ms < MAX_INTERVAL_MS:
        raise ValueError(f"interval: {ms} ms; expected 1 .. {MAX_INTERVAL_MS - 1}")
    s, f = divmod(ms, 1000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    d, h = divmod(h, 24)
    return f"INTERVAL '{d} {h:02d}:{m:02d}:{s:02d}.{f:03d}' DAY TO SECOND(3)"


@dataclass(frozen=True)
class WindowJob:
    """One statement: every query of one ``(range, slide)``; column ``q{i}`` answers
    ``queries[i]``."""

    name: str
    range: int
    slide: int
    queries: tuple[Query, ...]

    @property
    def columns(self) -> list[tuple[str, str]]:
        """``(column, Flink type)`` of the sink: window start and end, then one per query."""
        cols = [("ws", "TIMESTAMP(3)"), ("we", "TIMESTAMP(3)")]
        return cols + [
            (f"q{i}", SQL_AGGREGATES[q.aggregate][1]) for i, q in enumerate(self.queries)
        ]

    def select_sql(self, source: str = "debs", time_col: str = "rt") -> str:
        """The window TVF query (no INSERT)."""
        if self.range == self.slide:
            tvf = f"TUMBLE(TABLE {source}, DESCRIPTOR({time_col}), {interval_sql(self.range)})"
        else:
            tvf = (
                f"HOP(TABLE {source}, DESCRIPTOR({time_col}), {interval_sql(self.slide)}, "
                f"{interval_sql(self.range)})"
            )
        aggs = [
            SQL_AGGREGATES[q.aggregate][0].format(c=f"`{q.stream}`") + f" AS q{i}"
            for i, q in enumerate(self.queries)
        ]
        return (
            f"SELECT window_start AS ws, window_end AS we, {', '.join(aggs)} "
            f"FROM TABLE({tvf}) GROUP BY window_start, window_end"
        )


def window_jobs(queries: Sequence[Query]) -> list[WindowJob]:
    """One ``WindowJob`` per distinct ``(range, slide)`` of ``queries`` (all expressible)."""
    bad = [q.id for q in queries if not expressible(q)]
    if bad:
        raise ValueError(f"not expressible as a Flink window TVF: {bad}")
    groups: dict[tuple[int, int], list[Query]] = defaultdict(list)
    for q in queries:
        groups[(q.range, q.slide)].append(q)
    return [
        WindowJob(f"w{j}", r, s, tuple(qs)) for j, ((r, s), qs) in enumerate(sorted(groups.items()))
    ]


def source_ddl(path: str, streams: Sequence[str], allowed_lateness_ms: int) -> str:
    """The CSV source (``ts_ms`` then ``streams``, no header) with an event-time column ``rt``
    and the watermark that matches weaveplace's lateness (module docstring)."""
    if allowed_lateness_ms < 0:
        raise ValueError(f"allowed_lateness: {allowed_lateness_ms}; expected >= 0")
    cols = ", ".join(f"`{s}` BIGINT" for s in streams)
    return (
        f"CREATE TABLE debs (ts_ms BIGINT, {cols}, rt AS TO_TIMESTAMP_LTZ(ts_ms, 3), "
        f"WATERMARK FOR rt AS rt - {interval_sql(allowed_lateness_ms + 1)}) "
        f"WITH ('connector' = 'filesystem', 'path' = '{_quote(path)}', 'format' = 'csv')"
    )


def sink_ddl(job: WindowJob, sink: str, path: str | None = None) -> str:
    """The sink table of ``job``: ``blackhole`` (timing) or ``csv`` files under ``path``."""
    cols = ", ".join(f"{c} {t}" for c, t in job.columns)
    if sink == "blackhole":
        opts = "'connector' = 'blackhole'"
    elif sink == "csv":
        if path is None:
            raise ValueError("a csv sink needs a path")
        opts = f"'connector' = 'filesystem', 'path' = '{_quote(path)}', 'format' = 'csv'"
    else:
        raise ValueError(f"sink: {sink!r}; allowed: blackhole, csv")
    return f"CREATE TABLE {job.name}_out ({cols}) WITH ({opts})"


def insert_sql(job: WindowJob) -> str:
    return f"INSERT INTO {job.name}_out {job.select_sql()}"


def _quote(text: str) -> str:
    return text.replace("'", "''")


# ----------------------------------------------------------------------------- answers
ANSWER_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("window_start", pa.int64()),
        ("window_end", pa.int64()),
        ("value", pa.float64()),
    ]
)


def job_answers(job: WindowJob, table: pa.Table) -> pa.Table:
    """A sink's rows (``ws, we`` as epoch ms, ``q0..``) as weaveplace's answer columns, one
    row per query and window."""
    ws = table.column("ws").cast(pa.int64())
    we = table.column("we").cast(pa.int64())
    parts = [
        pa.table(
            {
                "query_id": pa.array([q.id] * table.num_rows, pa.string()),
                "window_start": ws,
                "window_end": we,
                "value": table.column(f"q{i}").cast(pa.float64()),
            },
            schema=ANSWER_SCHEMA,
        )
        for i, q in enumerate(job.queries)
    ]
    return pa.concat_tables(parts) if parts else ANSWER_SCHEMA.empty_table()


def _sorted(t: pa.Table) -> pa.Table:
    t = t.select(["query_id", "window_start", "window_end", "value"])
    t = t.cast(ANSWER_SCHEMA)
    return t.sort_by([("query_id", "ascending"), ("window_start", "ascending")])


def compare_answers(ours: pa.Table, theirs: pa.Table, float_ids: Iterable[str]) -> dict:
    """Every window of both tables side by side: the windows only one side has, and values
    that differ (exactly, or beyond ``REL_TOL`` relative for the queries in ``float_ids``).

    Returns ``windows`` (ours), ``equal`` (bool), ``only_ours`` / ``only_theirs`` (window
    counts), ``differ`` (values), ``bit_equal`` (values equal to the bit), ``max_rel_diff``
    (over the float queries) and ``examples`` (a few differences, for the report)."""
    a, b = _sorted(ours), _sorted(theirs)
    key = ["query_id", "window_start", "window_end"]
    ja = a.rename_columns([*key, "ours"])
    jb = b.rename_columns([*key, "theirs"])
    j = ja.join(jb, key, join_type="full outer")
    va = j.column("ours")
    vb = j.column("theirs")
    only_ours = int(pc.sum(pc.is_null(vb)).as_py() or 0) if j.num_rows else 0
    only_theirs = int(pc.sum(pc.is_null(va)).as_py() or 0) if j.num_rows else 0
    both = pc.and_(pc.is_valid(va), pc.is_valid(vb))
    jb2 = j.filter(both)
    x = jb2.column("ours").to_numpy()
    y = jb2.column("theirs").to_numpy()
    is_float = np.isin(
        np.asarray(jb2.column("query_id").to_numpy(zero_copy_only=False), dtype=object),
        list(set(float_ids)),
    )
    rel = np.abs(x - y) / np.maximum(np.abs(y), np.finfo(float).tiny)
    bad = np.where(is_float, rel > REL_TOL, x != y)
    examples = []
    for i in np.flatnonzero(bad)[:5]:
        examples.append(
            {
                "query_id": jb2.column("query_id")[int(i)].as_py(),
                "window_start": jb2.column("window_start")[int(i)].as_py(),
                "ours": float(x[i]),
                "theirs": float(y[i]),
            }
        )
    differ = int(bad.sum())
    return {
        "windows": a.num_rows,
        "windows_theirs": b.num_rows,
        "only_ours": only_ours,
        "only_theirs": only_theirs,
        "differ": differ,
        "bit_equal": int((x == y).sum()),
        "max_rel_diff": float(rel[is_float].max()) if is_float.any() else 0.0,
        "rel_tol": REL_TOL,
        "equal": only_ours == 0 and only_theirs == 0 and differ == 0,
        "examples": examples,
    }
