"""The lab's event lines: one JSON object per line, whatever the fields hold."""

from __future__ import annotations

import io
import json
from pathlib import Path

from ptcommon.events import EVENT_KEYS, EventLog, event_line


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
