"""``cluster.answers.files``: files written whole or not at all, and the JSON they hold."""

from __future__ import annotations

import json
import math

import numpy as np
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.answers.files import atomic_write, jsonable, to_json

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),  # NaN is never equal to itself; Infinity is kept
    st.text(),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner), st.dictionaries(st.text(), inner)),
    max_leaves=30,
)


@settings(max_examples=examples(200), deadline=None)
@given(_VALUES, st.sampled_from([None, 1, 2]))
def test_to_json_parses_to_what_json_dumps_gives(value, indent):
    want = json.loads(json.dumps(value, indent=indent, default=jsonable))
    got = json.loads(to_json(value, indent=indent))
    assert got == want
    assert repr(got) == repr(want)  # the same floats to the bit, -0.0 and Infinity included


def test_to_json_hands_numpy_scalars_and_others_to_the_default():
    value = {"n": np.int64(7), "f": np.float32(0.5), "p": math.inf, "o": object}
    assert json.loads(to_json(value)) == json.loads(json.dumps(value, default=jsonable))


def test_to_json_indents_as_json_does():
    value = {"a": [1, {"b": 2.5, "c": "é"}], "e": {}, "l": []}
    assert to_json(value, indent=1).decode() == json.dumps(value, indent=1, ensure_ascii=False)


def test_atomic_write_takes_text_and_bytes(tmp_path):
    p = tmp_path / "f.json"
    atomic_write(p, "é")
    assert p.read_text() == "é"
    atomic_write(p, b"\x00\x01", mode=0o600)
    assert p.read_bytes() == b"\x00\x01" and (p.stat().st_mode & 0o777) == 0o600
    assert [x.name for x in tmp_path.iterdir()] == ["f.json"]  # no temporary left
