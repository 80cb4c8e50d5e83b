"""AMP-cache rendezvous armour (Tor's ``common/amp``; docs/transports/snowflake.md §2.7).

Through an AMP cache the broker's answer must be an AMP HTML page. The JSON
response goes inside ``<pre>`` elements as ``0`` followed by standard base64
(with padding), broken into 32-character chunks separated by whitespace and at
most about 32 KiB per element. The client asks with
``GET /amp/client/0<cache breaker>/<base64url(poll), unpadded>``.
"""

from __future__ import annotations

import base64
import html
import re
import secrets

CHUNK = 32
PRE_MAX = 32 * 1024

_BOILERPLATE = (
    "<!doctype html>\n<html amp>\n<head>\n<meta charset=\"utf-8\">\n"
    "<script async src=\"https://cdn.ampproject.org/v0.js\"></script>\n"
    "<link rel=\"canonical\" href=\"#\">\n"
    "<meta name=\"viewport\" content=\"width=device-width\">\n"
    "<style amp-boilerplate>body{-webkit-animation:none;animation:none}</style>\n"
    "</head>\n<body>\n")


class AmpError(ValueError):
    pass


def encode(payload: bytes) -> bytes:
    """An AMP page carrying ``payload``."""
    text = "0" + base64.b64encode(payload).decode()
    chunks = [text[i:i + CHUNK] for i in range(0, len(text), CHUNK)]
    per_pre = PRE_MAX // (CHUNK + 1)
    pres = ["<pre>\n" + "\n".join(chunks[i:i + per_pre]) + "\n</pre>"
            for i in range(0, len(chunks), per_pre)] or ["<pre>\n0\n</pre>"]
    return (_BOILERPLATE + "\n".join(pres) + "\n</body>\n</html>\n").encode()


_PRE = re.compile(r"<pre>(.*?)</pre>", re.S | re.I)


def decode(page: bytes) -> bytes:
    """The payload of an AMP page (the client side)."""
    text = "".join(html.unescape(p) for p in _PRE.findall(page.decode("utf-8", "replace")))
    text = "".join(text.split())
    if not text.startswith("0"):
        raise AmpError("AMP page: no version-0 payload")
    try:
        return base64.b64decode(text[1:], validate=True)
    except ValueError as exc:
        raise AmpError(f"AMP page: bad base64 ({exc})") from None


def client_path(poll: bytes) -> str:
    """The request path for a client poll through an AMP cache."""
    breaker = base64.urlsafe_b64encode(secrets.token_bytes(9)).decode().rstrip("=")
    data = base64.urlsafe_b64encode(poll).decode().rstrip("=")
    return f"/amp/client/0{breaker}/{data}"
