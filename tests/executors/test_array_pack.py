"""``executors.array_pack``: named arrays packed into one buffer come back equal (values,
dtype, shape, order of names) and writable; ``numpy.savez`` bytes (snapshots written before)
read the same; object arrays are refused both ways (no pickle)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from executors.array_pack import MAGIC, pack, unpack

DTYPES = st.sampled_from(
    [
        "<i8",
        "<f8",
        "|u1",
        "|b1",
        "<i4",
        "<f4",
        "<U3",
        "<u8",
        [("c", "<i8"), ("sl", "<f8")],  # structured, as the kernels' state arrays are
        [("a", "<i8", (2,)), ("b", [("x", "<f4"), ("y", "|u1")])],
    ]
)


@st.composite
def named_arrays(draw):
    name = st.text(alphabet="abxyz019/_", min_size=1, max_size=8)  # as snapshots name them
    names = draw(st.lists(name, unique=True, max_size=6))
    out = {}
    for name in names:
        dt = np.dtype(draw(DTYPES))
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
        a = draw(hnp.arrays(dt, shape))
        if draw(st.booleans()) and a.ndim == 2:
            a = a.T  # not C-contiguous
        out[name] = a
    return out


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
        assert a[k].tobytes() == np.ascontiguousarray(b[k]).tobytes()  # NaNs bit for bit


@settings(max_examples=examples(80), deadline=None)
@given(arrays=named_arrays())
def test_packed_arrays_come_back_equal_and_writable(arrays):
    data = pack(arrays)
    assert data.startswith(MAGIC)
    back = unpack(data)
    _same(back, arrays)
    for a in back.values():
        assert a.flags.writeable and a.flags.c_contiguous
    if arrays:  # each its own copy: writing one changes nothing else
        k = next(iter(back))
        again = unpack(data)
        back[k].fill(0) if back[k].dtype.kind != "U" else None
        _same(again, arrays)


@settings(max_examples=examples(30), deadline=None)
@given(arrays=named_arrays())
def test_savez_bytes_read_the_same(arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    _same(unpack(buf.getvalue()), arrays)


def test_object_arrays_are_refused_and_unknown_bytes_too():
    with pytest.raises(ValueError, match="object arrays are not packed"):
        pack({"o": np.array([{"a": 1}], dtype=object)})
    forged = pack({"x": np.zeros(2, np.int64)}).replace(b'"<i8"', b'"|O8"')
    with pytest.raises(ValueError, match="object arrays are not unpacked"):
        unpack(forged)
    with pytest.raises(ValueError, match="not a packed snapshot"):
        unpack(b"something else")
