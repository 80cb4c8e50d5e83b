"""A lab GeoIP map: address prefixes → country codes, longest prefix wins.

The lab has no real geography, so experiments assign countries to lab
prefixes (``"198.18.0.0/24 IR"`` per line, ``#`` comments). Unknown addresses
map to ``??``, which is always one of the published keys.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

UNKNOWN = "??"


class GeoIPError(ValueError):
    pass


class LabGeoIP:
    def __init__(self, table: dict[str, str] | None = None) -> None:
        self.nets: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
        for prefix, cc in (table or {}).items():
            self._add(prefix, cc, "table")
        self.nets.sort(key=lambda nc: nc[0].prefixlen, reverse=True)

    def _add(self, prefix: str, cc: str, where: str) -> None:
        try:
            net = ipaddress.ip_network(prefix, strict=True)
        except ValueError as exc:
            raise GeoIPError(f"{where}: {exc}") from None
        if len(cc) != 2 or not cc.isalpha() or not cc.isupper():
            raise GeoIPError(f"{where}: country code {cc!r} is not two capital letters")
        self.nets.append((net, cc))

    @classmethod
    def load(cls, path: str | Path) -> LabGeoIP:
        geo = cls()
        for n, line in enumerate(Path(path).read_text().splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2:
                raise GeoIPError(f"{path}:{n}: expected 'PREFIX CC'")
            geo._add(parts[0], parts[1], f"{path}:{n}")
        geo.nets.sort(key=lambda nc: nc[0].prefixlen, reverse=True)
        return geo

    def country(self, addr: str) -> str:
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            return UNKNOWN
        for net, cc in self.nets:
            if ip.version == net.version and ip in net:
                return cc
        return UNKNOWN

    def countries(self) -> list[str]:
        return sorted({cc for _, cc in self.nets} | {UNKNOWN})
