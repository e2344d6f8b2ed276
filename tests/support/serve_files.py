"""The DEBS data that the ``weaveplace serve`` checks drop into the watched directory, file by
file: one generated stream cut into equal time spans, so the service sees it arrive in order."""

from __future__ import annotations

import pyarrow.compute as pc
import pyarrow.parquet as pq

from sim.debs_generator import generate_debs

#: Seconds of data per file, number of files, readings per second in each.
FILE_S, N_FILES, RATE_HZ = 4, 8, 50
#: A hard cap (seconds) on how long a serve check waits for the service.
SAFETY_S = 240.0


def serve_files(tmp_path_factory):
    """``N_FILES`` Arrow tables of ``FILE_S`` seconds each, in time order."""
    d = tmp_path_factory.mktemp("serve_data")
    generate_debs(d / "all.parquet", duration_s=FILE_S * N_FILES, rate_hz=RATE_HZ, seed=7)
    t = pq.read_table(d / "all.parquet")
    t0 = int(t.column("ts_ms")[0].as_py())
    rel = pc.subtract(t.column("ts_ms"), t0)
    parts = [
        t.filter(
            pc.and_(pc.greater_equal(rel, k * FILE_S * 1000), pc.less(rel, (k + 1) * FILE_S * 1000))
        )
        for k in range(N_FILES)
    ]
    return parts
