"""netns imports nothing of ours, so the delay line writes its event lines itself;
they must still be lines the runner keeps (ptcommon.events)."""

from __future__ import annotations

from netns import delayline
from ptcommon.events import parse_event_line


def test_delay_line_events_are_lab_events(capsys):
    delayline._emit("ready", queue=7, delay_ms=10.0)
    event = parse_event_line(capsys.readouterr().out)
    assert event is not None
    assert (event["component"], event["event"], event["queue"]) == ("delayline", "ready", 7)
