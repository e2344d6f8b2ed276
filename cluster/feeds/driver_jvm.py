"""How Spark's driver JVM starts: its classes mapped from an archive, its code compiled by C1 only.

Why: a local Spark session and its first Parquet read load thousands of classes and JIT-compile
their hot paths, and that, not the data, was most of the seconds before a run's first row and
most of the JVM's CPU on 2 cores (BENCHMARKS.md, "Start-up"; 3 M rows):

* **The class archive.** The JDK's dynamic class-data-sharing archives (JEP 350, Java 13+):
  ``-XX:ArchiveClassesAtExit`` writes the classes one run loaded, ``-XX:SharedArchiveFile``
  maps them in later runs.  Session 7.4-9.0 -> 4.7-5.2 s, resolving the file 1.2-1.7 -> 0.4 s, the
  first chunk's job 4.0-4.7 -> 2.6-2.7 s.  The JVM checks an archive against its own build and class path
  and ignores one that does not match (``-Xshare:auto``, silently with the ``-Xlog`` options
  below), so a stale archive only costs the time it would have saved; its name also carries
  what it was built for.  ``weaveplace warmup`` (``make venv``) builds it (``build``).
  ``WEAVEPLACE_SPARK_ARCHIVE=off`` turns it off, a directory puts it there.
* **C1 only** (``-XX:TieredStopAtLevel=1``).  C2's compiles cost more CPU than its faster code
  saves here: the JVM's CPU for 3 M rows 15.7-16.4 -> 9.1-9.2 s, for 20 M rows 44-47 ->
  22-30 s, the 20 M rows' pull 15.9-18.8 -> 13.0-18.0 s.  Only the driver's JVM: a standalone
  cluster's executors keep their own settings.

``driver_conf`` is what ``cluster.feeds.parquet.spark_session`` gives the driver.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DIR = REPO / ".cache" / "spark"
ENV = "WEAVEPLACE_SPARK_ARCHIVE"
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


class ArchiveError(RuntimeError):
    """The archive could not be built (no Java, Spark failed, the JVM wrote nothing)."""


def _java() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _turned_off() -> bool:
    return os.environ.get(ENV, "").lower() in ("off", "0", "false", "no")


def archive_file() -> Path | None:
    """Where the archive for this Java and this pyspark lives, or None (turned off, no Java).

    The name hashes the Java binary (path and modification time) and pyspark's version and
    location: a new JDK or pyspark gets an archive of its own instead of a stale one."""
    if _turned_off():
        return None
    setting = os.environ.get(ENV, "")
    java = _java()
    if java is None:
        return None
    import pyspark

    key = f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{pyspark.__file__}"
    name = f"driver-{hashlib.sha1(key.encode()).hexdigest()[:16]}.jsa"
    return Path(setting) / name if setting else DEFAULT_DIR / name


def archive_options() -> str:
    """The driver JVM's options that map the archive, or "" (none built, or turned off)."""
    path = archive_file()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


JIT = "-XX:TieredStopAtLevel=1"


def driver_options() -> str:
    """Every option this module gives the driver JVM."""
    return " ".join(o for o in (archive_options(), JIT) if o)


def driver_conf(conf: dict[str, str] | None) -> dict[str, str]:
    """``conf`` with ``driver_options`` as the driver JVM's default options
    (``spark.driver.defaultJavaOptions``, before any given there): Spark puts
    ``spark.driver.extraJavaOptions``, a caller's or spark-defaults.conf's, after them, and the
    JVM takes the last."""
    conf = dict(conf or {})
    key = "spark.driver.defaultJavaOptions"
    ours = driver_options()
    conf[key] = f"{ours} {conf[key]}" if conf.get(key) else ours
    return conf


# The run whose classes are archived: a local session, a small Parquet file read the way a run
# reads it (footer schema, time-range chunk, Arrow to the driver), and a mapInArrow pass (the
# sliced feed's route).  It runs in a child process so that its JVM exits, which writes the file.
_BUILD = r"""
import sys, tempfile
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from pyspark import SparkContext
from cluster.feeds.parquet import open_raw, read_debs_df, spark_session

out = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    n = 20_000
    ts = np.arange(n, dtype=np.int64) * 10
    cols = {"ts_ms": ts, "index": np.arange(n, dtype=np.int64)}
    cols.update({f"mf0{i}": np.sin(ts / (100.0 * i)) for i in (1, 2, 3)})
    path = f"{d}/warm.parquet"
    pq.write_table(pa.table(cols), path)
    opts = f"-XX:ArchiveClassesAtExit={out} -Xlog:cds=off -Xlog:cds+dynamic=off"
    spark = spark_session("local[2]", "weaveplace-warmup", {"spark.driver.extraJavaOptions": opts})
    rows = sum(b.num_rows for b in open_raw(spark, path, ["mf01", "mf02", "mf03"]).batches)
    df = read_debs_df(spark, path, ["mf01"])
    rows += df.mapInArrow(lambda it: it, df.schema).toArrow().num_rows
    assert rows == 2 * n, rows
    proc = SparkContext._gateway.proc
    spark.stop()
    SparkContext._gateway.shutdown()
    proc.stdin.close()  # the gateway JVM exits on EOF, writing the archive
    proc.wait(timeout=300)
"""


def build(timeout_s: float = 600.0) -> Path:
    """Build (or rebuild) this machine's archive; return its path.  Written to a temporary name
    and renamed, so a run starting meanwhile never maps half a file."""
    path = archive_file()
    if path is None:
        why = f"turned off ({ENV})" if _turned_off() else "no java found"
        raise ArchiveError(f"Spark class archive: {why}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    os.close(fd)
    os.unlink(tmp)  # the JVM creates it
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path]))
    env[ENV] = "off"  # the child maps no older archive: it writes a new one
    try:
        r = subprocess.run(
            [sys.executable, "-c", _BUILD, tmp],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=REPO,
            env=env,
        )
        if r.returncode != 0 or not os.path.isfile(tmp):
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            raise ArchiveError(f"Spark class archive not built (exit {r.returncode}): {last}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
