"""The censor's event lines, encoded by orjson: the standard encoder's text, at less cost.

Why: the censor writes a line per detection, and with the standard library's
encoder that line was a third of its Python per flow on the tap (6 µs of
about 17 offline; docs/lab/censor.md §5). ptcommon writes the lab's lines with
the standard library alone (it is what the volunteer proxy installs); the
censor, a lab process, installs this encoder in its place
(``ptcommon.events.use_encoder``).

The contract is the standard encoder's exact text (``json.JSONEncoder(
default=str, separators=(",", ":"))``: ASCII only, NaN written as NaN): a
line must not depend on which encoder wrote it. orjson's text differs from it
in these places, measured with orjson 3.13 (tests/censor_sim/test_eventjson.py
checks every one):

* text beyond ASCII (orjson writes UTF-8), lone surrogates, integers past 64
  bits, keys that are not strings: orjson refuses or writes other bytes, and
  the record is handed back (None) for the standard encoder to write;
* DEL (0x7f): ASCII, so ``isascii()`` let it through, but the standard
  encoder escapes every character outside space..tilde (``\\u007f``) and
  orjson writes the byte raw. Only a string can hold it, so the escape is
  put in place in orjson's line;
* floats of magnitude below 1e-4 (the standard library 1e-05 and 2.5e-07,
  orjson 0.00001 and 2.5e-7) and NaN and the infinities (orjson null): handed
  back. Elsewhere both write the shortest digits that read back, in the same
  notation (1e+16 needs orjson 3.11.7 or later; pyproject.toml asks for it);
* subclasses of float (numpy.float64) and tuple (namedtuples): the standard
  encoder writes the number and the list, orjson hands them to ``default``,
  which gives them back as a float and a list.

Types neither knows become their str() in both, dataclasses and datetimes
included. One difference is left: a plain Enum member (not an int or str one),
which orjson writes as its value and the standard encoder as its str(); the
censor's events hold none.

What it costs: orjson's line, ``isascii()``, a memchr for DEL, and up to three
substring searches (``null``, ``0.0000``, ``e-``) that only such a float, a
None or text that happens to hold them sets off; then a walk over the
record's values, as only a walk tells a None from a NaN. The searches double
orjson's cost and the walk, on a line that holds a None (the FET detector's
``protocol``), triples it again: benchmarks/event_lines.py gave 1.7-2.8 µs a
line without a None and 3.5-3.8 µs with one, against 6.3-7.9 µs for the
standard encoder and 0.7-0.9 µs for orjson's bytes unchecked (2026-11-28, two
shared vCPUs; in instructions, 16-23 thousand and 33-35 thousand against
63-82 and 9-11).
"""

from __future__ import annotations

import math
from typing import Any

from ptcommon import events

try:
    import orjson
except ImportError:  # pragma: no cover - the [lab] extra installs it
    orjson = None  # type: ignore[assignment]  # None stands for "not installed" below

_OPTIONS = (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
            if orjson is not None else 0)
_DEL, _MINUS = 0x7F, 0x2D


def _spelled_otherwise(x: float) -> bool:
    """Whether orjson writes float ``x`` unlike the standard encoder: NaN and the
    infinities (null against NaN, Infinity), and magnitudes below 1e-4, where
    the standard library turns to an exponent (1e-05) and orjson writes
    0.00001 or 1e-7."""
    return not (x == 0.0 or 1e-4 <= abs(x) < math.inf)  # NaN fails every comparison


def _holds_such_a_float(values: Any) -> bool:
    """Whether a float orjson writes otherwise is among ``values`` (a dict's values
    or a sequence), however deep: only a walk can tell NaN's null from None's."""
    for v in values:
        t = type(v)
        if t is str or t is int:
            continue
        if t is float:
            if not (v == 0.0 or 1e-4 <= abs(v) < math.inf):  # _spelled_otherwise, inlined
                return True
        elif t is dict:
            if _holds_such_a_float(v.values()):
                return True
        elif t is list or t is tuple:
            if _holds_such_a_float(v):
                return True
        elif isinstance(v, dict):
            if _holds_such_a_float(v.values()):
                return True
        elif isinstance(v, list | tuple) and _holds_such_a_float(v):
            return True
    return False


def _default(obj: Any) -> Any:
    """What orjson writes for a type it does not know: the standard encoder's
    reading of it. It writes a float subclass as the float and a tuple subclass
    as a list; anything else is its str()."""
    if isinstance(obj, float):
        if _spelled_otherwise(obj):
            raise TypeError("a float orjson writes otherwise")
        return float(obj)
    if isinstance(obj, tuple):
        return list(obj)
    return str(obj)


def encode(record: dict[str, Any], no_floats: bool = False) -> str | None:
    """The record's line, or None for one the standard encoder must write.

    ``no_floats``: the caller knows the record holds no float at any depth (pcap
    mode's verdict of a flow that passed with nothing to report, most of a
    capture's lines), which spares the walk that its nulls would set off."""
    try:
        out = orjson.dumps(record, default=_default, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is one
        return None
    if not out.isascii():
        return None
    if _DEL in out:  # memchr: DEL can only be inside a string
        out = out.replace(b"\x7f", b"\\u007f")
    # A float written otherwise leaves one of these in orjson's text (null for
    # NaN, 0.0000 or e- for the small ones); so do None and some strings, and
    # the walk tells them apart. (The memchr for "-" spares the search for "e-"
    # in lines without one: a search costs as much as a third of orjson's line.)
    if not no_floats and (b"null" in out or b"0.0000" in out
                          or (_MINUS in out and b"e-" in out)) \
            and _holds_such_a_float(record.values()):
        return None
    return out.decode("ascii")


def install() -> bool:
    """Use orjson for this process's event lines, if it is installed; whether it is."""
    if orjson is None:
        return False
    events.use_encoder(encode)
    return True
