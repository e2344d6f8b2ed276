"""Command line for DEBS data: ``python -m sim.debs {generate,bench}``.

Why apart from the generator and the readers: it is glue over both (``sim.debs_generator``,
``cluster.debs.reader``), kept as the documented way to write input files for live runs
(README, ``configs/live_stream.yaml``) and to time generation and reading.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from cluster.debs.reader import read_debs
from sim.debs_generator import generate_debs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sim.debs",
        description="DEBS 2012 Grand Challenge style sensor data: layout, synthetic generator, fast tolerant reader.",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write synthetic DEBS data (.parquet or text)")
    g.add_argument("path")
    g.add_argument("--duration", type=float, required=True, help="seconds of event time")
    g.add_argument("--rate", type=float, default=100.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument(
        "--start",
        default="2012-02-22T16:46:28Z",
        help="first event time (ISO; naive = UTC), e.g. to write consecutive files",
    )
    b = sub.add_parser("bench", help="time generation and reading")
    b.add_argument("--rows", type=int, default=1_000_000)
    b.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    a = ap.parse_args(argv)
    if a.cmd == "generate":
        fmt = "parquet" if Path(a.path).suffix.lower() in (".parquet", ".pq") else "tsv"
        n = generate_debs(
            a.path, duration_s=a.duration, rate_hz=a.rate, seed=a.seed, fmt=fmt, start=a.start
        )
        print(f"wrote {n} events to {a.path}")
        return 0
    import tempfile

    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        dur = a.rows / 100.0
        for fmt, name in (("parquet", "x.parquet"), ("tsv", "x.tsv")):
            p = Path(d) / name
            t0 = time.perf_counter()
            n = generate_debs(p, duration_s=dur, fmt=fmt)
            dt = time.perf_counter() - t0
            print(
                f"generate {fmt:8s}: {n} rows in {dt:.2f} s = {n / dt / 1e6:.2f} M rows/s, "
                f"{p.stat().st_size / 2**20:.0f} MiB"
            )
        for name in ("x.tsv", "x.parquet"):
            p = Path(d) / name
            t0 = time.perf_counter()
            r = read_debs(p, rejects_path=Path(d) / "rejects.tsv")
            rows = sum(bt.num_rows for bt in r)
            dt = time.perf_counter() - t0
            print(
                f"read {name:10s}: {rows} rows ({r.stats.rows_rejected} rejected) in {dt:.2f} s"
                f" = {rows / dt / 1e6:.2f} M rows/s, {p.stat().st_size / dt / 2**20:.0f} MiB/s"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
