"""Cluster layer: Ray node actors hosting execution trees, fed by Spark (docs/DESIGN.md s. 5-6)."""

from cluster.deployment.deployment import Deployment
from cluster.feeds.parquet import feed_raw, spark_session
from cluster.feeds.sliced import feed_sliced
from cluster.runs.file_run import run_file
from cluster.runtime.ray_runtime import RayRuntime

__all__ = ["Deployment", "RayRuntime", "feed_raw", "feed_sliced", "run_file", "spark_session"]
