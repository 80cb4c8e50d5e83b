"""The censor's orjson event lines: the standard encoder's text, whatever the record."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from censor_sim import eventjson
from ptcommon import events

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=False, allow_infinity=False, width=64).filter(
        lambda f: "e" not in repr(f))  # exponents: 1e-07 (stdlib) against 1e-7 (orjson)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6) | st.integers(0, 9), inner, max_size=4),
    max_leaves=12)


@given(fields=st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _json_values,
                              max_size=6))
def test_orjson_and_the_standard_encoder_write_the_same_line(fields):
    """A line must not depend on which encoder wrote it, nor lose what it holds:
    records orjson would write differently (text beyond ASCII, integers past 64
    bits, keys that are not strings) are left to the standard encoder."""
    record = events.event_record("censor", "detection", ts=1.5, **fields)
    line = eventjson.encode(record)
    standard = events._std_encode(record)
    if line is None:
        return  # the standard encoder writes it
    assert line == standard
    assert json.loads(line) == json.loads(json.dumps(record))


def test_the_censor_installs_orjson_for_its_lines():
    assert eventjson.orjson is not None, "the [lab] extra installs orjson (pyproject.toml)"
    try:
        assert eventjson.install()
        line = events.event_line("censor", "detection", ts=2.0, flow={"client": "198.18.0.2"})
        assert events._fast_encode is eventjson.encode
        assert line == '{"ts":2.0,"component":"censor","event":"detection",' \
                       '"flow":{"client":"198.18.0.2"}}'
        assert events.event_line("censor", "x", ts=2.0, sni="\u00e9.example") == \
            '{"ts":2.0,"component":"censor","event":"x","sni":"\\u00e9.example"}'
    finally:
        events.use_encoder(None)
