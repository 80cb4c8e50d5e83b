"""``ptlab export shadow SPEC OUT/``: a scale spec as a Shadow simulation.

Shadow (shadow.github.io) runs real processes over a simulated network, so
our transports' own programs run unchanged at a scale one machine's
namespaces cannot hold. This writes ``OUT/shadow.yaml`` (in JSON syntax,
which is YAML) with:

* ``network.graph``: three graph nodes, ``core`` (broker, bridge, web server,
  STUN), ``clients`` and ``proxies``, with the spec's latency, loss and
  bandwidth; every pair and every node with itself is joined, since hosts on
  one node talk too;
* ``hosts``: ``broker`` (with the NAT probe service), ``bridge`` (our
  Snowflake server), ``web``, ``stun``;
  ``clientN`` running ``ptlab.processes.ptparent`` with our Snowflake client PT and a
  fetch loop (``ptlab.workloads.fetchloop``, SHA-256 checked); ``proxyN``
  running our volunteer proxy, one process per stay: each leaves at the end
  of its stay (SIGTERM) and a new one starts after the rejoin gap (churn);
* IPv4 addresses only, from 198.18.0.0/15, as in the lab.

What does not carry over: the censor (NFQUEUE, nftables, scapy injection
need a kernel datapath Shadow does not simulate), network namespaces and
``tc`` shaping (the graph's latency and loss take their place), and the
real peers' own binaries' assumptions about the host. :func:`structural_errors`
checks what Shadow would otherwise reject at start: node ids, units,
absolute process paths, IPv4-only unique addresses, and the churn timeline.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Any

from .scalespec import REGIONS, ScaleSpec

REPO = Path(__file__).resolve().parents[2]
NODE = {r: i for i, r in enumerate(REGIONS)}
CORE = {"broker": "198.18.0.10", "bridge": "198.18.0.11", "web": "198.18.0.12",
        "stun": "198.18.0.13"}
BROKER_PORT, BRIDGE_PORT, WEB_PORT, STUN_PORT, NAT_PROBE_PORT = 8080, 8443, 80, 3478, 8081
LAB_NET = ipaddress.ip_network("198.18.0.0/15")
_TIME = re.compile(r"^\d+ (ms|s|min|h)$")
_HOST = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


def ms(seconds: float) -> str:
    """A Shadow time value: whole milliseconds, with the unit."""
    return f"{round(seconds * 1000)} ms"


def _seconds(value: str) -> float:
    n, unit = value.split()
    return int(n) * {"ms": 0.001, "s": 1, "min": 60, "h": 3600}[unit]


def client_addr(i: int) -> str:
    return f"198.18.{16 + i // 250}.{i % 250 + 2}"


def proxy_addr(i: int) -> str:
    return f"198.19.{i // 250}.{i % 250 + 2}"


def churn_schedule(spec: ScaleSpec) -> list[list[tuple[float, float | None]]]:
    """Per proxy slot, its stays as (join, leave) seconds; leave None = to the end.
    Seeded: a spec gives the same schedule every time."""
    rng = random.Random(f"{spec.seed}/churn")
    lo, hi = spec.proxy_lifetime_s
    out = []
    for _ in range(spec.proxies):
        stays: list[tuple[float, float | None]] = []
        t = rng.uniform(1.0, 10.0)  # volunteers do not all start at once
        while t < spec.duration_s:
            leave = t + rng.uniform(lo, hi)
            if leave >= spec.duration_s:
                stays.append((round(t, 3), None))
                break
            stays.append((round(t, 3), round(leave, 3)))
            t = leave + spec.rejoin_gap_s
        out.append(stays)
    return out


def graph(spec: ScaleSpec) -> str:
    """The GML graph: a node per region, an edge for every pair and self-loop."""
    lines = ["graph [", "  directed 0"]
    for r, i in NODE.items():
        bw = f"{spec.regions[r].bandwidth_mbit:g} Mbit"
        lines.append(f'  node [ id {i} label "{r}" host_bandwidth_down "{bw}" '
                     f'host_bandwidth_up "{bw}" ]')
    for a in REGIONS:
        for b in REGIONS:
            if NODE[a] > NODE[b]:
                continue
            ra, rb = spec.regions[a], spec.regions[b]
            latency = ra.latency_ms if a == b else ra.latency_ms + rb.latency_ms
            loss = 1 - (1 - ra.loss) * (1 - (rb.loss if a != b else 0.0))
            lines.append(f'  edge [ source {NODE[a]} target {NODE[b]} '
                         f'latency "{max(1, round(latency))} ms" packet_loss {loss:.4f} ]')
    lines.append("]")
    return "\n".join(lines) + "\n"


def build(spec: ScaleSpec, out: Path, python: str | None = None) -> dict[str, Any]:
    """The Shadow configuration for `spec` (files it needs are written into `out`)."""
    python = python or sys.executable
    out = Path(out).resolve()
    env = {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    bridges = out / "bridges.jsonl"
    relay = f"ws://{CORE['bridge']}:{BRIDGE_PORT}/"
    broker_url = f"http://{CORE['broker']}:{BROKER_PORT}/"
    stun = f"stun:{CORE['stun']}:{STUN_PORT}"
    exact = f"^{re.escape(CORE['bridge'])}$"

    def proc(args: list[str], start: float, stop: float | None = None,
             final: Any = "running") -> dict[str, Any]:
        p: dict[str, Any] = {"path": python, "args": args, "environment": env,
                             "start_time": ms(start), "expected_final_state": final}
        if stop is not None:
            p["shutdown_time"] = ms(stop)
            p["shutdown_signal"] = "SIGTERM"
        return p

    hosts: dict[str, Any] = {
        "web": {"network_node_id": NODE["core"], "ip_addr": CORE["web"], "processes": [proc(
            ["-m", "ptlab.services.web", "--name", "web.lab", "--listen",
             f"{CORE['web']}:{WEB_PORT}"], 1)]},
        "stun": {"network_node_id": NODE["core"], "ip_addr": CORE["stun"], "processes": [proc(
            ["-m", "ptlab.services.stun", "--listen", f"{CORE['stun']}:{STUN_PORT}"], 1)]},
        "bridge": {"network_node_id": NODE["core"], "ip_addr": CORE["bridge"],
                   "processes": [proc(["-m", "transports.snowflake.server", "--listen",
                                       f"{CORE['bridge']}:{BRIDGE_PORT}", "--dest",
                                       f"{CORE['web']}:{WEB_PORT}"], 1)]},
        "broker": {"network_node_id": NODE["core"], "ip_addr": CORE["broker"],
                   "processes": [proc(["-m", "broker", "--addr",
                                       f"{CORE['broker']}:{BROKER_PORT}", "--disable-tls",
                                       "--allowed-relay-pattern", exact,
                                       "--default-relay-pattern", exact,
                                       "--bridge-list-path", str(bridges),
                                       "--unknown-proxies-unrestricted"], 1),
                                 # Tor's NAT probe service beside the broker, as in the lab:
                                 # proxies ask it, never the public one.
                                 proc(["-m", "transports.snowflake.natprobe", "--addr",
                                       f"{CORE['broker']}:{NAT_PROBE_PORT}", "--stun", stun],
                                      1)]},
    }
    for i, stays in enumerate(churn_schedule(spec)):
        procs = [proc(["-m", "ptlab", "snowflake-proxy", "-broker", broker_url, "-relay", relay,
                       "-allowed-relay-hostname-pattern", exact, "-allow-non-tls-relay",
                       "-stun", stun, "-poll-interval", "5", "-nat-probe-server",
                       f"http://{CORE['broker']}:{NAT_PROBE_PORT}/probe"], join, leave,
                      "running" if leave is None else {"exited": 0})
                 for join, leave in stays]
        hosts[f"proxy{i}"] = {"network_node_id": NODE["proxies"], "ip_addr": proxy_addr(i),
                              "processes": procs}
    for i in range(spec.clients):
        start = 15 + (i % 30)  # after the first proxies have polled; staggered
        hosts[f"client{i}"] = {"network_node_id": NODE["clients"], "ip_addr": client_addr(i),
                               "processes": [
            proc(["-m", "ptlab.processes.ptparent", "client", "--transport", "snowflake", "--state",
                  "pt-state", "--info", "pt.json", "--", python, "-m", "transports.pt"], start),
            proc(["-m", "ptlab.workloads.fetchloop", "--info", "pt.json", "--target",
                  f"{CORE['web']}:{WEB_PORT}", "--arg", f"url={broker_url}", "--arg",
                  f"ice={stun}", "--arg", "max=1", "--size", str(spec.bulk_size),
                  "--every", str(spec.fetch_every_s)], start + 2)]}
    return {"general": {"stop_time": ms(spec.duration_s), "seed": spec.seed,
                        "model_unblocked_syscall_latency": True},
            "network": {"graph": {"type": "gml", "inline": graph(spec)}},
            "hosts": hosts}


def write(spec: ScaleSpec, out: Path, python: str | None = None) -> Path:
    """Write ``shadow.yaml`` and the broker's bridge list into `out`; return the config path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = build(spec, out, python)
    (out / "bridges.jsonl").write_text(json.dumps({
        "displayName": "shadow", "webSocketAddress": f"ws://{CORE['bridge']}:{BRIDGE_PORT}/",
        "fingerprint": "2B280B23E1107BB62ABFC40DDCC8824814F80A72"}) + "\n")
    errors = structural_errors(cfg)
    if errors:
        raise ValueError("the export is not a valid Shadow config: " + "; ".join(errors[:5]))
    path = out / "shadow.yaml"
    path.write_text("# Shadow configuration written by ptlab export shadow (JSON is YAML).\n"
                    + json.dumps(cfg, indent=1) + "\n")
    return path


def _graph_ids(gml: str) -> tuple[set[int], list[tuple[int, int, str]]]:
    nodes = {int(n) for n in re.findall(r"node \[ id (\d+)", gml)}
    edges = [(int(a), int(b), lat) for a, b, lat in
             re.findall(r'edge \[ source (\d+) target (\d+) latency "([^"]*)"', gml)]
    return nodes, edges


def structural_errors(cfg: dict[str, Any], check_paths: bool = True) -> list[str]:
    """What Shadow would refuse, or what would make the run meaningless; [] if none."""
    errors: list[str] = []
    general = cfg.get("general", {})
    stop = general.get("stop_time", "")
    if not isinstance(stop, str) or not _TIME.match(stop):
        errors.append(f"general.stop_time {stop!r}: a number and a unit (ms, s, min, h)")
        stop_s = float("inf")
    else:
        stop_s = _seconds(stop)
    if not isinstance(general.get("seed"), int):
        errors.append("general.seed: an integer")
    g = cfg.get("network", {}).get("graph", {})
    nodes, edges = _graph_ids(g.get("inline", "")) if g.get("type") == "gml" else (set(), [])
    if not nodes:
        errors.append("network.graph: an inline GML graph with nodes")
    for a, b, lat in edges:
        if a not in nodes or b not in nodes:
            errors.append(f"graph edge {a}-{b}: an unknown node")
        if not _TIME.match(lat):
            errors.append(f"graph edge {a}-{b}: latency {lat!r} needs a unit")
    linked = {(min(a, b), max(a, b)) for a, b, _ in edges}
    for a in nodes:
        for b in nodes:
            if a <= b and (a, b) not in linked:
                errors.append(f"graph: no edge between nodes {a} and {b}")
    seen_ips: set[str] = set()
    for name, host in cfg.get("hosts", {}).items():
        where = f"hosts.{name}"
        if not _HOST.match(name):
            errors.append(f"{where}: host names are lower-case letters, digits and hyphens")
        if host.get("network_node_id") not in nodes:
            errors.append(f"{where}.network_node_id: no graph node "
                          f"{host.get('network_node_id')!r}")
        ip = host.get("ip_addr", "")
        try:
            addr = ipaddress.ip_address(ip)
            if addr.version != 4:
                errors.append(f"{where}.ip_addr {ip}: Shadow hosts are IPv4-only")
            elif addr not in LAB_NET:
                errors.append(f"{where}.ip_addr {ip}: outside the lab's 198.18.0.0/15")
        except ValueError:
            errors.append(f"{where}.ip_addr {ip!r}: not an address")
        if ip in seen_ips:
            errors.append(f"{where}.ip_addr {ip}: used twice")
        seen_ips.add(ip)
        last_end = -1.0
        for k, p in enumerate(host.get("processes", [])):
            pw = f"{where}.processes[{k}]"
            path = p.get("path", "")
            if not os.path.isabs(path):
                errors.append(f"{pw}.path {path!r}: must be absolute")
            elif check_paths and not os.access(path, os.X_OK):
                errors.append(f"{pw}.path {path}: not an executable here")
            if not isinstance(p.get("args"), list) or not all(isinstance(a, str)
                                                              for a in p["args"]):
                errors.append(f"{pw}.args: a list of strings")
            times = {}
            for key in ("start_time", "shutdown_time"):
                if key in p:
                    if not isinstance(p[key], str) or not _TIME.match(p[key]):
                        errors.append(f"{pw}.{key} {p[key]!r}: a number and a unit")
                    else:
                        times[key] = _seconds(p[key])
            start, end = times.get("start_time", 0.0), times.get("shutdown_time")
            if start >= stop_s:
                errors.append(f"{pw}: starts after the simulation stops")
            if end is not None and end <= start:
                errors.append(f"{pw}: shuts down before it starts")
            if name.startswith("proxy"):  # one volunteer after another, never two at once
                if start < last_end:
                    errors.append(f"{pw}: starts before the previous stay ended")
                last_end = end if end is not None else float("inf")
    return errors


def shadowtools_check(cfg: dict[str, Any]) -> str | None:
    """Validate against Shadow's own config types (``shadowtools.config.Config``, with
    typeguard) when they can be imported; return why not otherwise, None when valid.
    Raises TypeError when they find a problem."""
    try:
        # Optional, from a Shadow checkout: not installed by scripts/setup.
        from shadowtools.config import Config  # type: ignore[import-not-found]  # optional
        from typeguard import check_type  # type: ignore[import-not-found]  # optional
    except ImportError as exc:
        return (f"Shadow's config types cannot be imported here ({exc.name}): install "
                f"shadowtools from a Shadow checkout and typeguard to check against them")
    check_type(cfg, Config)
    return None
