"""Scale specs: many Snowflake clients and proxies with churn, for Shadow.

A scale spec (``experiments/snowflake-scale.toml``) describes a population,
not a cell matrix: how many clients and volunteer proxies, how long proxies
stay (churn) and the network between the regions. Every key is checked and
errors name their path, as for experiment specs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.specfile import Checker, SpecError, read_toml


@dataclass
class Region:
    """A group of hosts on one Shadow graph node: its link to the core."""

    latency_ms: float
    loss: float = 0.0
    bandwidth_mbit: float = 100.0


@dataclass
class ScaleSpec:
    name: str
    seed: int
    duration_s: int
    clients: int
    proxies: int
    bulk_size: int
    fetch_every_s: float
    # Proxy churn: each proxy stays a random time in [min, max] seconds, then leaves
    # and, after `rejoin_gap_s`, a new proxy takes its place.
    proxy_lifetime_s: tuple[float, float]
    rejoin_gap_s: float
    regions: dict[str, Region] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


REGIONS = ("core", "clients", "proxies")


def parse_scale_spec(data: dict[str, Any], where: str = "spec") -> ScaleSpec:
    c = Checker(where)
    table, num = c.table, c.number

    table(data, "", {"scale", "churn", "network", "workload"})
    sc = table(data.get("scale", {}), "scale",
               {"name", "description", "seed", "duration_s", "clients", "proxies"})
    churn = table(data.get("churn", {}), "churn", {"proxy_lifetime_s", "rejoin_gap_s"})
    wl = table(data.get("workload", {}), "workload", {"bulk_size", "fetch_every_s"})
    net = table(data.get("network", {}), "network", set(REGIONS))
    life = churn.get("proxy_lifetime_s", [120, 600])
    if (not isinstance(life, list) or len(life) != 2
            or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in life)
            or not 0 < life[0] <= life[1]):
        raise SpecError(f"{where}: churn.proxy_lifetime_s: expected [min, max] seconds, "
                        f"0 < min <= max")
    regions = {}
    for r in REGIONS:
        t = table(net.get(r, {}), f"network.{r}", {"latency_ms", "loss", "bandwidth_mbit"})
        regions[r] = Region(float(num(t, "latency_ms", f"network.{r}", 1 if r == "core" else 40,
                                      0, 10_000)),
                            float(num(t, "loss", f"network.{r}", 0.0, 0.0, 0.5)),
                            float(num(t, "bandwidth_mbit", f"network.{r}", 100, 0.01, 100_000)))
    name = sc.get("name", "scale")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: scale.name: expected a non-empty string")
    return ScaleSpec(
        name, num(sc, "seed", "scale", 1, 0, 2**63, True),
        num(sc, "duration_s", "scale", 600, 10, 7 * 86400, True),
        num(sc, "clients", "scale", 10, 1, 10_000, True),
        num(sc, "proxies", "scale", 10, 1, 10_000, True),
        num(wl, "bulk_size", "workload", 100_000, 1, 1 << 30, True),
        float(num(wl, "fetch_every_s", "workload", 30, 0.1, 86400)),
        (float(life[0]), float(life[1])),
        float(num(churn, "rejoin_gap_s", "churn", 10, 0, 86400)), regions, data)


def load_scale_spec(path: Path) -> ScaleSpec:
    return parse_scale_spec(read_toml(path), Path(path).name)
