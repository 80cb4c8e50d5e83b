"""The lab's event lines: one JSON object per line, whatever the fields hold."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ptcommon import events
from ptcommon.events import EVENT_KEYS, READY_PATTERN, EventLog, count_events, event_line


def test_a_line_carries_the_keys_and_its_fields():
    line = event_line("censor", "detection", ts_field=1, flow={"client": "198.18.0.2"})
    record = json.loads(line)
    assert EVENT_KEYS <= record.keys()
    assert record["component"] == "censor" and record["event"] == "detection"
    assert record["flow"] == {"client": "198.18.0.2"} and "\n" not in line


def test_values_json_cannot_hold_become_strings():
    record = json.loads(event_line("lab", "x", path=Path("/tmp/a"), raw=b"\x00", s={1}))
    assert record["path"] == "/tmp/a"
    assert record["raw"] == "b'\\x00'"
    assert record["s"] == "{1}"


def test_emit_writes_one_line_and_flushes_only_when_asked():
    class Stream(io.StringIO):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1
            super().flush()

    out = Stream()
    log = EventLog("censor", out)
    log.emit("a", flush=False, n=1)
    log.emit("b", n=2)
    lines = out.getvalue().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["a", "b"]
    assert out.flushes == 1


# -- one format, whichever encoder writes it ---------------------------------------

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
    """The lab's install encodes with orjson, the volunteer's with the standard library;
    a line must not depend on which (ptcommon/events.py), nor lose what it holds."""
    record = events.event_record("censor", "detection", ts=1.5, **fields)
    fast = events._encode(record)
    standard = events._std_encode(record)
    assert fast == standard
    assert fast.isascii() and "\n" not in fast
    assert json.loads(fast) == json.loads(json.dumps(record))


def test_lines_are_compact_and_the_lab_finds_them_either_way():
    line = event_line("censor", "ready", ts=1.0)
    assert line == '{"ts":1.0,"component":"censor","event":"ready"}'
    legacy = json.dumps({"ts": 1.0, "component": "x", "event": "ready"})  # a hand-written line
    assert re.search(READY_PATTERN, line) and re.search(READY_PATTERN, legacy)
    text = "\n".join([line, legacy, event_line("censor", "ready_not"), "ready"])
    assert count_events(text, "ready") == 2
    assert count_events(text, "ready.") == 0  # the name is literal, not a pattern


def test_orjson_is_what_the_lab_encodes_with():
    assert events.orjson is not None, "the [lab] extra installs orjson (pyproject.toml)"
