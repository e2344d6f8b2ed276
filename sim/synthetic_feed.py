"""DEBS-style files dropped into a directory in real time, for ``weaveplace serve`` without
``data.directory`` (demos).

Why a module: generating data on a clock in a thread is one idea, apart from starting the
deployment that reads it (``sim.serve_start``).
"""

from __future__ import annotations

import time
from datetime import UTC
from pathlib import Path


class SyntheticFeed:
    """Without ``data.directory``: every ``chunk_s`` seconds of wall time, the next ``chunk_s``
    seconds of DEBS-style events (``sim.debs_generator.generate_debs`` at ``rate_hz``, event time
    continuing from 2012-02-22T16:46:28Z) are dropped into ``RUN_DIR/feed/`` (hidden name, then
    renamed), so the deployment sees data arriving in real time (demos).  A resumed deployment
    continues after the files already there.  Each chunk has its own random stream (seed + k),
    so values jump slightly at chunk borders."""

    chunk_s = 2.0

    def __init__(self, directory: Path, rate_hz: float, seed: int):
        import threading

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rate_hz, self.seed = float(rate_hz), int(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weaveplace-feed", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        from datetime import datetime, timedelta

        from sim.debs_generator import generate_debs

        t0 = datetime(2012, 2, 22, 16, 46, 28, tzinfo=UTC)
        k = len([p for p in self.directory.glob("f*.parquet")])
        nxt = time.monotonic() + self.chunk_s
        while not self._stop.wait(max(0.0, nxt - time.monotonic())):
            tmp = self.directory / f".f{k:07d}.parquet"
            generate_debs(
                tmp,
                duration_s=self.chunk_s,
                rate_hz=self.rate_hz,
                seed=self.seed + k,
                start=t0 + timedelta(seconds=k * self.chunk_s),
            )
            tmp.replace(self.directory / f"f{k:07d}.parquet")
            k += 1
            nxt += self.chunk_s
