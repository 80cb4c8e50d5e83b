"""Snowflake's rendezvous messages: proxy↔broker "1.3" and client↔broker "1.0".

Restated from Tor's ``common/messages`` (Snowflake 2.5.1; 2.14.1 adds ``NextPoll``
and checks the session descriptions it carries, :func:`check_description`;
docs/transports/snowflake.md §2.2–§2.4, §9). The bytes matter: Debian's
``snowflake-proxy`` and ``snowflake-client`` talk to our broker, and our proxy
and client to theirs, so encoders emit Go's ``encoding/json`` field order and
decoders accept what Go's would:

* keys match case-insensitively, unknown keys are ignored, ``null`` is the
  zero value (Go's ``json.Unmarshal`` into a struct);
* integers must be JSON integers (``1.5`` or ``"1"`` for ``Clients`` is an error);
* only the major version is checked for 1.3 (``"1.x"`` is accepted), while the
  client message's first line must be exactly ``1.0``.

SDP offers and answers travel as a JSON *string* holding
``{"type":"offer","sdp":"v=0\\r\\n…"}`` (:func:`encode_sdp`, :func:`decode_sdp`).
Every decoder raises :class:`MessageError` with a reason fit for a 400 answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PROXY_VERSION = "1.3"
CLIENT_VERSION = "1.0"
DEFAULT_BRIDGE_FINGERPRINT = "2B280B23E1107BB62ABFC40DDCC8824814F80A72"  # snowflake-01
NAT_TYPES = ("unknown", "restricted", "unrestricted")
NAT_UNKNOWN, NAT_RESTRICTED, NAT_UNRESTRICTED = NAT_TYPES
PROXY_TYPES = ("standalone", "webext", "badge", "iptproxy", "bloco")

STATUS_MATCH = "client match"
STATUS_NO_MATCH = "no match"
STATUS_BAD_RELAY = "incorrect relay pattern"
STATUS_SUCCESS = "success"
STATUS_CLIENT_GONE = "client gone"
ERR_NO_PROXIES = "no snowflake proxies currently available"
ERR_TIMED_OUT = "timed out waiting for answer!"
ERR_UNKNOWN_BRIDGE = "bridge with requested fingerprint is unknown to the broker"  # 2.10+


class MessageError(ValueError):
    """A message that a Snowflake peer must refuse, with the reason."""


def _go_json(data: bytes | str, what: str) -> dict[str, Any]:
    """Parse a JSON object with Go's struct-decoding leniency: lower-cased keys
    (the last duplicate wins, as in Go), nulls dropped."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageError(f"{what}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise MessageError(f"{what}: not a JSON object")
    return {k.lower(): v for k, v in obj.items() if v is not None}


def _str(obj: dict[str, Any], key: str, what: str) -> str:
    v = obj.get(key.lower(), "")
    if not isinstance(v, str):
        raise MessageError(f"{what}: {key} must be a string")
    return v


def _nat(obj: dict[str, Any], key: str, what: str) -> str:
    nat = _str(obj, key, what) or "unknown"
    if nat not in NAT_TYPES:
        raise MessageError(f"{what}: invalid NAT type {nat[:40]!r}")
    return nat


def _dumps(fields: dict[str, Any]) -> bytes:
    # Go's encoding/json: no spaces, and <, >, & escaped as \u003c… (HTML-safe).
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")).encode()


# -- SDP inside JSON ------------------------------------------------------------------------

def encode_sdp(kind: str, sdp: str) -> str:
    """The JSON string Snowflake carries for a session description."""
    return json.dumps({"type": kind, "sdp": sdp}, separators=(",", ":"))


def decode_sdp(text: str, kind: str) -> str:
    """The SDP inside a Snowflake session-description string of type ``kind``."""
    obj = _go_json(text, f"{kind} description")
    if _str(obj, "type", kind) != kind:
        raise MessageError(f"{kind} description: type is not {kind!r}")
    sdp = _str(obj, "sdp", kind)
    if not sdp.startswith("v=0"):
        raise MessageError(f"{kind} description: SDP must start with 'v=0'")
    return sdp


SDP_TYPES = ("offer", "pranswer", "answer", "rollback")


def check_description(text: str) -> None:
    """Refuse a session-description string as Snowflake 2.14.1's broker does
    (``util.DeserializeSessionDescription``, Tor issue 40546): a JSON object with the
    exact keys ``type`` and ``sdp``, both strings, ``type`` one of :data:`SDP_TYPES`.
    2.5.1 passed any string on (docs/transports/snowflake.md §9)."""
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise MessageError("malformed session description: not JSON") from None
    if not isinstance(obj, dict) or "type" not in obj or "sdp" not in obj:
        raise MessageError("malformed session description: needs type and sdp")
    if not isinstance(obj["type"], str) or not isinstance(obj["sdp"], str):
        raise MessageError("malformed session description: type and sdp must be strings")
    if obj["type"] not in SDP_TYPES:
        raise MessageError("malformed session description: unknown SDP type")


# -- proxy ↔ broker, version 1.3 ---------------------------------------------------------

@dataclass(frozen=True)
class ProxyPoll:
    """``POST /proxy`` body. ``relay_pattern`` None: the proxy predates relay URLs."""

    sid: str
    proxy_type: str = "standalone"
    nat: str = "unknown"
    clients: int = 0
    relay_pattern: str | None = None
    version: str = PROXY_VERSION

    def encode(self) -> bytes:
        fields: dict[str, Any] = {"Sid": self.sid, "Version": self.version,
                                  "Type": self.proxy_type, "NAT": self.nat,
                                  "Clients": self.clients}
        if self.relay_pattern is not None:
            fields["AcceptedRelayPattern"] = self.relay_pattern
        return _dumps(fields)

    @classmethod
    def decode(cls, data: bytes) -> ProxyPoll:
        what = "proxy poll"
        obj = _go_json(data, what)
        version = _str(obj, "Version", what)
        if version.split(".")[0] != "1":
            raise MessageError(f"{what}: unknown version {version[:20]!r}")
        sid = _str(obj, "Sid", what)
        if not sid:
            raise MessageError(f"{what}: no session id")
        clients = obj.get("clients", 0)
        if not isinstance(clients, int) or isinstance(clients, bool) or abs(clients) >= 2**63:
            raise MessageError(f"{what}: Clients must be an integer")
        ptype = _str(obj, "Type", what)
        pattern = obj.get("acceptedrelaypattern")
        if pattern is not None and not isinstance(pattern, str):
            raise MessageError(f"{what}: AcceptedRelayPattern must be a string")
        return cls(sid, ptype if ptype in PROXY_TYPES else "unknown", _nat(obj, "NAT", what),
                   max(clients, 0), pattern, version)


@dataclass(frozen=True)
class ProxyPollResponse:
    """The broker's answer to a poll. Go's struct has no omitempty: all four keys
    always appear; ``next_poll_ms`` is the 2.14 addition (None: not sent)."""

    status: str
    offer: str = ""
    nat: str = ""
    relay_url: str = ""
    next_poll_ms: int | None = None

    def encode(self) -> bytes:
        fields: dict[str, Any] = {"Status": self.status, "Offer": self.offer, "NAT": self.nat,
                                  "RelayURL": self.relay_url}
        if self.next_poll_ms is not None:
            fields["NextPoll"] = self.next_poll_ms
        return _dumps(fields)

    @classmethod
    def decode(cls, data: bytes) -> ProxyPollResponse:
        what = "poll response"
        obj = _go_json(data, what)
        status = _str(obj, "Status", what)
        if not status:
            raise MessageError(f"{what}: no Status")
        offer = _str(obj, "Offer", what)
        if status == STATUS_MATCH and not offer:
            raise MessageError(f"{what}: a match without an offer")
        nxt = obj.get("nextpoll")
        if nxt is not None and (not isinstance(nxt, int) or isinstance(nxt, bool)):
            raise MessageError(f"{what}: NextPoll must be an integer")
        return cls(status, offer if status == STATUS_MATCH else "",
                   _str(obj, "NAT", what) or "unknown", _str(obj, "RelayURL", what), nxt)


@dataclass(frozen=True)
class AnswerRequest:
    """``POST /answer`` body: the proxy's SDP answer for the offer it was given."""

    sid: str
    answer: str
    version: str = PROXY_VERSION

    def encode(self) -> bytes:
        return _dumps({"Version": self.version, "Sid": self.sid, "Answer": self.answer})

    @classmethod
    def decode(cls, data: bytes) -> AnswerRequest:
        what = "answer"
        obj = _go_json(data, what)
        version = _str(obj, "Version", what)
        if version.split(".")[0] != "1":
            raise MessageError(f"{what}: unknown version {version[:20]!r}")
        sid, answer = _str(obj, "Sid", what), _str(obj, "Answer", what)
        if not sid or not answer:
            raise MessageError(f"{what}: needs Sid and Answer")
        check_description(answer)
        return cls(sid, answer, version)


def encode_answer_response(status: str) -> bytes:
    return _dumps({"Status": status})


def decode_answer_response(data: bytes) -> str:
    """The Status of the broker's answer to ``POST /answer`` ("" when absent)."""
    status = _go_json(data, "answer response").get("status", "")
    return status if isinstance(status, str) else ""


# -- client ↔ broker, version 1.0 -------------------------------------------------------

@dataclass(frozen=True)
class ClientPoll:
    """``POST /client`` body: ``1.0\\n`` then the JSON poll (offer, NAT, bridge)."""

    offer: str
    nat: str = "unknown"
    fingerprint: str = DEFAULT_BRIDGE_FINGERPRINT

    def encode(self) -> bytes:
        body = _dumps({"offer": self.offer, "nat": self.nat, "fingerprint": self.fingerprint})
        return CLIENT_VERSION.encode() + b"\n" + body

    @classmethod
    def decode(cls, data: bytes) -> ClientPoll:
        what = "client poll"
        head, sep, body = data.partition(b"\n")
        if not sep or head != CLIENT_VERSION.encode():
            raise MessageError(f"{what}: unsupported message version")
        obj = _go_json(body, what)
        offer = _str(obj, "offer", what)
        if not offer:
            raise MessageError(f"{what}: no offer")
        fp = _str(obj, "fingerprint", what) or DEFAULT_BRIDGE_FINGERPRINT
        try:
            if len(bytes.fromhex(fp)) != 20:
                raise ValueError
        except ValueError:
            raise MessageError(f"{what}: cannot decode fingerprint") from None
        return cls(offer, _nat(obj, "nat", what), fp.upper())


@dataclass(frozen=True)
class ClientPollResponse:
    """The broker's answer to a client: an SDP answer or an error (omitempty)."""

    answer: str = ""
    error: str = ""

    def encode(self) -> bytes:
        fields = {k: v for k, v in (("answer", self.answer), ("error", self.error)) if v}
        return _dumps(fields)

    @classmethod
    def decode(cls, data: bytes) -> ClientPollResponse:
        what = "client poll response"
        obj = _go_json(data, what)
        resp = cls(_str(obj, "answer", what), _str(obj, "error", what))
        if not resp.answer and not resp.error:
            raise MessageError(f"{what}: empty")
        return resp
