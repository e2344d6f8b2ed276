"""``sim.config.loading.safe_load``: libyaml's parser where PyYAML has it, the same documents as
``yaml.safe_load`` and, for a text it refuses, the pure-Python parser's own error."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sim.config import ConfigError
from sim.config.loading import load_config_text, safe_load

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
