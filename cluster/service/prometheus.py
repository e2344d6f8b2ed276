"""``GET /metrics`` of ``weaveplace serve``: the status as Prometheus metrics.

Why a custom collector over one status snapshot rather than metric objects updated as things
happen: ``status()`` already gathers every figure an operator watches (the one place they are
computed, also for ``ctl status`` and the load page), so a scrape reads one consistent snapshot
and nothing in the service has to remember to update a metric.  ``prometheus_client`` writes
the text exposition format (escaping, ``_total`` suffixes, HELP/TYPE lines).

Names follow Prometheus conventions: a ``weaveplace_`` prefix, base units (seconds, bytes),
``_total`` for counters, one ``node`` label per plan node (``docs/grafana/weaveplace.json``
is a dashboard over them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

#: the exposition's HTTP Content-Type
CONTENT_TYPE = CONTENT_TYPE_LATEST


def metric_families(st: dict) -> Iterator[Metric]:
    """The metrics of one ``status()`` reply (``cluster.service.status.current``).  While
    the data path has held the command lock since the start there is no status yet: only
    the data path's own metrics."""
    yield from data_path_families(st)
    if "nodes" not in st:
        return

    yield _single(GaugeMetricFamily, "weaveplace_queries", "Running queries.", len(st["queries"]))
    yield _single(GaugeMetricFamily, "weaveplace_nodes", "Plan nodes.", len(st["nodes"]))
    yield _single(
        GaugeMetricFamily,
        "weaveplace_total_cost",
        "Planned TotalCost of the running plan (cost model units per ms).",
        st["total_cost"],
    )
    yield _single(
        GaugeMetricFamily,
        "weaveplace_max_cost",
        "Planned MaxCost of the running plan (cost of the busiest node).",
        st["max_cost"],
    )
    yield _single(
        GaugeMetricFamily,
        "weaveplace_running",
        "1 while the deployment is running, else 0.",
        1 if st["state"] == "running" else 0,
    )
    yield _single(CounterMetricFamily, "weaveplace_answers", "Answers written.", st["answers"])
    yield _single(
        CounterMetricFamily,
        "weaveplace_late_tuples",
        "Tuples older than the allowed lateness (kept in late.parquet).",
        st["late"],
    )
    yield _single(CounterMetricFamily, "weaveplace_rows", "Input rows fed.", st["rows"])
    yield _single(CounterMetricFamily, "weaveplace_files", "Input files fed.", st["files"])
    yield _single(
        GaugeMetricFamily,
        "weaveplace_backlog_files",
        "Files in the watched directory not fed yet.",
        st["backlog"]["files"],
    )
    yield _single(
        GaugeMetricFamily,
        "weaveplace_backlog_bytes",
        "Bytes of the files not fed yet.",
        st["backlog"]["bytes"],
    )
    counts = st.get("event_counts", {})
    yield _single(
        CounterMetricFamily,
        "weaveplace_recoveries",
        "Recoveries (events with command recovery).",
        counts.get("recovery", 0),
    )
    yield _single(
        CounterMetricFamily,
        "weaveplace_failures",
        "Failures detected (events with command failure).",
        counts.get("failure", 0),
    )
    ev = CounterMetricFamily(
        "weaveplace_events", "Events of events.jsonl by command.", labels=["command"]
    )
    for cmd, n in sorted(counts.items(), key=lambda kv: str(kv[0])):
        ev.add_metric([str(cmd)], n)
    yield ev
    if st.get("driver_rss_bytes") is not None:
        yield _single(
            GaugeMetricFamily,
            "weaveplace_driver_resident_memory_bytes",
            "Resident memory of the serve process.",
            st["driver_rss_bytes"],
        )
    yield from shedding_families(st.get("shedding"))
    lag = GaugeMetricFamily(
        "weaveplace_watermark_lag_seconds",
        "Newest event time fed minus the stream's watermark.",
        labels=["stream"],
    )
    for stream, wm in sorted(st["watermark"].items()):
        if wm is not None and st["event_time"] is not None:
            lag.add_metric([stream], (st["event_time"] - wm) / 1000.0)
    yield lag
    latency = GaugeMetricFamily(
        "weaveplace_file_answer_latency_seconds",
        "From a file's arrival to its answers written, over the latest files.",
        labels=["quantile"],
    )
    for q, key in (("0.5", "p50"), ("0.99", "p99"), ("1", "max")):
        v = st["answer_latency_s"].get(key)
        if v is not None:
            latency.add_metric([q], v)
    yield latency
    yield from node_families(st["nodes"])


def node_families(nodes: dict) -> Iterator[Metric]:
    """Per plan node (label ``node``): planned cost and capacity, queries and trees, and the
    measured load; a value the status does not know (None) is left out."""
    specs: list[tuple[type, str, str, Callable[[dict], object]]] = [
        (
            GaugeMetricFamily,
            "planned_cost",
            "Planned cost of the node's trees.",
            lambda d: d["planned_cost"],
        ),
        (
            GaugeMetricFamily,
            "capacity",
            "The node's capacity (cost units).",
            lambda d: d.get("capacity"),
        ),
        (GaugeMetricFamily, "queries", "Queries the node runs.", lambda d: d["queries"]),
        (GaugeMetricFamily, "trees", "Execution trees on the node.", lambda d: len(d["trees"])),
        (
            GaugeMetricFamily,
            "busy_share",
            "Share of wall time the node's actor was busy, over the interval since the last status.",
            lambda d: d["measured"].get("busy_share"),
        ),
        (
            GaugeMetricFamily,
            "queue_depth",
            "Calls waiting at the node's actor.",
            lambda d: d["measured"].get("queue_depth"),
        ),
        (
            CounterMetricFamily,
            "busy_seconds",
            "Seconds the node's actor was busy.",
            lambda d: d["measured"].get("busy_s"),
        ),
        (
            CounterMetricFamily,
            "tuples",
            "Tuples the node ingested.",
            lambda d: d["measured"].get("tuples"),
        ),
        (
            CounterMetricFamily,
            "late_tuples",
            "Late tuples at the node.",
            lambda d: d["measured"].get("late_tuples"),
        ),
        (
            CounterMetricFamily,
            "answers",
            "Answers the node's trees produced.",
            lambda d: d["measured"].get("answers"),
        ),
        (
            GaugeMetricFamily,
            "event_lag_seconds",
            "Newest event time fed minus the newest the node applied.",
            lambda d: (
                None if d["measured"].get("lag_ms") is None else d["measured"]["lag_ms"] / 1000
            ),
        ),
        (
            GaugeMetricFamily,
            "owed_batches",
            "Batches waiting in the replay log for the node while it is silent.",
            lambda d: d["measured"].get("owed_batches"),
        ),
        (
            GaugeMetricFamily,
            "up",
            "1 while the node answers its health check, 0 while it is silent or stuck.",
            lambda d: (
                None
                if not d.get("health", {}).get("state")
                else int(d["health"]["state"] in ("ok", "starting"))
            ),
        ),
        (
            GaugeMetricFamily,
            "silent_seconds",
            "Seconds the node has not answered (its health check, or its data call's progress).",
            lambda d: d.get("health", {}).get("silent_s"),
        ),
        (
            CounterMetricFamily,
            "recoveries",
            "Times the node's actor was restarted from its checkpoint.",
            lambda d: d.get("health", {}).get("recoveries"),
        ),
        (
            GaugeMetricFamily,
            "resident_memory_bytes",
            "Resident memory of the node's actor.",
            lambda d: d["measured"].get("rss_bytes"),
        ),
    ]
    for kind, name, doc, get in specs:
        fam = kind(f"weaveplace_node_{name}", doc, labels=["node"])
        for nid, d in sorted(nodes.items()):
            v = get(d)
            if v is not None:
                fam.add_metric([nid], float(v))
        yield fam


def shedding_families(sh: dict | None) -> Iterator[Metric]:
    """The drop boxes (``placement.shedding``; nothing without it): per stream the kept
    fraction in force and the rows kept and dropped."""
    if sh is None:
        return
    specs = [
        (
            GaugeMetricFamily,
            "shed_kept_fraction",
            "Kept fraction of the stream's tuples in force.",
            sh["keep"],
        ),
        (
            CounterMetricFamily,
            "shed_kept_rows",
            "Rows of the stream kept by its drop box.",
            sh["kept_rows"],
        ),
        (
            CounterMetricFamily,
            "shed_dropped_rows",
            "Rows of the stream dropped by its drop box.",
            sh["dropped_rows"],
        ),
    ]
    for kind, name, doc, values in specs:
        fam = kind(f"weaveplace_{name}", doc, labels=["stream"])
        for stream, v in sorted(values.items()):
            fam.add_metric([stream], float(v))
        yield fam


def data_path_families(st: dict) -> Iterator[Metric]:
    """What holds the data path now and for how long, and the age of the status."""
    dp = st.get("data_path") or {}
    yield _single(
        GaugeMetricFamily,
        "weaveplace_data_path_busy_seconds",
        "Seconds the current micro-batch or command has held the data path (0: free).",
        dp.get("busy_s") or 0.0,
    )
    yield _single(
        GaugeMetricFamily,
        "weaveplace_silent_nodes",
        "Nodes silent, stuck or behind now.",
        len(set(dp.get("silent", [])) | set(dp.get("stuck", [])) | set(dp.get("behind", []))),
    )
    yield _single(
        GaugeMetricFamily,
        "weaveplace_status_age_seconds",
        "Age of the figures of this scrape (the data path held the command lock since).",
        st.get("stale_s") or 0.0,
    )


def _single(kind, name: str, doc: str, value) -> Metric:
    fam = kind(name, doc, labels=[])
    fam.add_metric([], float(value))
    return fam


class StatusCollector:
    """A ``prometheus_client`` collector: each scrape takes one ``status()`` snapshot."""

    def __init__(self, status: Callable[[], dict]):
        self.status = status

    def collect(self) -> Iterator[Metric]:
        yield from metric_families(self.status())


def exposition(status: Callable[[], dict]) -> bytes:
    """The text exposition of one snapshot of ``status()``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(status))
    return generate_latest(registry)
