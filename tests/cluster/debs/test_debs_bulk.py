"""Bulk fuzz of the DEBS reader: 10,000 malformed rows mixed into good data.

Every malformed row must be counted and written to the rejects file with its own line number;
every good row must come back unchanged, in order. No exception, whatever the damage.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from cluster.debs.text import read_debs_tsv
from sim.debs_generator import generate_debs

N_BAD = 10_000


def _corruptions(line: bytes, kind: int, rng: np.random.Generator) -> bytes:
    fields = line.split(b"\t")
    if kind == 0:  # truncated: a field missing
        return b"\t".join(fields[:-1])
    if kind == 1:  # an extra field
        return line + b"\t1"
    if kind == 2:  # garbage timestamp
        return b"XXXX" + line[4:]
    if kind == 3:  # non-numeric power reading
        fields[2] = b"abc"
        return b"\t".join(fields)
    if kind == 4:  # boolean out of range
        fields[-1] = b"7"
        return b"\t".join(fields)
    if kind == 5:  # random junk bytes (no line breaks)
        junk = rng.integers(32, 127, size=int(rng.integers(1, 80)), dtype=np.uint8).tobytes()
        return junk
    if kind == 6:  # non-ASCII / bad UTF-8
        return line[:10] + b"\xc3\x28" + line[10:]
    return b""  # kind 7: empty line


def test_ten_thousand_malformed_rows(tmp_path):
    rng = np.random.default_rng(42)
    tsv = tmp_path / "good.tsv"
    parquet = tmp_path / "good.parquet"
    generate_debs(tsv, duration_s=200, rate_hz=100, seed=3, fmt="tsv")
    generate_debs(parquet, duration_s=200, rate_hz=100, seed=3, fmt="parquet")
    good = tsv.read_bytes().split(b"\r\n")[:-1]
    expected = pq.read_table(parquet)
    assert expected.num_rows == len(good) > N_BAD

    # Insert N_BAD corrupted copies of random good lines at random positions.
    slots = np.sort(rng.integers(0, len(good) + 1, size=N_BAD))
    kinds = rng.integers(0, 8, size=N_BAD)
    lines, bad_line_numbers, g = [], [], 0
    for slot, kind in zip(slots.tolist(), kinds.tolist()):
        while g < slot:
            lines.append(good[g])
            g += 1
        lines.append(_corruptions(good[int(rng.integers(len(good)))], kind, rng))
        bad_line_numbers.append(len(lines))  # 1-based
    lines.extend(good[g:])
    mixed = tmp_path / "mixed.tsv"
    mixed.write_bytes(b"\r\n".join(lines) + b"\r\n")

    rejects = tmp_path / "rejects.tsv"
    reader = read_debs_tsv(mixed, rejects_path=rejects, batch_rows=7_000)
    table = reader.read_all()
    assert reader.stats.rows_rejected == N_BAD
    assert reader.stats.rows_read == len(good)
    assert table.equals(expected.select(table.column_names))
    rows = rejects.read_bytes().split(b"\n")[1:]  # header line first
    numbers = [int(r.split(b"\t", 1)[0]) for r in rows if r]
    assert numbers == bad_line_numbers
