"""Events from processes that do not write ptlab's event lines: tor.

tor logs text (``Nov 25 09:40:01.000 [notice] Bootstrapped 45% (requesting_descriptors):
Asking for relay descriptors``). Its bootstrap progress and its warnings are
what a researcher reads first when a tor row fails, so the runner turns those
lines into events beside everyone else's in events.jsonl (docs/lab/results.md §5).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ptcommon.events import event_record

TOR_LINE = re.compile(r"^(\w{3} +\d+ \d\d:\d\d:\d\d\.\d{3}) \[(\w+)\] (.*)$")
BOOTSTRAP = re.compile(r"Bootstrapped (\d+)% \(([\w-]+)\): (.*)")


def tor_event(component: str, line: str, year: int | None = None) -> dict[str, Any] | None:
    """The event a tor log line carries (bootstrap progress, a warning or an
    error), or None. tor's timestamps are local time without a year."""
    m = TOR_LINE.match(line.strip())
    if m is None:
        return None
    stamp, level, message = m.groups()
    level = level.lower()
    boot = BOOTSTRAP.match(message)
    if boot is None and level not in ("warn", "err"):
        return None
    year = year or datetime.now().year
    try:
        ts = datetime.strptime(f"{year} {' '.join(stamp.split())}",
                               "%Y %b %d %H:%M:%S.%f").timestamp()
    except ValueError:
        return None
    if boot is not None:
        return event_record(component, "tor_bootstrap", ts=ts, percent=int(boot.group(1)),
                            tag=boot.group(2), summary=boot.group(3))
    return event_record(component, f"tor_{level}", ts=ts, message=message[:300])


def is_tor(argv: list[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] == "tor"
