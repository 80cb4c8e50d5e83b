"""The lines a managed PT writes to its parent on stdout (pt-spec v1, section 3.3).

Every line is flushed at once: tor waits for ``CMETHODS DONE`` / ``SMETHODS
DONE`` before it uses the PT, so a line stuck in a buffer looks like a hung PT.
Lines are kept pure US-ASCII with no NUL or newline, because the spec's line
grammar allows nothing else and parents (ptadapter) decode stdout as ASCII.

Formatting is separate from writing (``format_*``), so the escaping rules are
testable as plain strings.
"""

from __future__ import annotations

import ipaddress
import sys
import threading
from collections.abc import Mapping
from typing import TextIO

from .escaping import SMETHOD_ARGS, escape, partition_escaped, split_escaped, unescape

SEVERITIES = ("error", "warning", "notice", "info", "debug")
_lock = threading.Lock()


def emit(line: str, out: TextIO | None = None) -> None:
    """Write one protocol line and flush it; a vanished parent is not our crash."""
    stream = out if out is not None else sys.stdout
    with _lock:
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass  # stdout closed (parent gone); the lifetime watcher ends us


def oneline(text: str) -> str:
    """Free text made safe for the end of a line: ASCII, no CR/LF/NUL."""
    text = " ".join(str(text).splitlines())
    text = text.replace("\0", "\\0")
    return text.encode("ascii", "backslashreplace").decode("ascii")


def format_addr(host: str, port: int) -> str:
    """``host:port``, bracketing IPv6 literals as the spec's addr:port needs."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def cstring(value: str) -> str:
    """A C-style quoted string, the form tor's kvline parser unquotes.

    Bytes outside printable ASCII become ``\\ooo`` octal escapes of their UTF-8
    encoding, so any text survives an ASCII-only line.
    """
    out = ['"']
    for byte in value.encode("utf-8"):
        ch = chr(byte)
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


def kv_value(value: str) -> str:
    """Bare when the value is a simple token, else a :func:`cstring`."""
    if value and all(0x21 <= ord(c) < 0x7F and c not in '"\\=' for c in value):
        return value
    return cstring(value)


def _check_key(key: str) -> str:
    if not key or any(not (0x21 <= ord(c) < 0x7F) or c in '="\\' for c in key):
        raise ValueError(f"bad key {key!r} for a PT status line")
    return key


def format_smethod_args(args: Mapping[str, str]) -> str:
    """``k=v,k2=v2`` with ``=``, ``,`` (and ``\\``) escaped by a backslash.

    The spec names ``=`` and ``,``; escaping the backslash as well keeps a value
    that ends in a backslash from swallowing the following comma. A space would
    end the ARGS field, so keys and values must not contain whitespace.
    """
    def esc(s: str) -> str:
        if any(c.isspace() or not (0x20 < ord(c) < 0x7F) for c in s):
            raise ValueError(f"SMETHOD ARGS must be printable ASCII without spaces: {s!r}")
        return escape(s, SMETHOD_ARGS)

    return ",".join(f"{esc(k)}={esc(v)}" for k, v in args.items())


def parse_smethod_args(text: str) -> dict[str, str]:
    """The parent's side of :func:`format_smethod_args`: ``k=v,k2=v2`` → a dict.

    Empty items are skipped and an item without ``=`` is a key with an empty
    value. Raises :class:`~.escaping.EscapeError` (a ValueError) for text that
    ends in a lone backslash, which no PT writes.
    """
    out: dict[str, str] = {}
    for item in split_escaped(text, ","):
        if item:
            key, _, value = partition_escaped(item, "=")
            out[unescape(key)] = unescape(value)
    return out


def format_smethod(name: str, host: str, port: int, args: Mapping[str, str] | None = None) -> str:
    line = f"SMETHOD {name} {format_addr(host, port)}"
    if args:
        line += f" ARGS:{format_smethod_args(args)}"
    return line


def format_log(severity: str, message: str) -> str:
    if severity not in SEVERITIES:
        raise ValueError(f"severity must be one of {SEVERITIES}, not {severity!r}")
    return f"LOG SEVERITY={severity} MESSAGE={cstring(message)}"


def format_status(transport: str, fields: Mapping[str, str]) -> str:
    parts = [f"TRANSPORT={transport}"]
    parts += [f"{_check_key(k)}={kv_value(str(v))}" for k, v in fields.items()]
    return "STATUS " + " ".join(parts)


# Writers, one per message; `out` defaults to stdout.

def version(v: str, out: TextIO | None = None) -> None:
    emit(f"VERSION {v}", out)


def version_error(message: str = "no-version", out: TextIO | None = None) -> None:
    emit(f"VERSION-ERROR {oneline(message)}", out)


def env_error(message: str, out: TextIO | None = None) -> None:
    emit(f"ENV-ERROR {oneline(message)}", out)


def proxy_done(out: TextIO | None = None) -> None:
    emit("PROXY DONE", out)


def proxy_error(message: str, out: TextIO | None = None) -> None:
    emit(f"PROXY-ERROR {oneline(message)}", out)


def cmethod(name: str, host: str, port: int, proto: str = "socks5",
            out: TextIO | None = None) -> None:
    emit(f"CMETHOD {name} {proto} {format_addr(host, port)}", out)


def cmethod_error(name: str, message: str, out: TextIO | None = None) -> None:
    emit(f"CMETHOD-ERROR {name} {oneline(message)}", out)


def cmethods_done(out: TextIO | None = None) -> None:
    emit("CMETHODS DONE", out)


def smethod(name: str, host: str, port: int, args: Mapping[str, str] | None = None,
            out: TextIO | None = None) -> None:
    emit(format_smethod(name, host, port, args), out)


def smethod_error(name: str, message: str, out: TextIO | None = None) -> None:
    emit(f"SMETHOD-ERROR {name} {oneline(message)}", out)


def smethods_done(out: TextIO | None = None) -> None:
    emit("SMETHODS DONE", out)


def log(severity: str, message: str, out: TextIO | None = None) -> None:
    emit(format_log(severity, message), out)


def status(transport: str, fields: Mapping[str, str], out: TextIO | None = None) -> None:
    emit(format_status(transport, fields), out)
