"""``sim.config.loading.safe_load``: a JSON text through ``json`` where YAML reads it alike, else
libyaml's parser where PyYAML has it; always the same documents as ``yaml.safe_load`` and, for
a text it refuses, the pure-Python parser's own error."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.config import ConfigError
from sim.config.loading import _NOT_JSON, json_as_yaml, load_config_text, safe_load

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False)
    | st.text(max_size=12)
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def test_libyaml_is_the_parser_here():
    assert getattr(yaml, "CSafeLoader", None) is not None  # else the test below proves nothing


@given(documents, st.sampled_from([None, False, True]))
def test_safe_load_reads_what_yaml_safe_load_reads(doc, flow):
    text = yaml.safe_dump(doc, default_flow_style=flow, allow_unicode=True)
    assert safe_load(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text", ["a: [1, 2\n", "- a\nb: 1\n", "a: !!python/object:os.system x\n", "{a: 1, a"]
)
def test_a_refused_text_gets_the_pure_python_parsers_error(text):
    with pytest.raises(yaml.YAMLError) as want:
        yaml.safe_load(text)
    with pytest.raises(yaml.YAMLError) as got:
        safe_load(text)
    assert str(got.value) == str(want.value)
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config_text(text)


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_documents = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_documents, st.sampled_from([None, 1]), st.booleans())
def test_a_json_text_reads_as_yaml_safe_load_reads_it(doc, indent, ascii_only):
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    if not text.lstrip().startswith(("{", "[")):
        text = json.dumps([doc], indent=indent, ensure_ascii=ascii_only)
    try:
        want = yaml.safe_load(text)
    except yaml.YAMLError:
        assert json_as_yaml(text) is _NOT_JSON
        return
    assert safe_load(text) == want
    got = json_as_yaml(text)
    assert got is _NOT_JSON or got == want


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1e5, "b": 1.0e5, "c": 1.0e+5, "d": 1E-3}',  # strings, strings, float, string
        '{"a": NaN, "b": Infinity}',
        '["\\ud83d\\ude00"]',  # one character to JSON, two to PyYAML
        '{"a":\t1}',
        '["x\u0085y", "p\u2028q"]',  # YAML folds these line breaks
        '{"' + "k" * 1100 + '": 1}',  # too long a simple key for PyYAML
        '{"a": [1, 2}',
    ],
)
def test_json_that_yaml_reads_otherwise_goes_to_yaml(text):
    assert json_as_yaml(text) is _NOT_JSON
    try:
        want = yaml.safe_load(text)
    except yaml.YAMLError as e:
        with pytest.raises(yaml.YAMLError, match=None) as got:
            safe_load(text)
        assert str(got.value) == str(e)
    else:
        assert safe_load(text) == want


def test_a_json_config_is_read_by_json():
    text = json.dumps(
        {
            "workload": {"queries": [{"id": "q1", "range": 10, "slide": 5}]},
            "streams": {"s0": {"rate": 1.5}},
        }
    )
    assert json_as_yaml(text) == yaml.safe_load(text)
    cfg = load_config_text(text)
    assert cfg.workload.queries[0].range == 10
