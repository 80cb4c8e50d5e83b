"""The proxy's periodic summary line, worded as Tor's standalone proxy words it.

Volunteers' dashboards and log exporters parse Tor's hourly line by field
position ("In the last 1h0m0s, there were 14 completed successful
connections. Traffic Relayed ↓ 151250 KB (42.01 KB/s), ↑ 12465 KB
(3.46 KB/s)."), so ours keeps its words, its order and Go's way of writing
a duration. ↓ is what went toward clients, ↑ what came from them.
"""

from __future__ import annotations

KB = 1024


def go_duration_text(seconds: float) -> str:
    """``seconds`` as Go's ``time.Duration.String`` writes it: 1h0m0s, 1m30s, 45s, 1.5s."""
    if seconds < 60:
        return f"{seconds:g}s"
    whole = int(round(seconds))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m}m{s}s" if h else f"{m}m{s}s"


def summary_line(seconds: float, completed: int, down_bytes: int, up_bytes: int) -> str:
    """The line for a window of ``seconds``: sessions that ended, bytes each way."""
    span = max(seconds, 1e-9)
    return (f"In the last {go_duration_text(seconds)}, there were {completed} completed "
            f"successful connections. Traffic Relayed ↓ {down_bytes // KB} KB "
            f"({down_bytes / KB / span:.2f} KB/s), ↑ {up_bytes // KB} KB "
            f"({up_bytes / KB / span:.2f} KB/s).")
