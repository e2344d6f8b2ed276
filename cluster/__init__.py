"""Cluster layer: Ray node actors hosting execution trees, fed by Spark (DESIGN.md s. 5-6)."""

from cluster.deploy import Deployment
from cluster.live import run_live
from cluster.ray_runtime import RayRuntime
from cluster.spark_feed import feed_raw, spark_session
from cluster.spark_slices import feed_sliced

__all__ = ["Deployment", "RayRuntime", "feed_raw", "feed_sliced", "run_live", "spark_session"]
