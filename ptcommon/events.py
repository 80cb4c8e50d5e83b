"""Structured events as JSON lines (the process contract, ARCHITECTURE.md §3).

Every long-running lab component writes one JSON object per line to stdout:
``{"ts": ..., "component": ..., "event": ..., **fields}``. The runner captures
stdout into the component's log and merges the event lines into
``events.jsonl``, so components never need to know where results go.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


class EventLog:
    """Writes events for one component."""

    def __init__(self, component: str, stream: TextIO | None = None) -> None:
        self.component = component
        self.stream = stream if stream is not None else sys.stdout

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"ts": round(time.time(), 6), "component": self.component, "event": event}
        record.update(fields)
        self.stream.write(json.dumps(record, default=str) + "\n")
        self.stream.flush()
        return record


def parse_event_line(line: str) -> dict[str, Any] | None:
    """The event on a log line, or None for ordinary log text."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if isinstance(rec, dict) and {"ts", "component", "event"} <= rec.keys():
        return rec
    return None
