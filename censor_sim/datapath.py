"""The censor's kernel datapath: one nftables table in the censor namespace.

The kernel forwards; blocking happens in the kernel. This module renders the
table for a profile: counters that prove traffic crossed the censor, address
blocklists as nft interval sets, and per-element-timeout sets for residual
blocking. Userspace (NFQUEUE detectors, added by the censor issue) only sees
the packets that decide a flow.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass, field

TABLE = "ptlcensor"
BLOCK_COUNTERS = {"blocklist_drop": ("ip_blocklist", "drop")}


class DatapathError(RuntimeError):
    pass


# What this datapath can enforce today: (detector, action) pairs, always with
# probability 1. The censor issue adds NFQUEUE detectors, RST, residual
# blocking and throttling; until then a profile asking for them is refused
# rather than silently run as something else.
SUPPORTED_RULES = {("ip_blocklist", "drop")}
SUPPORTED_DETECTORS = {detector for detector, _ in SUPPORTED_RULES}


def unsupported(profile) -> str | None:
    """Why this datapath cannot run `profile` as written, or None."""
    for name in profile.detectors:
        if name not in SUPPORTED_DETECTORS:
            return f"detectors.{name}: not implemented by the datapath yet"
    for i, rule in enumerate(profile.policy.get("rules", [])):
        if (rule.get("detector"), rule.get("action")) not in SUPPORTED_RULES:
            return (f"policy.rules[{i}]: {rule.get('detector')} -> {rule.get('action')} "
                    f"is not implemented by the datapath yet")
        if rule.get("probability", 1.0) != 1.0:
            return f"policy.rules[{i}].probability: only 1.0 is implemented yet"
    return None


@dataclass
class Blocklist:
    v4: list[str] = field(default_factory=list)
    v6: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)

    @classmethod
    def from_params(cls, params: dict) -> Blocklist:
        bl = cls()
        for a in params.get("addresses", []):
            if not isinstance(a, str) or a.startswith("role:"):
                raise DatapathError(f"unresolved blocklist entry {a!r}")
            try:
                net = ipaddress.ip_network(a, strict=False)
            except ValueError as exc:
                raise DatapathError(f"bad blocklist address {a!r}") from exc
            (bl.v4 if net.version == 4 else bl.v6).append(str(net))
        for p in params.get("ports", []):
            if not isinstance(p, int) or not 0 < p < 65536:
                raise DatapathError(f"bad blocklist port {p!r}")
            bl.ports.append(p)
        return bl


def ruleset(blocklist: Blocklist | None) -> str:
    """The nft script for the censor table (replacing any previous one)."""
    def elements(xs: list[str]) -> str:
        return f" elements = {{ {', '.join(xs)} }};" if xs else ""

    bl = blocklist or Blocklist()
    ports = ", ".join(str(p) for p in bl.ports)
    dport = f" th dport {{ {ports} }}" if ports else ""
    sport = f" th sport {{ {ports} }}" if ports else ""
    rules = [
        "counter name forwarded",
        "ct state new counter name new_flows",
    ]
    if blocklist is not None:
        rules += [
            f"ip daddr @blocklist4{dport} counter name blocklist_drop drop",
            f"ip saddr @blocklist4{sport} counter name blocklist_drop drop",
            f"ip6 daddr @blocklist6{dport} counter name blocklist_drop drop",
            f"ip6 saddr @blocklist6{sport} counter name blocklist_drop drop",
        ]
    body = "\n    ".join(rules)
    return f"""table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
  counter forwarded {{}}
  counter new_flows {{}}
  counter blocklist_drop {{}}
  set blocklist4 {{ type ipv4_addr; flags interval;{elements(bl.v4)} }}
  set blocklist6 {{ type ipv6_addr; flags interval;{elements(bl.v6)} }}
  set residual4 {{ type ipv4_addr . ipv4_addr . inet_service; flags timeout; }}
  set residual6 {{ type ipv6_addr . ipv6_addr . inet_service; flags timeout; }}
  chain forward {{
    type filter hook forward priority filter; policy accept;
    {body}
  }}
}}
"""


def _nft(args: list[str], input: str | None = None) -> str:
    try:
        proc = subprocess.run(["nft", *args], input=input, capture_output=True, text=True,
                              timeout=10)
    except FileNotFoundError as exc:
        raise DatapathError("missing system tool 'nft' (Debian package nftables)") from exc
    if proc.returncode != 0:
        raise DatapathError(f"nft {' '.join(args)}: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def install(blocklist: Blocklist | None) -> None:
    _nft(["-f", "-"], input=ruleset(blocklist))


def remove() -> None:
    subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True)


def counters() -> dict[str, dict[str, int]]:
    """Every named counter of the table: {name: {"packets": n, "bytes": n}}."""
    data = json.loads(_nft(["-j", "list", "counters", "table", "inet", TABLE]))
    out: dict[str, dict[str, int]] = {}
    for item in data.get("nftables", []):
        c = item.get("counter")
        if c and c.get("table") == TABLE:
            out[c["name"]] = {"packets": c.get("packets", 0), "bytes": c.get("bytes", 0)}
    return out
