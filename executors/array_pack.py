"""Named numpy arrays in one bytes buffer and back, without pickle: what every snapshot is made
of (a tree's, a churn tree's generations, a node's).

Why not ``numpy.savez``: it writes a zip entry per array, each with its own headers and CRC,
from Python.  A node's checkpoint at 100,000 queries holds ~5,000 arrays (~130 trees, two
generations each, ~20 arrays a generation), and savez was most of the checkpoint's time.  A
pack is ``MAGIC``, the length of a JSON index (8 bytes, little-endian), the index (per array:
name, dtype as ``.npy`` headers spell it, shape, offset), then each array's bytes in C order,
8-byte aligned.  ``unpack`` reads savez's bytes too (snapshots written before packs) and
refuses object arrays either way.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping

import numpy as np

MAGIC = b"WPPACK1\n"
_ZIP = b"PK"  # a zip (numpy.savez): a local header, or an empty archive's end record


def pack(arrays: Mapping[str, np.ndarray]) -> bytes:
    """``arrays`` (any dtype but object) as one buffer, in their order."""
    index, chunks, offset = [], [], 0
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.hasobject:
            raise ValueError(f"array {name!r}: object arrays are not packed (no pickle)")
        index.append([name, np.lib.format.dtype_to_descr(a.dtype), list(a.shape), offset])
        raw = a.tobytes(order="C")
        pad = -len(raw) % 8
        chunks.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head = json.dumps(index, separators=(",", ":")).encode()
    return b"".join([MAGIC, len(head).to_bytes(8, "little"), head, *chunks])


def unpack(data: bytes) -> dict[str, np.ndarray]:
    """The arrays ``pack`` (or ``numpy.savez``) wrote, each its own writable copy."""
    if data[:2] == _ZIP:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    if data[: len(MAGIC)] != MAGIC:
        raise ValueError("not a packed snapshot (unknown header)")
    n = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    base = start + n
    out = {}
    for name, dt, shape, off in json.loads(data[start:base]):
        dtype = np.lib.format.descr_to_dtype(_descr(dt))
        if dtype.hasobject:
            raise ValueError(f"array {name!r}: object arrays are not unpacked (no pickle)")
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(data, dtype=dtype, count=count, offset=base + off)
        out[name] = a.reshape(tuple(shape)).copy()
    return out


def _descr(d):
    """A dtype descr as JSON gave it back (lists) in the tuples numpy takes: a string, or per
    field ``(name, descr)`` or ``(name, descr, shape)`` (structured dtypes)."""
    if isinstance(d, str):
        return d
    out = []
    for name, fmt, *shape in d:
        field = (name if isinstance(name, str) else tuple(name), _descr(fmt))
        out.append(field + ((tuple(shape[0]),) if shape else ()))
    return out
