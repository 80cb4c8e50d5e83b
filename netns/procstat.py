"""A process's line in /proc/PID/stat (proc(5)), split the one right way.

Why this exists: the command name, field 2, may hold spaces and parentheses, so
the fields are only safe to split after its last ")". Labs, their tests and the
benchmarks all ask the same few questions of that line (is the process a zombie,
when did it start, how much CPU has it used); they ask them here.

The fields are numbered here as :func:`fields` returns them: from the state on,
so index ``i`` is proc(5)'s field ``i + 3``.
"""

from __future__ import annotations

import os

STATE, PPID, PGRP = 0, 1, 2
UTIME, STIME, CUTIME, CSTIME = 11, 12, 13, 14  # clock ticks
STARTTIME = 19  # clock ticks after boot
#: Clock ticks per second, the unit of the times above.
TICK = os.sysconf("SC_CLK_TCK")


def split(line: str) -> list[str]:
    """The fields of a stat line from the state on."""
    return line[line.rindex(")") + 2:].split()


def fields(pid: int) -> list[str] | None:
    """The stat fields of ``pid`` from the state on, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The name is whatever bytes the process gave itself, not always UTF-8;
            # the fields after it are ASCII.
            line = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    try:
        return split(line)
    except ValueError:  # an empty read: it exited as we read
        return None


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` in clock ticks (with the PID, names one
    process even after the PID is reused), or None if it is gone."""
    f = fields(pid)
    return int(f[STARTTIME]) if f is not None else None


def running(f: list[str]) -> bool:
    """Whether the process these fields describe is neither a zombie nor dead (a
    reaper may be slow to collect an exited child, or absent in a container)."""
    return f[STATE] not in ("Z", "X")


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is :func:`running`."""
    f = fields(pid)
    return f is not None and running(f)


def own_ticks(f: list[str]) -> int:
    """User plus system clock ticks of the process itself."""
    return int(f[UTIME]) + int(f[STIME])


def reaped_ticks(f: list[str]) -> int:
    """User plus system clock ticks of the children it has reaped."""
    return int(f[CUTIME]) + int(f[CSTIME])


def cpu_seconds(pid: int, reaped: bool = False) -> float | None:
    """User plus system CPU seconds of ``pid``, with those of the children it has
    reaped if ``reaped``; None if it is gone."""
    f = fields(pid)
    if f is None:
        return None
    return (own_ticks(f) + (reaped_ticks(f) if reaped else 0)) / TICK
