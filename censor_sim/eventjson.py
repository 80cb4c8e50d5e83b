"""The censor's event lines, encoded by orjson: the same text, a tenth of the cost.

Why: the censor writes a line per detection, and with the standard library's
encoder that line was a third of its Python per flow on the tap (6 µs of
about 17 offline; docs/lab/censor.md §5). ptcommon writes the lab's lines with
the standard library alone (it is what the volunteer proxy installs); the
censor, a lab process, installs this encoder in its place
(``ptcommon.events.use_encoder``).

The text is the standard encoder's, compact separators and all. Records orjson
cannot write the same way are left to it: text beyond ASCII (which the
standard encoder escapes), integers past 64 bits, keys that are not strings.
Types neither knows become their str(), dataclasses and datetimes included. The
one difference left is in how a float's exponent is spelled (orjson 1e-7, the
standard library 1e-07), the same number; and a NaN, which orjson writes as
null where the standard library writes NaN, which is not JSON.
"""

from __future__ import annotations

from typing import Any

from ptcommon import events

try:
    import orjson
except ImportError:  # pragma: no cover - the [lab] extra installs it
    orjson = None  # type: ignore[assignment]  # None stands for "not installed" below

_OPTIONS = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
            if orjson is not None else 0)


def encode(record: dict[str, Any]) -> str | None:
    """The record's line, or None for one the standard encoder must write."""
    try:
        out = orjson.dumps(record, default=str, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is one
        return None
    return out.decode("ascii") if out.isascii() else None


def install() -> bool:
    """Use orjson for this process's event lines, if it is installed; whether it is."""
    if orjson is None:
        return False
    events.use_encoder(encode)
    return True
