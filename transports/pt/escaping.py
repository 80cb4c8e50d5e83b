"""Tor's backslash escaping of PT text, the one implementation of it.

Three pieces of the PT protocol carry ``k=v`` pairs whose keys and values may
hold the separators themselves, so the writer puts a backslash before each
separator character, and before every backslash (pt-spec v1):

* per-connection arguments in the SOCKS handshake (§3.5): ``k=v;k=v``, ``=``
  and ``;`` escaped (:data:`SOCKS_ARGS`);
* ``TOR_PT_SERVER_TRANSPORT_OPTIONS`` (§3.2.3): ``name:k=v;name:k=v``, ``:`` and
  ``;`` escaped (:data:`SERVER_OPTIONS`). Tor escapes each ``k=v`` as a whole,
  so the first unescaped ``=`` ends the key;
* the ``ARGS:`` of an ``SMETHOD`` line (§3.3.3): ``k=v,k=v``, ``=`` and ``,``
  escaped (:data:`SMETHOD_ARGS`). The spec names only those two; goptlib (and
  so obfs4proxy and Snowflake's server) escapes the backslash as well, which
  keeps a value that ends in a backslash from swallowing the next comma.

A reader splits at the separators no backslash escapes, keeping the escapes
(:func:`split_escaped`, :func:`partition_escaped`), and only then drops them
(:func:`unescape`): unescaping first would turn an escaped separator into a
real one. A backslash with nothing after it is an error, as in goptlib.
"""

from __future__ import annotations

SOCKS_ARGS = "=;"
SERVER_OPTIONS = ":;"
SMETHOD_ARGS = "=,"


class EscapeError(ValueError):
    """Escaped text ends in a backslash that escapes nothing."""


def escape(text: str, specials: str) -> str:
    """``text`` with a backslash before every backslash and every character of ``specials``."""
    return "".join("\\" + ch if ch == "\\" or ch in specials else ch for ch in text)


def _split(text: str, sep: str, maxsplit: int) -> list[str]:
    if len(sep) != 1 or sep == "\\":
        raise ValueError(f"a separator is one character other than a backslash, not {sep!r}")
    parts: list[str] = []
    start = i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 == len(text):
                raise EscapeError(f"dangling backslash in {text!r}")
            i += 2
            continue
        if ch == sep and (maxsplit < 0 or len(parts) < maxsplit):
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def split_escaped(text: str, sep: str) -> list[str]:
    """Split at every ``sep`` that no backslash escapes; the pieces keep their escapes.

    As :meth:`str.split` with a separator: ``n`` separators give ``n + 1``
    pieces, empty ones included.
    """
    return _split(text, sep, -1)


def partition_escaped(text: str, sep: str) -> tuple[str, str, str]:
    """As :meth:`str.partition`, at the first ``sep`` no backslash escapes.

    Both sides keep their escapes; the whole of ``text`` is checked for a
    dangling backslash, not only the part before the separator.
    """
    parts = _split(text, sep, 1)
    if len(parts) == 1:
        return text, "", ""
    return parts[0], sep, parts[1]


def unescape(text: str) -> str:
    """Drop the backslash of every ``\\x`` pair, keeping ``x`` (``\\\\`` gives ``\\``)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 == len(text):
                raise EscapeError(f"dangling backslash in {text!r}")
            out.append(text[i + 1])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)
