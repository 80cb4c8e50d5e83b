"""Checks that a run's events.jsonl holds every event its processes logged."""

from __future__ import annotations

import json
from pathlib import Path

from ptcommon.events import json_object, parse_event_line


def event_like(line: str) -> dict | None:
    """A log line that is meant as an event: a JSON object with an ``event`` key
    (whether or not it has the ``ts`` and ``component`` the runner requires)."""
    rec = json_object(line)
    return rec if rec is not None and "event" in rec else None


def _key(rec: dict) -> tuple:
    return rec.get("ts"), rec.get("component"), rec.get("event")


def lost_events(out_dir: Path, before: float | None = None) -> list[str]:
    """Every event line in a ``*.log`` under ``out_dir`` that events.jsonl lacks,
    as ``"<log>: <line>"``; a line the runner cannot parse as an event counts.
    With ``before`` (epoch seconds), only events stamped earlier are asked for: a
    service may still be writing when the runner last read its log."""
    kept_path = out_dir / "events.jsonl"
    kept = ({_key(json.loads(line)) for line in kept_path.read_text().splitlines()}
            if kept_path.exists() else set())
    lost = []
    for log in sorted(out_dir.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            rec = event_like(line)
            if rec is None:
                continue
            if before is not None and isinstance(rec.get("ts"), int | float) \
                    and rec["ts"] >= before:
                continue
            if parse_event_line(line) is None or _key(rec) not in kept:
                lost.append(f"{log.relative_to(out_dir)}: {line.strip()[:200]}")
    return lost


def kept_count(out_dir: Path) -> int:
    """How many events events.jsonl holds (to read only later ones with ``since``)."""
    path = out_dir / "events.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def components(out_dir: Path, since: int = 0) -> dict[str, set[str]]:
    """component -> the events events.jsonl holds from it (after the first ``since``)."""
    out: dict[str, set[str]] = {}
    for line in (out_dir / "events.jsonl").read_text().splitlines()[since:]:
        rec = json.loads(line)
        out.setdefault(rec["component"], set()).add(rec["event"])
    return out
