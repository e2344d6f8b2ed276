"""Tests for the DEBS data modules (cluster.debs.format, debs_text, debs_reader and
sim.debs_generator): layout, generator realism and determinism, tolerant TSV reader.

All data is generated into tmp_path; nothing is committed. Kept small: the whole file runs in a
few seconds on a shared 2-core machine.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cluster.debs import format as debs_format
from cluster.debs import reader as debs_reader
from cluster.debs import text as debs_text
from cluster.debs.format import (
    BOOL_COLUMNS,
    DEBS_SCHEMA,
    ENERGY_COLUMNS,
    INT_COLUMNS,
    N_FIELDS,
    TSV_COLUMNS,
    parse_ts,
)
from cluster.debs.reader import read_debs, read_debs_tsv_range, text_line_ranges
from cluster.debs.text import read_debs_tsv
from sim.debs_generator import generate_debs

TS_RE = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}\+00:00")


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def read_rejects(path: Path) -> list[tuple[int, str, bytes]]:
    """Rejects file -> [(line, reason, raw)]; raw may contain tabs: split on the first two."""
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b"line\treason\traw"
    assert lines[-1] == b""
    out = []
    for ln in lines[1:-1]:
        no, reason, raw = ln.split(b"\t", 2)
        out.append((int(no), reason.decode(), raw))
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[list[bytes], pa.Table]:
    """~150 clean lines (without CRLF) and the matching Parquet table (same seed, same events)."""
    d = tmp_path_factory.mktemp("debs_base")
    generate_debs(d / "base.tsv", duration_s=1.5, seed=11, fmt="tsv")
    generate_debs(d / "base.parquet", duration_s=1.5, seed=11)
    raw = (d / "base.tsv").read_bytes()
    assert raw.endswith(b"\r\n")
    return raw[:-2].split(b"\r\n"), pq.read_table(d / "base.parquet")


@pytest.fixture(scope="module")
def hour(tmp_path_factory) -> pa.Table:
    """One hour at 100 Hz (~360 K events) for the realism checks."""
    p = tmp_path_factory.mktemp("debs_hour") / "hour.parquet"
    generate_debs(p, duration_s=3600, seed=5)
    return pq.read_table(p)


def ref_ts_ok(s: str) -> bool:
    """Independent reference for the accepted timestamp grammar (regex + datetime)."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)", s, re.ASCII)
    if not m:
        return False
    try:
        datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    z = m.group(3)
    return z == "Z" or (int(z[1:3]) <= 23 and int(z[4:6]) <= 59)


def ref_int_ok(s: str) -> bool:
    return bool(re.fullmatch(r"-?[0-9]{1,19}", s, re.ASCII)) and -(2**63) <= int(s) < 2**63


# ------------------------------------------------------------------------------------------
# layout
# ------------------------------------------------------------------------------------------


def test_layout_matches_design():
    assert TSV_COLUMNS[:12] == (
        "ts",
        "index",
        "mf01",
        "mf02",
        "mf03",
        "pc13",
        "pc14",
        "pc15",
        "pc25",
        "pc26",
        "pc27",
        "res",
    )
    assert TSV_COLUMNS[12:18] == ("bm05", "bm06", "bm07", "bm08", "bm09", "bm10")
    # docs/DESIGN.md s. 6: the 38 booleans after bm10, in file order
    extra = (
        [f"pp{i:02d}" for i in range(1, 22)]
        + [f"pp{i}" for i in range(31, 37)]
        + [f"pc{i:02d}" for i in range(1, 7)]
        + [f"pc{i}" for i in range(19, 24)]
    )
    assert list(TSV_COLUMNS[18:]) == extra and len(extra) == 38
    assert TSV_COLUMNS[18] == "pp01" and TSV_COLUMNS[-1] == "pc23"
    assert N_FIELDS == len(TSV_COLUMNS) == len(set(TSV_COLUMNS)) == 56
    # "3 energy readings and 51 mostly boolean values per event" (index and ts not counted)
    others = [c for c in TSV_COLUMNS if c not in ("ts", "index", *ENERGY_COLUMNS)]
    assert len(ENERGY_COLUMNS) == 3 and len(others) == 51
    assert sum(c in BOOL_COLUMNS for c in others) == 44
    assert DEBS_SCHEMA.names == ["ts_ms", *TSV_COLUMNS[1:]]
    for f in DEBS_SCHEMA:
        assert f.type == (pa.bool_() if f.name in BOOL_COLUMNS else pa.int64())
        assert not f.nullable


# ------------------------------------------------------------------------------------------
# generator
# ------------------------------------------------------------------------------------------


def test_tsv_format_is_original(tmp_path):
    p = tmp_path / "x.tsv"
    n = generate_debs(p, duration_s=2.0, seed=1, fmt="tsv")
    raw = p.read_bytes()
    assert raw.endswith(b"\r\n") and raw.count(b"\n") == raw.count(b"\r\n") == n
    lines = raw[:-2].split(b"\r\n")
    assert len(lines) == n
    assert not lines[0].startswith(b"ts")  # no header
    for i, ln in enumerate(lines):
        f = ln.split(b"\t")
        assert len(f) == N_FIELDS
        assert TS_RE.fullmatch(f[0])
        assert int(f[1]) == i
        assert all(re.fullmatch(rb"[0-9]+", x) for x in f[2:12])
        assert all(x in (b"0", b"1") for x in f[12:])
    assert lines[0].startswith(b"2012-02-22T16:46:28.")


def test_roundtrip_tsv_equals_parquet(tmp_path):
    pq_path, tsv_path = tmp_path / "g.parquet", tmp_path / "g.tsv"
    n1 = generate_debs(pq_path, duration_s=30, seed=7, rate_hz=100)
    n2 = generate_debs(tsv_path, duration_s=30, seed=7, rate_hz=100, fmt="tsv")
    assert n1 == n2 > 2500
    want = pq.read_table(pq_path)
    # tiny blocks and batches exercise the carry-over between blocks and batch slicing
    for kw in ({}, {"block_bytes": 4096, "batch_rows": 777}):  # (64-byte blocks: below)
        r = read_debs_tsv(tsv_path, rejects_path=tmp_path / "rej.tsv", **kw)
        got = r.read_all()
        assert got.schema.equals(DEBS_SCHEMA)
        assert got.equals(want)
        assert r.stats.rows_read == n1 and r.stats.rows_rejected == 0 and r.stats.lines == n1
        assert read_rejects(tmp_path / "rej.tsv") == []
    # batches are exactly batch_rows long (except the last), also across block boundaries
    for kw in ({"batch_rows": 1000}, {"batch_rows": 1000, "block_bytes": 50_000}):
        sizes = [b.num_rows for b in read_debs_tsv(tsv_path, **kw)]
        assert sizes[:-1] == [1000] * (len(sizes) - 1) and 0 < sizes[-1] <= 1000
        assert sum(sizes) == n1


def test_generator_deterministic(tmp_path):
    for fmt in ("parquet", "tsv"):
        a, b, c = (tmp_path / f"{k}.{fmt}" for k in "abc")
        generate_debs(a, duration_s=20, seed=3, fmt=fmt)
        generate_debs(b, duration_s=20, seed=3, fmt=fmt)
        generate_debs(c, duration_s=20, seed=4, fmt=fmt)
        assert a.read_bytes() == b.read_bytes()
        assert a.read_bytes() != c.read_bytes()


def test_generator_chunking_is_invisible(tmp_path):
    """Chunk boundaries (memory bound) must not show: index and time continue seamlessly."""
    p = tmp_path / "x.parquet"
    generate_debs(p, duration_s=60, seed=2, chunk_rows=1000)
    t = pq.read_table(p)
    assert pq.ParquetFile(p).num_row_groups > 5
    idx = t["index"].to_numpy()
    assert (idx == np.arange(len(idx))).all()
    assert (np.diff(t["ts_ms"].to_numpy()) >= 0).all()


def test_generator_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate_debs(tmp_path / "x", duration_s=1, fmt="csv")
    with pytest.raises(ValueError):
        generate_debs(tmp_path / "x", duration_s=0)
    # start and rate are honoured
    p = tmp_path / "s.parquet"
    n = generate_debs(p, duration_s=10, rate_hz=20, start="2013-01-01T00:00:00+01:00")
    ts = pq.read_table(p)["ts_ms"].to_numpy()
    t0 = int(datetime(2012, 12, 31, 23, tzinfo=UTC).timestamp() * 1000)
    assert t0 <= ts[0] < t0 + 100 and ts[-1] < t0 + 10_000
    assert 170 < n < 230


def test_timestamps_jitter_around_rate(hour):
    ts = hour["ts_ms"].to_numpy()
    n = len(ts)
    assert abs(n - 360_000) < 0.02 * 360_000
    gaps = np.diff(ts)
    assert (gaps >= 0).all()
    assert np.median(gaps) == 10  # the real file: ~9.99 ms apart
    off = np.mean(gaps != 10)
    assert 0.02 < off < 0.6  # jitter, not a metronome (but nearly regular, as the real file)
    assert gaps.max() >= 100 and gaps.max() < 5000  # rare dropouts, bounded
    assert (hour["index"].to_numpy() == np.arange(n)).all()


def test_power_readings_realistic(hour):
    ts = hour["ts_ms"].to_numpy()
    sec = (ts - ts[0]) // 1000
    counts = np.bincount(sec)
    means = []
    for c in ENERGY_COLUMNS:
        v = hour[c].to_numpy()
        assert v.min() >= 0 and v.max() <= 30000
        means.append(np.bincount(sec, weights=v) / np.maximum(counts, 1))
    means = np.array(means)[:, counts > 50]
    m1 = means[0]
    # the real file's levels (mf01 12,466..18,224 in 170 s): the load moves across that band
    assert 11_000 < m1.min() < 13_500 and 17_000 < m1.max() < 19_500
    # slowly drifting, load changes ramped: the 1 s mean moves by a few units a second,
    # by hundreds during a ramp, never in one jump
    step = np.abs(np.diff(m1))
    assert np.median(step) < 10
    assert step.max() < 1500
    ramps = np.flatnonzero(np.diff((step > 150).astype(np.int8)) == 1)
    assert 20 <= len(ramps) <= 300  # a load change every ~45 s on average
    # per-event noise around the 1 s mean: a few units (the real readings step by 0-5)
    v = hour["mf01"].to_numpy()
    resid = v - np.repeat(np.bincount(sec, weights=v) / np.maximum(counts, 1), counts)
    assert 1.5 < np.median(np.abs(resid)) / 0.6745 < 5
    # the three phases move together; mf02 runs ~10 % above mf01 (13698/12466, 20331/18224)
    assert np.corrcoef(means[0], means[1])[0, 1] > 0.9
    assert 1.05 < np.median(means[1] / means[0]) < 1.16


def test_states_flip_rarely(hour):
    n = hour.num_rows
    flips = {c: int((np.diff(hour[c].to_numpy().astype(np.int8)) != 0).sum()) for c in BOOL_COLUMNS}
    assert all(f / n < 2e-3 for f in flips.values())  # per event: rare
    assert sum(f > 0 for f in flips.values()) >= 10  # but some do flip in an hour
    assert sum(f == 0 for f in flips.values()) >= 1  # and some are static
    for c in INT_COLUMNS[7:]:  # pc25..pc27, res: small integers, piecewise constant
        v = hour[c].to_numpy()
        assert v.min() >= 0 and v.max() < 16
        assert (np.diff(v) != 0).sum() < 200
    for c in INT_COLUMNS[4:7]:  # pc13..pc15: levels in the tens..hundreds, +-2 per event
        v = hour[c].to_numpy()
        assert 38 <= v.min() and v.max() <= 261
        assert np.abs(np.diff(v)).max() <= 4 + 220  # jitter, plus rare level changes
        assert np.median(np.abs(np.diff(v))) <= 2


# ------------------------------------------------------------------------------------------
# timestamps and integers
# ------------------------------------------------------------------------------------------


@given(st.integers(0, 4_000_000_000 * 10**7))  # 1970 .. 2096 in 100 ns ticks
def test_format_parse_ts_roundtrip(ticks):
    s = debs_format.format_ts(np.array([ticks])).to_pylist()[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{7}\+00:00", s)
    want = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ticks // 10)
    assert s[:26] == want.strftime("%Y-%m-%dT%H:%M:%S.%f")
    ms, ok = parse_ts([s])
    assert ok[0] and ms[0] == ticks // 10_000


@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(-23 * 60 - 59, 23 * 60 + 59),
    st.integers(0, 9),
    st.booleans(),
)
def test_parse_ts_offsets_and_precision(dt, off_min, ndig, use_z):
    """Any offset is converted to UTC; 0..9 fraction digits; ms truncated (floor)."""
    if use_z:
        off_min = 0
    frac = f"{dt.microsecond:06d}{'987'}"[:ndig]
    sign = "-" if off_min < 0 else "+"
    zone = "Z" if use_z else f"{sign}{abs(off_min) // 60:02d}:{abs(off_min) % 60:02d}"
    s = dt.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + (f".{frac}" if ndig else "") + zone
    ms, ok = parse_ts([s])
    assert ok[0], s
    utc = dt.replace(microsecond=0) - timedelta(minutes=off_min)
    epoch = datetime(1970, 1, 1)
    want = (utc - epoch) // timedelta(seconds=1) * 1000 + int((frac + "000")[:3])
    assert ms[0] == want


@pytest.mark.parametrize(
    "s,ok",
    [
        ("2012-02-22T16:46:28.9670320+00:00", True),
        ("2012-02-22T16:46:28.9670320+01:30", True),
        ("2012-02-22T16:46:28.9670320-05:00", True),
        ("2012-02-22T16:46:28Z", True),
        ("2012-02-22T16:46:28.967Z", True),
        ("2012-02-29T00:00:00+00:00", True),  # leap year
        ("2011-02-29T00:00:00+00:00", False),  # not a leap year
        ("1900-02-29T00:00:00+00:00", False),
        ("2000-02-29T00:00:00+00:00", True),
        ("2012-04-31T00:00:00+00:00", False),
        ("2012-13-01T00:00:00+00:00", False),
        ("2012-00-01T00:00:00+00:00", False),
        ("2012-02-22T24:00:00+00:00", False),
        ("2012-02-22T23:60:00+00:00", False),
        ("2012-02-22T23:59:60+00:00", False),  # leap second: rejected
        ("2012-02-22T16:46:28.9670320", False),  # no offset: ambiguous
        ("2012-02-22 16:46:28.9670320+00:00", False),
        ("2012-02-22T16:46:28.+00:00", False),
        ("2012-02-22T16:46:28.1234567890+00:00", False),  # 10 digits
        ("2012-02-22T16:46:28.9670320+0000", False),
        ("2012-02-22T16:46:28.9670320+24:00", False),
        ("2012-02-22T16:46:28.9670320z", False),
        ("2012-02-22", False),
        ("", False),
        ("2012-02-22T16:46:28.96703a0+00:00", False),
        ("2012-02-22T16:46:28.9670320+00:00 ", False),
    ],
)
def test_parse_ts_cases(s, ok):
    assert ref_ts_ok(s) == ok
    ms, k = parse_ts([s])
    assert bool(k[0]) == ok
    if ok and s.endswith("+00:00") and "." in s:
        dt = datetime.fromisoformat(s[:23] + "+00:00")
        assert ms[0] == int(dt.timestamp() * 1000)


def _parse_ints(tokens: list[bytes]):
    data = b"0" * 40 + b"\t".join(tokens) + b"\n"
    lens = np.array([len(t) for t in tokens], dtype=np.int64)
    start = 40 + np.concatenate([[0], np.cumsum(lens + 1)[:-1]]).astype(np.int64)
    return debs_format.parse_int_columns(np.frombuffer(data, np.uint8), start, start + lens)


def test_parse_int_is_strict():
    cases = {
        b"5": 5,
        b"05": 5,
        b"-0": 0,
        b"-17": -17,
        b"9223372036854775807": 2**63 - 1,
        b"-9223372036854775808": -(2**63),
        b"0000000000000000001": 1,
        b" 5": None,
        b"5 ": None,
        b"+5": None,
        b"0x10": None,
        b"1e3": None,
        b"5.0": None,
        b"": None,
        b"-": None,
        b"--5": None,
        b"9223372036854775808": None,
        b"-9223372036854775809": None,
        b"99999999999999999999": None,
        b"\xd9\xa1": None,
    }  # Arabic-Indic digit one
    v, ok = _parse_ints(list(cases))
    for (tok, want), got, k in zip(cases.items(), v.tolist(), ok.tolist()):
        assert k == (want is not None), tok
        if want is not None:
            assert got == want, tok


@given(
    st.lists(
        st.one_of(
            st.integers(-(2**63), 2**63 - 1).map(lambda i: str(i).encode()),
            st.text(st.characters(codec="ascii", exclude_characters="\t\r\n"), max_size=22).map(
                str.encode
            ),
        )
    )
)
def test_parse_int_matches_reference(tokens):
    v, ok = _parse_ints(tokens)
    for t, got, k in zip(tokens, v.tolist(), ok.tolist()):
        assert k == ref_int_ok(t.decode())
        if k:
            assert got == int(t)


def test_int_formatting_handles_negative_and_wide():
    v = np.array([0, 7, -7, 10, -10, 123456789, 2**63 - 1, -(2**63)], dtype=np.int64)
    mat, keep = debs_format._int_matrix(v)
    got = [bytes(r[k]) for r, k in zip(mat, keep)]
    assert got == [str(x).encode() for x in v.tolist()]


# ------------------------------------------------------------------------------------------
# reader: malformed input
# ------------------------------------------------------------------------------------------

_TEXT = st.characters(exclude_characters="\t\r\n", codec="utf-8")


def _reframe_ts(line: bytes, off_min: int, ndig: int, use_z: bool) -> bytes:
    """Same instant, same ms, written with another offset / precision: must read the same."""
    if use_z:
        off_min = 0
    ts, rest = line.split(b"\t", 1)
    s = ts.decode()
    frac7 = s[20:27]
    frac = (frac7 + "00")[:ndig]
    local = datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S") + timedelta(minutes=off_min)
    sign = "-" if off_min < 0 else "+"
    zone = "Z" if use_z else f"{sign}{abs(off_min) // 60:02d}:{abs(off_min) % 60:02d}"
    return (local.strftime("%Y-%m-%dT%H:%M:%S") + "." + frac + zone).encode() + b"\t" + rest


@st.composite
def corrupt(draw, line: bytes) -> tuple[bytes, bool]:
    """(new line content, still good?) for one clean line."""
    fields = line.split(b"\t")
    kind = draw(
        st.sampled_from(["truncate", "ts", "int", "bool", "tab", "utf8", "reframe", "semantic_ts"])
    )
    event(f"modify: {kind}")  # see: pytest --hypothesis-show-statistics
    if kind == "truncate":
        return line[: draw(st.integers(0, len(line) - 1))], False
    if kind == "tab":
        p = draw(st.integers(0, len(line)))
        return line[:p] + b"\t" + line[p:], False
    if kind == "utf8":
        bad = draw(
            st.binary(min_size=1, max_size=4).filter(lambda b: b"\n" not in b and b"\r" not in b)
        )
        bad = bytes([0x80 | bad[0]]) + bad[1:]  # at least one non-ASCII byte, maybe invalid UTF-8
        p = draw(st.integers(0, len(line)))
        return line[:p] + bad + line[p:], False
    if kind == "ts":
        s = draw(st.text(_TEXT, max_size=40).filter(lambda s: not ref_ts_ok(s)))
        fields[0] = s.encode()
    elif kind == "semantic_ts":
        s = fields[0].decode()
        fields[0] = draw(
            st.sampled_from(
                [
                    s[:5] + "13" + s[7:],
                    s[:8] + "32" + s[10:],
                    s[:11] + "24" + s[13:],
                    s[:17] + "60" + s[19:],
                    s[:-6],
                    s[:10] + " " + s[11:],
                    s[:19] + s[27:-6] + "+0000",
                    s.replace("+00:00", "+25:00"),
                    s[:20] + "x" + s[21:],
                ]
            )
        ).encode()
        assert not ref_ts_ok(fields[0].decode())
    elif kind == "int":
        j = draw(st.integers(1, len(INT_COLUMNS)))
        near = [
            " 5",
            "5 ",
            "+5",
            "0x10",
            "5.0",
            "1e3",
            "",
            "-",
            "--1",
            "9223372036854775808",
            "12345678901234567890",
            "\u0661",
            "NaN",
        ]
        fields[j] = draw(
            st.one_of(st.sampled_from(near), st.text(_TEXT, max_size=22)).filter(
                lambda s: not ref_int_ok(s)
            )
        ).encode()
    elif kind == "bool":
        j = draw(st.integers(1 + len(INT_COLUMNS), N_FIELDS - 1))
        near = ["00", "01", "10", "11", "1 ", " 0", "0.0", "", "2", "true", "-0", "1x"]
        fields[j] = draw(
            st.one_of(st.sampled_from(near), st.text(_TEXT, max_size=3)).filter(
                lambda s: s not in ("0", "1")
            )
        ).encode()
    else:  # reframe: other offset / precision, same instant -> still good
        return _reframe_ts(
            line, draw(st.integers(-14 * 60, 14 * 60)), draw(st.integers(3, 9)), draw(st.booleans())
        ), True
    return b"\t".join(fields), False


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_malformed_rows_are_rejected_with_line_numbers(base, tmp_path, data):
    lines, table = base
    # entries: (content, eol, good, base row index or None)
    entries = [(ln, b"\r\n", True, i) for i, ln in enumerate(lines)]
    for _ in range(data.draw(st.integers(0, 15), "n_injections")):
        pos = data.draw(st.integers(0, len(entries)), "pos")
        kind = data.draw(st.sampled_from(["insert", "modify", "modify", "lf"]), "kind")
        if kind == "insert":  # a new junk line: blank, whitespace or random bytes
            junk = data.draw(
                st.one_of(
                    st.just(b""),
                    st.sampled_from([b" ", b"\t", b"\t\t", b"ts"]),
                    # never a header a hand may write nor a BOM (both tolerated at the file's start)
                    st.binary(max_size=60).filter(
                        lambda b: (
                            b"\n" not in b
                            and b"\r" not in b
                            and not b.startswith((debs_format.HEADER_PREFIX, b"\xef\xbb\xbf"))
                        )
                    ),
                )
            )
            eol = data.draw(st.sampled_from([b"\r\n", b"\n"]))
            entries.insert(pos, (junk, eol, False, None))
            event("insert junk line")
            continue
        # modify a pristine line near pos (never a line already modified: a second change
        # could undo the first)
        cand = [
            k
            for k in range(len(entries))
            if entries[k][2] and entries[k][0] == lines[entries[k][3]]
        ]
        if not cand:
            continue
        k = min(cand, key=lambda c: abs(c - pos))
        content, eol, _, bi = entries[k]
        if kind == "lf":
            entries[k] = (content, b"\n", True, bi)
        else:
            new, good = data.draw(corrupt(content), "corrupt")
            entries[k] = (new, eol, good, bi)
    no_final_eol = data.draw(st.booleans(), "no_final_eol") and entries[-1][0] != b""
    text = b"".join(c + e for c, e, _, _ in entries)
    if no_final_eol:
        text = text[: -len(entries[-1][1])]
    p = tmp_path / "in.tsv"
    p.write_bytes(text)
    rej = tmp_path / "rej.tsv"
    block = data.draw(st.sampled_from([64, 1000, 1 << 20]), "block_bytes")
    r = read_debs_tsv(p, rejects_path=rej, block_bytes=block, batch_rows=97)
    batches = list(r)
    assert all(b.num_rows == 97 for b in batches[:-1])
    got = pa.Table.from_batches(batches, schema=DEBS_SCHEMA)

    want_bad = [(i + 1, c) for i, (c, _, good, _) in enumerate(entries) if not good]
    good_rows = [bi for _, _, good, bi in entries if good]
    rejects = read_rejects(rej)
    assert [(ln, raw) for ln, _, raw in rejects] == want_bad
    assert r.stats.rows_rejected == len(want_bad) == sum(r.stats.rejects_by_reason.values())
    assert r.stats.rows_read == len(good_rows)
    assert r.stats.lines == len(entries)
    assert got.equals(table.take(good_rows))


def test_reject_reasons_and_edge_cases(base, tmp_path):
    lines, table = base
    good = lines[:3]
    bad_bool = lines[3].rsplit(b"\t", 1)[0] + b"\t2"
    bad_int = lines[3].split(b"\t")
    bad_int[2] = b" 5"
    content = [
        b"ts\t" + b"\t".join(c.encode() for c in TSV_COLUMNS[1:]),  # 1 header: skipped
        good[0],  # 2
        b"",  # 3 empty
        good[1][:-1] + b"\r" + good[1][-1:],  # 4 stray CR
        good[2] + b"\t",  # 5 57 fields
        b"x" * 300,  # 6 too long (max_line_bytes=200)
        bad_bool,  # 7
        b"\t".join(bad_int),  # 8
        b"\xff" + good[0],  # 9 non-ASCII
        lines[4],  # 10 good
    ]
    p = tmp_path / "e.tsv"
    p.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(content))  # BOM, no final newline
    rej = tmp_path / "rej.tsv"
    r = read_debs_tsv(p, rejects_path=rej, max_line_bytes=200)
    got = r.read_all()
    assert got.equals(table.take([0, 4]))
    rows = read_rejects(rej)
    assert [(ln, reason.split(":")[0]) for ln, reason, _ in rows] == [
        (3, "empty line"),
        (4, "carriage return inside line"),
        (5, "field_count"),
        (6, "line longer than max_line_bytes (raw truncated)"),
        (7, "boolean"),
        (8, "integer"),
        (9, "non-ASCII byte in line"),
    ]
    assert rows[2][1].startswith("field_count: expected 56 fields, got 57 (")
    assert "data.extra_columns: ignore" in rows[2][1]  # the reason names the option
    assert rows[4][1] == "boolean: bad value in column pc23"
    assert rows[5][1] == "integer: bad value in column mf01"
    assert rows[3][2] == b"x" * 200
    assert r.stats.header_lines == 1 and r.stats.lines == 10
    assert r.stats.rejects_by_reason == {
        "empty": 1,
        "stray_cr": 1,
        "field_count": 1,
        "too_long": 1,
        "boolean": 1,
        "integer": 1,
        "non_ascii": 1,
    }

    # a line longer than a block and than max_line_bytes, with no newline at all
    p.write_bytes(b"y" * 5000)
    r = read_debs_tsv(p, rejects_path=rej, block_bytes=256, max_line_bytes=1000)
    assert r.read_all().num_rows == 0
    assert [(ln, raw) for ln, _, raw in read_rejects(rej)] == [(1, b"y" * 1000)]

    # empty file, and a file of blank lines (rejected and counted, not silently skipped)
    p.write_bytes(b"")
    r = read_debs_tsv(p)
    assert r.read_all().num_rows == 0 and r.stats.lines == 0
    p.write_bytes(b"\r\n\n\r\n")
    r = read_debs_tsv(p)
    assert r.read_all().num_rows == 0 and r.stats.rejects_by_reason == {"empty": 3}


def test_read_debs_dispatch(tmp_path):
    pq_path, tsv_path = tmp_path / "d.parquet", tmp_path / "d.txt"
    generate_debs(pq_path, duration_s=5, seed=9)
    generate_debs(tsv_path, duration_s=5, seed=9, fmt="tsv")
    a = read_debs(pq_path)
    ta = a.read_all()
    tb = read_debs(tsv_path).read_all()
    assert ta.equals(tb) and ta.schema.equals(DEBS_SCHEMA)
    assert a.stats.rows_read == ta.num_rows and a.stats.rows_rejected == 0
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"ts_ms": [1], "x": [2]}), other)
    with pytest.raises(ValueError, match="not a DEBS Parquet"):
        read_debs(other)


def test_read_debs_buffer_equals_reading_the_file(tmp_path):
    """The in-memory reader (a live stream's files come as bytes) gives the same rows, stats
    and rejects bytes as reading the file from disk, for both formats."""
    import io

    tsv, pqf = tmp_path / "d.tsv", tmp_path / "d.parquet"
    generate_debs(pqf, duration_s=3, seed=4)
    generate_debs(tsv, duration_s=3, seed=4, fmt="tsv")
    lines = tsv.read_bytes().split(b"\r\n")
    lines[7] = b"broken\tline"
    tsv.write_bytes(b"\r\n".join(lines))
    for path, n_rejects in ((tsv, 1), (pqf, 0)):
        rej = tmp_path / f"{path.name}.rej"
        disk = read_debs(path, rejects_path=rej)
        want = disk.read_all()
        buf = io.BytesIO()
        mem = debs_reader.read_debs_buffer(path.read_bytes(), path.name, rejects=buf)
        assert mem.read_all().equals(want) and want.num_rows > 100
        assert (mem.stats.rows_read, mem.stats.rows_rejected) == (
            disk.stats.rows_read,
            disk.stats.rows_rejected,
        )
        assert buf.getvalue() == rej.read_bytes() and len(read_rejects(rej)) == n_rejects
    with pytest.raises(ValueError):  # not Parquet at all: the caller decides what to do
        debs_reader.read_debs_buffer(b"PAR1 junk", "x.parquet").read_all()


def test_module_does_not_import_cluster_frameworks():
    for mod in (debs_format, debs_text, debs_reader):
        src = Path(mod.__file__).read_text()
        assert not re.search(r"^\s*(import|from)\s+(ray|pyspark)\b", src, re.M)


# ------------------------------------------------------------------------------------------
# the original file's format and damage (docs/DESIGN.md s. 6)
# ------------------------------------------------------------------------------------------

#: The first three lines of the original DEBS 2012 file as quoted in public excerpts
#: (index 2556001..2556003): real column order, zero-padded pc/res, CRLF, no header.
REAL_HEAD = (
    b"2012-02-22T16:46:28.9670320+00:00\t2556001\t13056\t14406\t8119\t0071\t0193\t0150\t0000\t"
    b"0000\t0000\t0000\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t1\t1\t0\t0"
    b"\t0\t0\t0\t0\t1\t0\t0\t1\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\r\n"
    b"2012-02-22T16:46:28.9770284+00:00\t2556002\t13054\t14405\t8119\t0069\t0192\t0151\t0000\t"
    b"0000\t0000\t0000\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t1\t1\t0\t0"
    b"\t0\t0\t0\t0\t1\t0\t0\t1\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\r\n"
    b"2012-02-22T16:46:28.9870216+00:00\t2556003\t13049\t14404\t8119\t0070\t0194\t0152\t0000\t"
    b"0000\t0000\t0000\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t1\t1\t0\t0"
    b"\t0\t0\t0\t0\t1\t0\t0\t1\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\t0\r\n"
)


def test_real_excerpt_reads_with_real_names(tmp_path):
    p = tmp_path / "head.txt"
    p.write_bytes(REAL_HEAD)
    r = read_debs_tsv(p)
    t = r.read_all()
    assert r.stats.rows_read == 3 and r.stats.rows_rejected == 0
    assert t["index"].to_pylist() == [2556001, 2556002, 2556003]
    assert t["mf01"].to_pylist() == [13056, 13054, 13049]
    assert t["pc13"].to_pylist() == [71, 69, 70]  # zero-padded "0071"
    assert t["pc15"].to_pylist() == [150, 151, 152]
    assert t["res"].to_pylist() == [0, 0, 0]
    # the booleans that are 1 in these lines, by their real names
    ones = sorted(c for c in BOOL_COLUMNS if t[c].to_pylist() == [True] * 3)
    assert ones == ["pp16", "pp17", "pp33", "pp36"]  # fields 34, 35, 42 and 45 of 56
    assert t["ts_ms"].to_pylist()[0] == 1329929188967  # 16:46:28.967, truncated


def _lines(raw: bytes) -> list[bytes]:
    return raw[:-2].split(b"\r\n")


def test_glued_records_are_split(base, tmp_path):
    lines, table = base
    glued = lines[1] + lines[2]  # missing CRLF: 111 fields
    glued_cr = lines[4] + b"\r" + lines[5]  # only the LF missing
    bad_half = lines[6] + b"x" + lines[7][1:]  # the second half's timestamp broken
    content = [lines[0], glued, lines[3], glued_cr, bad_half, lines[8]]
    assert len(glued.split(b"\t")) == 111
    p = tmp_path / "g.txt"
    p.write_bytes(b"\r\n".join(content) + b"\r\n")
    rej = tmp_path / "rej.tsv"
    r = read_debs_tsv(p, rejects_path=rej)
    got = r.read_all()
    assert got.equals(table.take([0, 1, 2, 3, 4, 5, 6, 8]))
    assert r.stats.glued_lines == 3 and r.stats.lines == 6
    assert r.stats.lines + r.stats.glued_lines == r.stats.rows_read + r.stats.rows_rejected
    rows = read_rejects(rej)
    assert [(ln, reason) for ln, reason, _ in rows] == [
        (5, "glued record 2 of 2: timestamp: bad value in column ts")
    ]
    assert rows[0][2] == b"x" + lines[7][1:]
    # not two records: a 111-field line whose 56th field is not a boolean run into a timestamp
    p.write_bytes(lines[0][:-2] + b"\tx" + lines[1] + b"\r\n")
    r = read_debs_tsv(p, rejects_path=rej)
    assert r.read_all().num_rows == 0 and r.stats.glued_lines == 0
    assert read_rejects(rej)[0][1] == "field_count: expected 56 fields, got 111"


def test_extra_column_ignore_or_reject(base, tmp_path):
    lines, table = base
    p = tmp_path / "x.txt"
    # every line with a machine id (the fast path) ...
    p.write_bytes(b"".join(ln + b"\tmachine-7\r\n" for ln in lines[:50]))
    r = read_debs_tsv(p, extra_columns="ignore")
    assert r.read_all().equals(table.slice(0, 50)) and r.stats.extra_column_lines == 50
    r = read_debs_tsv(p)
    assert r.read_all().num_rows == 0 and r.stats.rejects_by_reason == {"field_count": 50}
    # ... and mixed with normal, glued and damaged lines
    content = [
        lines[0] + b"\t42",
        lines[1],
        lines[2] + b"\t",
        lines[3] + b"\t1\t2",
        lines[4] + lines[5],
        lines[6] + b"\t9",
    ]
    p.write_bytes(b"\r\n".join(content) + b"\r\n")
    rej = tmp_path / "rej.tsv"
    r = read_debs_tsv(p, rejects_path=rej, extra_columns="ignore")
    assert r.read_all().equals(table.take([0, 1, 2, 4, 5, 6]))
    assert r.stats.extra_column_lines == 3 and r.stats.glued_lines == 1
    assert [(ln, reason) for ln, reason, _ in read_rejects(rej)] == [
        (4, "field_count: expected 56 fields, got 58")
    ]
    with pytest.raises(ValueError, match="extra_columns"):
        read_debs_tsv(p, extra_columns="keep")


@settings(max_examples=examples(25), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_byte_ranges_read_like_the_whole_file(base, tmp_path, data):
    """Oracle: reading ``text_line_ranges`` one by one and renumbering their rejects gives
    the rows, rejects and counts of one whole-file read (header, BOM, damage included)."""
    lines, _ = base
    content = list(lines[:40])
    for _ in range(data.draw(st.integers(0, 8))):
        k = data.draw(st.integers(0, len(content) - 1))
        content[k] = data.draw(
            st.sampled_from(
                [
                    b"",
                    b"junk",
                    content[k] + b"\t7",
                    content[k][:-1] + b"2",
                    content[k] + lines[41],
                    b"x" * 300,
                ]
            )
        )
    head = data.draw(
        st.sampled_from(
            [
                b"",
                b"\xef\xbb\xbf",
                b"ts\t" + b"\t".join(c.encode() for c in TSV_COLUMNS[1:]) + b"\r\n",
            ]
        )
    )
    text = head + b"\r\n".join(content) + data.draw(st.sampled_from([b"", b"\r\n", b"\n"]))
    p = tmp_path / "r.txt"
    p.write_bytes(text)
    extra = data.draw(st.sampled_from(["reject", "ignore"]))
    rej = tmp_path / "whole.tsv"
    whole = read_debs_tsv(p, rejects_path=rej, extra_columns=extra, max_line_bytes=250)
    want = whole.read_all()
    ranges = text_line_ranges(p, data.draw(st.integers(1, len(text) + 5)))
    assert ranges[0][0] == 0 and ranges[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    got, rejects, lines_before = [], [], 0
    stats_sum = Counter()
    for a, b in ranges:
        assert a == 0 or text[a - 1 : a] == b"\n"
        buf = io.BytesIO()
        rd = read_debs_tsv_range(p, a, b, rejects=buf, extra_columns=extra, max_line_bytes=250)
        got.append(rd.read_all())
        for ln in buf.getvalue().split(b"\n")[1:-1]:
            no, rest = ln.split(b"\t", 1)
            rejects.append(b"%d\t" % (int(no) + lines_before) + rest)
        lines_before += rd.stats.lines
        for k in (
            "lines",
            "rows_read",
            "rows_rejected",
            "header_lines",
            "glued_lines",
            "extra_column_lines",
        ):
            stats_sum[k] += getattr(rd.stats, k)
    assert pa.concat_tables(got).equals(want)
    assert b"line\treason\traw\n" + b"".join(x + b"\n" for x in rejects) == rej.read_bytes()
    for k, v in stats_sum.items():
        assert getattr(whole.stats, k) == v, k


#: Published figures of the real file (docs/DESIGN.md s. 6): over the 17,000-line public excerpt
#: (``DEBS2012-small.txt``, 170 s at ~100 Hz) mf01 spans 12,466..18,224, mf02 13,698..20,331.
PUBLISHED = {"lines": 17_000, "mf01": (12_466, 18_224), "mf02": (13_698, 20_331)}


def _power_stats(v: np.ndarray) -> dict:
    v = v.astype(np.float64)
    d = np.abs(np.diff(v))
    return {
        "min": v.min(),
        "max": v.max(),
        "mean": v.mean(),
        "std": v.std(),
        "lag1": float(np.corrcoef(v[1:], v[:-1])[0, 1]) if len(v) > 2 else float("nan"),
        "med_step": float(np.median(d)),
    }


def test_generator_matches_published_figures(tmp_path):
    """Side by side: the real file (published extremes of its 17,000-line excerpt; the three
    real lines ``REAL_HEAD`` for per-event steps and gaps) and 170 s of generated data for six
    seeds (min/max/mean/std/lag-1 autocorrelation/median step).  The real mean and std are not
    published: they are only bounded by the extremes."""
    p = tmp_path / "head.txt"
    p.write_bytes(REAL_HEAD)
    head = read_debs_tsv(p).read_all()
    real = {c: _power_stats(head[c].to_numpy()) for c in ENERGY_COLUMNS}
    real_gap = np.diff(head["ts_ms"].to_numpy())
    rows = [f"{'':10s}{'min':>8s}{'max':>8s}{'mean':>8s}{'std':>7s}{'lag1':>10s}{'step':>6s}"]
    for c in ("mf01", "mf02"):
        lo, hi = PUBLISHED[c]
        rows.append(
            f"real {c}  {lo:8d}{hi:8d}{'?':>8s}{'?':>7s}{'?':>10s}{real[c]['med_step']:6.0f}"
        )
    gen = {c: [] for c in ("mf01", "mf02")}
    gaps = []
    for seed in range(6):
        g = tmp_path / f"g{seed}.parquet"
        n = generate_debs(g, duration_s=PUBLISHED["lines"] / 100, seed=seed)
        assert abs(n - PUBLISHED["lines"]) < 0.02 * PUBLISHED["lines"]
        t = pq.read_table(g)
        gaps.append(np.median(np.diff(t["ts_ms"].to_numpy())))
        for c in gen:
            st_ = _power_stats(t[c].to_numpy())
            gen[c].append(st_)
            rows.append(
                f"seed {seed} {c}{st_['min']:8.0f}{st_['max']:8.0f}{st_['mean']:8.0f}"
                f"{st_['std']:7.0f}{st_['lag1']:10.6f}{st_['med_step']:6.0f}"
            )
    print("\n".join(rows))  # pytest -s shows the table
    for c, stats in gen.items():
        lo, hi = PUBLISHED[c]
        med = {k: float(np.median([s[k] for s in stats])) for k in stats[0]}
        # the extremes of a typical 170 s stretch are the real excerpt's, within 6 %
        assert abs(med["min"] / lo - 1) < 0.06 and abs(med["max"] / hi - 1) < 0.06, (c, med)
        for s in stats:  # every stretch stays in the real band (a little drift either way)
            assert s["min"] > 0.93 * lo and s["max"] < 1.07 * hi, (c, s)
            assert lo < s["mean"] < hi
            assert s["std"] < (hi - lo) / 2  # bounded by the spread, as any series'
        assert (hi - lo) / 8 < med["std"], (c, med)  # the load really moves across the band
        # smooth at 100 Hz: steps of a few units against a spread of thousands, as the
        # real lines (steps 0..5): lag-1 autocorrelation ~1
        assert med["lag1"] > 0.9999 and med["med_step"] <= 5
        assert real[c]["med_step"] <= 5
    assert list(real_gap) == [10, 10] and np.median(gaps) == 10


def test_read_debs_buffer_repairs_like_the_file_reader(base, tmp_path):
    """Directory mode parses file bytes with ``read_debs_buffer``: the same glued split and
    ``extra_columns`` rule as reading the file from disk (and the same rejects)."""
    lines, _ = base
    text = b"\r\n".join([lines[0] + lines[1], lines[2] + b"\tid", lines[3], b"bad"]) + b"\r\n"
    p = tmp_path / "f.txt"
    p.write_bytes(text)
    for extra in ("reject", "ignore"):
        rej_a, rej_b = io.BytesIO(), io.BytesIO()
        a = debs_reader.read_debs_buffer(text, "f.txt", rejects=rej_a, extra_columns=extra)
        b = read_debs_tsv_range(p, 0, len(text), rejects=rej_b, extra_columns=extra)
        assert a.read_all().equals(b.read_all())
        assert rej_a.getvalue() == rej_b.getvalue()
        assert a.stats.glued_lines == 1
        assert a.stats.rows_read == (4 if extra == "ignore" else 3)
