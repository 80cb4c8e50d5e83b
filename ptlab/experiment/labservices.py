"""The lab-wide services every experiment gets (docs/architecture.md §1.4).

- the lab CA, whose root every lab client trusts;
- the web node: destination HTTP (:80, where bridges relay to) and HTTPS (:443);
- the TLS edge in the cdn namespace, fronting benign sites (and later meek,
  Snowflake's rendezvous and Conjure's registrar) by Host header;
- the resolver and STUN server in the svc namespace;
- benign servers (binary TCP, UDP, SSH) on the web node, for collateral damage.

They start once per lab and outlive the cells; transports use them rather
than building their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Self

from netns.process import LabProcess
from ptcommon.events import READY_PATTERN

from ..common.labview import LabView, Process, namespace_lab
from ..common.wellknown import (
    BINARY_PORT,
    DNS_PORT,
    EDGE_HTTPS,
    EDGE_ORIGINS,
    EDGE_SITES,
    ISP_RANGE,
    ISP_SERVER,
    QUIC_PORT,
    SERVER_PORT,
    SSH_PORT,
    STUN_PORT,
    TUNNEL_ZONE,
    UDP_PORT,
    WEB_HTTP,
    WEB_HTTPS,
)
from ..services.ca import LabCA
from ..services.sshd import READY_MARKER as SSHD_READY
from ..services.sshd import SshdFiles, prepare_sshd
from ..workloads.benign import BenignTargets


class LabServices:
    """Starts and stops the lab services of one lab."""

    ssh_port = SSH_PORT  # the benign sshd's

    def __init__(self, lab: LabView, workdir: Path, ready_timeout_s: float = 20.0) -> None:
        self.lab = lab
        self.ready_timeout_s = ready_timeout_s
        self._ready: dict[str, str] = {}
        self.dir = Path(workdir)
        self.procs: list[Process] = []
        self.ca: LabCA | None = None
        self.sshd: SshdFiles | None = None
        self._roles: dict[str, str] = {}  # service name -> lab role

    @property
    def isp_servers(self) -> bool:
        """Whether the ISP owns its range in this lab (Conjure's row extends it)."""
        isp = namespace_lab(self.lab, "the lab services' ISP range").topology.nodes.get("isp")
        return isp is not None and ISP_RANGE in isp.extra_prefixes

    @property
    def upstream(self) -> tuple[str, int]:
        """Where bridges relay their streams: the web node's plain HTTP server."""
        return self.lab.addr("web"), WEB_HTTP

    # --- hooks: where services bind and run (the three-machine layout overrides them) ---

    def roles(self) -> list[str]:
        """The lab roles that get a name NAME.lab in the zone."""
        topology = namespace_lab(self.lab, "the lab zone").topology
        return [r for r in topology.nodes if topology.links_of(r)]

    def addresses(self, role: str) -> list[str]:
        return [self.lab.addr(role), self.lab.addr(role, v6=True)]

    def has_role(self, role: str) -> bool:
        return role in namespace_lab(self.lab, "has_role").topology.nodes

    def bind_hosts(self, role: str) -> list[str]:
        """Where `role`'s services listen: every address of their namespace."""
        return ["0.0.0.0", "::"]

    def listen(self, role: str, port: int) -> list[str]:
        return [f"[{h}]:{port}" if ":" in h else f"{h}:{port}" for h in self.bind_hosts(role)]

    @property
    def python(self) -> list[str]:
        return [sys.executable, "-m"]

    def launch(self, name: str, role: str, argv: list[str]) -> Process:
        lab = namespace_lab(self.lab, "LabServices.launch")  # the three machines override it
        return LabProcess(lab.ns(role), argv, name, self.dir / f"{name}.log").start()

    # --- the services ---------------------------------------------------------------

    def names(self) -> dict[str, list[str]]:
        """The lab zone: NAME.lab for each node, plus the edge's sites."""
        zone: dict[str, list[str]] = {}
        for role in self.roles():
            zone[f"{role}.lab"] = self.addresses(role)
        for site in (*EDGE_SITES, *EDGE_ORIGINS):
            zone[site] = zone["cdn.lab"]
        return zone

    def delegations(self) -> list[str]:
        """The resolver's one delegation: TUNNEL_ZONE to the bridge's external-row
        port, where a DNS tunnel's server (iodined) listens (docs/lab/transports.md §7.5)."""
        if not self.has_role("bridge"):
            return []
        return ["--delegate", f"{TUNNEL_ZONE}={self.lab.addr('bridge')}:{SERVER_PORT}"]

    def prepare(self) -> list[tuple[str, str, list[str], str]]:
        """Write the services' files (CA, certificates, zone, edge routes, sshd) and
        return (name, role, argv, ready pattern) for each service."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = LabCA.load_or_create(self.dir / "ca")
        web_cert, web_key = self.ca.issue(["web.lab"], self.addresses("web"), "web")
        edge_cert, edge_key = self.ca.issue(["cdn.lab", *EDGE_SITES, *EDGE_ORIGINS,
                                             "*.benign.lab"],
                                            [self.lab.addr("cdn")], "edge")
        zone_file = self.dir / "zone.json"
        zone_file.write_text(json.dumps({"names": self.names()}, indent=2))
        web_origin = f"http://{self.lab.addr('web')}:{WEB_HTTP}"
        edge_cfg = self.dir / "edge.json"
        routes: dict[str, object] = {s: web_origin for s in EDGE_SITES}
        routes.update({name: {"origin": f"http://{self.lab.addr(node)}:{port}", "mode": mode}
                       for name, (node, port, mode) in EDGE_ORIGINS.items()
                       if self.has_role(node)})
        edge_cfg.write_text(json.dumps({"routes": routes}))
        self.sshd = prepare_sshd(self.dir / "sshd", self.bind_hosts("web"), self.ssh_port)
        py = self.python
        specs = [
            ("web-http", "web", [*py, "ptlab.services.web", "--name", "web.lab",
                                 *_listen(self.listen("web", WEB_HTTP))], READY_PATTERN),
            ("web-https", "web", [*py, "ptlab.services.web", "--name", "web.lab",
                                  "--tls-cert", str(web_cert), "--tls-key", str(web_key),
                                  *_listen(self.listen("web", WEB_HTTPS))], READY_PATTERN),
            ("edge", "cdn", [*py, "ptlab.services.edge", "--config", str(edge_cfg),
                             "--tls-cert", str(edge_cert), "--tls-key", str(edge_key),
                             *_listen(self.listen("cdn", EDGE_HTTPS))], READY_PATTERN),
            ("dns", "svc", [*py, "ptlab.services.dns", "--zone-file", str(zone_file),
                            *self.delegations(),
                            *_listen(self.listen("svc", DNS_PORT))], READY_PATTERN),
            ("stun", "svc", [*py, "ptlab.services.stun", *_listen(self.listen("svc", STUN_PORT))],
             READY_PATTERN),
            ("benign", "web", [*py, "ptlab.services.benign",
                               *_flag("--binary-listen", self.listen("web", BINARY_PORT)),
                               *_flag("--udp-listen", self.listen("web", UDP_PORT))],
             READY_PATTERN),
            ("sshd", "web", list(self.sshd.argv), SSHD_READY),
            ("quic", "web", [*py, "ptlab.services.quicecho",
                             "--tls-cert", str(web_cert), "--tls-key", str(web_key),
                             *_listen(self.listen("web", QUIC_PORT))], READY_PATTERN),
        ]
        if self.isp_servers:
            specs += [
                ("isp-web", "isp", [*py, "ptlab.services.web", "--name", "isp.lab",
                                    "--listen", f"{ISP_SERVER}:{WEB_HTTP}"], READY_PATTERN),
                ("isp-benign", "isp", [*py, "ptlab.services.benign", "--binary-listen",
                                       f"{ISP_SERVER}:{BINARY_PORT}"], READY_PATTERN),
            ]
        return specs

    def start(self) -> Self:
        specs = self.prepare()
        try:
            for name, role, argv, _ in specs:
                self._roles[name] = role
                self.procs.append(self.launch(name, role, argv))
            for p, (name, _, _, ready) in zip(self.procs, specs, strict=True):
                self._ready[name] = ready
                p.wait_log(ready, self.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()

    def dead(self) -> list[str]:
        """Names of lab services that are no longer running."""
        return [p.name for p in self.procs if not p.running()]

    def restart_dead(self) -> list[str]:
        """Restart every dead service (same argv, same log); return their names."""
        names = self.dead()
        for i, p in enumerate(self.procs):
            if p.name in names:
                fresh = self.launch(p.name, self._roles[p.name], p.argv)
                fresh.wait_log(self._ready[p.name], self.ready_timeout_s)
                self.procs[i] = fresh
        return names

    def benign_targets(self) -> BenignTargets:
        """Where the benign mix goes: the edge's sites, the web node's servers and
        the resolver (and the ISP's servers when the lab has them)."""
        assert self.ca
        lab, ca = self.lab, str(self.ca.ca_path)
        return BenignTargets(
            https=[(lab.addr("cdn"), EDGE_HTTPS, "www.benign.lab", ca),
                   (lab.addr("cdn"), EDGE_HTTPS, "news.benign.lab", ca),
                   (lab.addr("web"), WEB_HTTPS, "web.lab", ca)],
            http=[(lab.addr("web"), WEB_HTTP, "web.lab"),
                  *([(ISP_SERVER, WEB_HTTP, "isp.lab")] if self.isp_servers else [])],
            dns=(lab.addr("svc"), DNS_PORT),
            dns_name="web.lab",
            ssh=(lab.addr("web"), self.ssh_port),
            binary=(lab.addr("web"), BINARY_PORT),
            udp=(lab.addr("web"), UDP_PORT),
            quic=[(lab.addr("web"), QUIC_PORT, "web.lab", ca)],
            binary_extra=[(ISP_SERVER, BINARY_PORT)] if self.isp_servers else [],
        )


def _listen(addrs: list[str]) -> list[str]:
    return _flag("--listen", addrs)


def _flag(flag: str, values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out += [flag, v]
    return out
