"""The bridges a broker knows: fingerprint → WebSocket relay URL.

Tor's ``broker/bridge-list.go``: JSON lines of ``{"displayName",
"webSocketAddress", "fingerprint"}``, unknown fields refused. A client names
its bridge by fingerprint (default snowflake-01); the matched proxy is told
that bridge's relay URL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from transports.snowflake.messages import DEFAULT_BRIDGE_FINGERPRINT

FIELDS = {"displayName", "webSocketAddress", "fingerprint"}


class BridgeListError(ValueError):
    pass


@dataclass(frozen=True)
class Bridge:
    name: str
    relay_url: str
    fingerprint: str


DEFAULT = Bridge("default", "wss://snowflake.torproject.net/", DEFAULT_BRIDGE_FINGERPRINT)


def parse(text: str, where: str = "bridge list") -> dict[str, Bridge]:
    out: dict[str, Bridge] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BridgeListError(f"{where}:{n}: not JSON ({exc})") from None
        if not isinstance(obj, dict) or set(obj) - FIELDS or "fingerprint" not in obj:
            raise BridgeListError(f"{where}:{n}: needs exactly {sorted(FIELDS)}")
        fp = str(obj["fingerprint"]).upper()
        try:
            ok = len(bytes.fromhex(fp)) == 20
        except ValueError:
            ok = False
        url = str(obj.get("webSocketAddress", ""))
        if not ok or urlsplit(url).scheme not in ("ws", "wss"):
            raise BridgeListError(f"{where}:{n}: bad fingerprint or webSocketAddress")
        out[fp] = Bridge(str(obj.get("displayName", "")), url, fp)
    if not out:
        raise BridgeListError(f"{where}: no bridges")
    return out


def load(path: str | Path | None) -> dict[str, Bridge]:
    if path is None:
        return {DEFAULT.fingerprint: DEFAULT}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BridgeListError(f"cannot read bridge list {path}: {exc.strerror}") from None
    return parse(text, str(path))
