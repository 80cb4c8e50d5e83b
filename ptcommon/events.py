"""The lab's process contract: event lines, the readiness line, and exit codes.

Every long-running lab process writes one JSON object per line to stdout:
``{"ts": ..., "component": ..., "event": ..., **fields}`` (docs/architecture.md §3.1).
The runner captures stdout into the process's log and keeps every such line in
``events.jsonl``; a line without ``ts``, ``component`` and ``event`` is ordinary log
text and is not kept. That is why the format lives here, once: a process that
writes the line by hand and forgets a key loses its events silently (the meek
server's, the bridge's and the broker's ``stats`` were lost that way).

The runner knows a process is up when its ``ready`` event appears
(:data:`READY_PATTERN`). :func:`run_until_stopped` is the ``main`` every entry point
shares: SIGTERM and SIGINT stop it cleanly, bad configuration and a missing
privilege become one line on stderr and exit status 2, any other OS error
(a port already in use) exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

#: The keys that make a JSON line an event.
EVENT_KEYS = frozenset({"ts", "component", "event"})


def event_pattern(event: str) -> str:
    """A regular expression that finds ``event``'s lines in a log, however the line
    was spaced: ours are compact (``"event":"ready"``), a hand-written
    ``json.dumps`` line, or one logged before this format, has a space."""
    return r'"event": ?"' + re.escape(event) + '"'


def count_events(text: str, event: str) -> int:
    """How many ``event`` lines a log's text holds."""
    return len(re.findall(event_pattern(event), text))


#: A regular expression that matches a process's readiness line in its log.
READY_PATTERN = event_pattern("ready")

#: Exit statuses of :func:`run_until_stopped`.
EXIT_OK, EXIT_ERROR, EXIT_CONFIG = 0, 1, 2


def stamp(ts: float | None = None) -> float:
    """``ts`` (now, if None) to the microsecond, as event lines carry it.

    ``round(ts, 6)``, at a third of its cost (250 ns, not 840: ``round`` with
    digits goes through decimal text, and the censor stamps a line per
    detection). The whole seconds are split off first, so the fraction keeps
    every bit; for an epoch time the result is round's (tests/ptcommon)."""
    t = time.time() if ts is None else ts
    whole = math.floor(t)
    return whole + round((t - whole) * 1e6) / 1e6


def event_record(component: str, event: str, ts: float | None = None,
                 **fields: Any) -> dict[str, Any]:
    """One event as a dict, stamped now unless ``ts`` (epoch seconds) is given."""
    return _record(component, event, ts, fields)


def _record(component: str, event: str, ts: float | None,
            fields: dict[str, Any]) -> dict[str, Any]:
    return {"ts": stamp(ts), "component": component, "event": event, **fields}


# Event lines are compact JSON. Values JSON can't hold become their str().
_std_encode = json.JSONEncoder(default=str, separators=(",", ":")).encode
# A faster encoder a process may install (use_encoder): the censor writes a line
# per detection, and this one was a third of its work per flow.
_fast_encode: Callable[[dict[str, Any]], str | None] | None = None


def use_encoder(encode: Callable[[dict[str, Any]], str | None] | None) -> None:
    """Encode this process's event lines with ``encode`` (None: the standard one again).

    ``encode`` must write the standard encoder's text for the records it takes,
    and return None for any it leaves to it; ptcommon itself stays standard
    library only (censor_sim/eventjson.py installs orjson for the censor)."""
    global _fast_encode
    _fast_encode = encode


def _encode(record: dict[str, Any]) -> str:
    if _fast_encode is not None and (line := _fast_encode(record)) is not None:
        return line
    return _std_encode(record)


def event_line(component: str, event: str, **fields: Any) -> str:
    """One event as its JSON line (no newline). Values JSON can't hold become strings."""
    return _encode(event_record(component, event, **fields))


class EventLog:
    """Writes the events of one component, each flushed at once (the runner and
    ``wait_log`` read the log while the process runs)."""

    def __init__(self, component: str, stream: TextIO | None = None) -> None:
        self.component = component
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        # Looked up at each write, so a test's redirected sys.stdout is honoured.
        return self._stream if self._stream is not None else sys.stdout

    def emit(self, event: str, flush: bool = True, **fields: Any) -> dict[str, Any]:
        """Write one event line and return its record (as given, not re-parsed).

        ``flush=False`` leaves the line in the stream's buffer for the caller to
        flush after a batch (the censor writes one per detection, and flushes once
        per batch of queued packets)."""
        return self.emit_fields(event, fields, flush)

    def emit_fields(self, event: str, fields: dict[str, Any],
                    flush: bool = True) -> dict[str, Any]:
        """:meth:`emit` with the fields as a dict: a caller that holds them in one
        (the censor's effects) saves unpacking them into keywords again."""
        record = _record(self.component, event, None, fields)
        self.stream.write(_encode(record) + "\n")
        if flush:
            self.stream.flush()
        return record

    def ready(self, **fields: Any) -> dict[str, Any]:
        """The readiness event: the process listens and can be used."""
        return self.emit("ready", **fields)


def json_object(line: str) -> dict[str, Any] | None:
    """The JSON object a log line holds, or None (text, or JSON that is no object)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def parse_event_line(line: str) -> dict[str, Any] | None:
    """The event on a log line, or None for ordinary log text."""
    rec = json_object(line)
    return rec if rec is not None and EVENT_KEYS <= rec.keys() else None


class ConfigError(ValueError):
    """Bad configuration, reported in one line with exit status 2."""


def run_until_stopped(component: str,
                      amain: Callable[[asyncio.Event], Awaitable[int | None]],
                      *, config_errors: tuple[type[BaseException], ...] = (),
                      privilege_hint: str = "run as root") -> int:
    """Run ``amain(stop)`` until it returns; SIGTERM and SIGINT set ``stop``.

    Returns ``amain``'s status (0 if it returns None). :class:`ConfigError` and the
    ``config_errors`` given become ``"<component>: bad config: ..."`` and 2; a
    :class:`PermissionError` becomes ``"<component>: missing privilege: ..."`` and 2;
    any other :class:`OSError` one line and 1. Nothing else is caught: a bug still
    shows its traceback.
    """

    async def wrapped() -> int | None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await amain(stop)

    bad_config: tuple[type[BaseException], ...] = (ConfigError, *config_errors)
    try:
        status = asyncio.run(wrapped())
    except bad_config as exc:
        print(f"{component}: bad config: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except PermissionError as exc:
        print(f"{component}: missing privilege: {exc} ({privilege_hint})", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"{component}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK if status is None else status
