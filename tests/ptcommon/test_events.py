"""The lab's event lines: one JSON object per line, whatever the fields hold."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

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


# -- the line's format, and finding it ------------------------------------------------


def test_lines_are_compact_and_the_lab_finds_them_either_way():
    line = event_line("censor", "ready", ts=1.0)
    assert line == '{"ts":1.0,"component":"censor","event":"ready"}'
    legacy = json.dumps({"ts": 1.0, "component": "x", "event": "ready"})  # a hand-written line
    assert re.search(READY_PATTERN, line) and re.search(READY_PATTERN, legacy)
    text = "\n".join([line, legacy, event_line("censor", "ready_not"), "ready"])
    assert count_events(text, "ready") == 2
    assert count_events(text, "ready.") == 0  # the name is literal, not a pattern


def test_an_installed_encoder_writes_the_lines_it_takes_and_leaves_the_rest():
    taken = []

    def fast(record):
        if record["event"] == "mine":
            taken.append(record["event"])
            return "FAST"
        return None

    events.use_encoder(fast)
    try:
        assert event_line("c", "mine") == "FAST"
        assert json.loads(event_line("c", "other", n=1))["n"] == 1  # left to the standard one
    finally:
        events.use_encoder(None)
    assert taken == ["mine"] and event_line("c", "mine").startswith('{"ts":')


def test_stamp_is_round_to_the_microsecond_for_epoch_times():
    """stamp() replaces round(ts, 6) on every event line; for epoch times (2001 to
    2286, uniformly) it must give round's double, ties and all."""
    import random

    rng = random.Random(7)
    times = [1e9 + rng.random() * 9e9 for _ in range(100_000)]
    times += [1764312345.1234565, 1764312345.0000005, 1764312345.9999995, 1e9, 2e9 + 0.5e-6]
    assert [events.stamp(t) for t in times] == [round(t, 6) for t in times]


def test_a_record_is_stamped_now_or_at_the_time_given():
    import time

    before = time.time()
    rec = events.event_record("c", "e", x=1)
    assert before - 1e-6 <= rec["ts"] <= time.time() + 1e-6
    assert list(rec) == ["ts", "component", "event", "x"]
    assert events.event_record("c", "e", ts=1764312345.1234564)["ts"] == 1764312345.123456
