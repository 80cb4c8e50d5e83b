"""The private Tor network's processes: authorities and exits on the internet side.

:class:`TorNetwork` plans the nodes (ports on the ``tornet`` lab node), makes
their keys, writes their torrcs under the lab's directory and starts one
``tor`` per node in its namespace. Bridges and clients are planned here too
(:meth:`TorNetwork.bridge`, :meth:`TorNetwork.client`) and started by the lab
plugins that use them, per cell. The network itself is started once per lab
(:func:`shared`) and stopped with it: a consensus takes tens of seconds, a
cell should not pay for it again.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from netns.errors import LabError
from netns.lab import Lab
from netns.process import LabProcess

from . import keys
from .torrc import TorNode, render

TORNET = "tornet"  # the lab node that hosts the authorities and relays
AUTHORITIES, EXITS = 3, 2
AUTH_ORPORT, AUTH_DIRPORT = 5000, 7000
RELAY_ORPORT, RELAY_DIRPORT = 5100, 7100
BRIDGE_ORPORT = 5200
CLIENT_SOCKS, CLIENT_CONTROL = 9050, 9051
BOOTSTRAPPED = re.compile(r"Bootstrapped (\d+)%")


class TorNetwork:
    """Authorities and exits of one lab, with their data under `base`."""

    def __init__(self, lab: Lab, base: Path, authorities: int = AUTHORITIES,
                 exits: int = EXITS) -> None:
        self.lab = lab
        self.base = Path(base)
        addr = lab.addr(TORNET)
        self.authorities = [TorNode(f"auth{i}", "authority", TORNET, addr,
                                    str(self.base / f"auth{i}"), AUTH_ORPORT + i,
                                    AUTH_DIRPORT + i) for i in range(authorities)]
        self.relays = [TorNode(f"exit{i}", "relay", TORNET, addr, str(self.base / f"exit{i}"),
                               RELAY_ORPORT + i, RELAY_DIRPORT + i) for i in range(exits)]
        self.procs: list[LabProcess] = []
        self.started_at: float | None = None
        self.up_s: float | None = None  # start to a consensus with every relay and exit

    @property
    def nodes(self) -> list[TorNode]:
        return self.authorities + self.relays

    def addresses(self) -> list[str]:
        """Where the public network's relays are (what a relay blocklist lists)."""
        return self.lab.topology.addresses(TORNET)

    # --- keys and configuration ------------------------------------------------

    def prepare(self) -> None:
        for n in self.authorities:
            n.v3ident = keys.authority_keys(Path(n.datadir), n.address, n.dirport)
        for n in self.nodes:
            n.fingerprint = keys.relay_fingerprint(Path(n.datadir))

    def write_torrc(self, node: TorNode) -> Path:
        path = Path(node.datadir) / "torrc"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.write_text(render(node, self.authorities))
        return path

    def bridge(self, datadir: Path, ns_role: str = "bridge", nick: str = "bridge",
               orport: int = BRIDGE_ORPORT, extra: list[str] | None = None) -> TorNode:
        """A bridge relay on `ns_role`, with its identity made (not started)."""
        node = TorNode(nick, "bridge", ns_role, self.lab.addr(ns_role), str(datadir), orport,
                       extra=list(extra or []))
        node.fingerprint = keys.relay_fingerprint(Path(datadir))
        return node

    def client(self, datadir: Path, extra: list[str] | None = None,
               ns_role: str = "client") -> TorNode:
        """A client on `ns_role` with a SOCKS port on 127.0.0.1 (not started)."""
        return TorNode("client", "client", ns_role, "127.0.0.1", str(datadir),
                       socksport=CLIENT_SOCKS, controlport=CLIENT_CONTROL,
                       extra=list(extra or []))

    # --- processes -------------------------------------------------------------

    def process(self, node: TorNode, log: Path | None = None) -> LabProcess:
        torrc = self.write_torrc(node)
        return LabProcess(self.lab.ns(node.ns_role), ["tor", "-f", str(torrc)],
                          f"tor-{node.nick}", log or Path(node.datadir) / "tor.log")

    def start(self, timeout_s: float = 240.0) -> TorNetwork:
        """Start the authorities and exits; return once each has started (the
        consensus follows within a voting round or two: clients wait for it)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self.prepare()
        self.started_at = time.monotonic()
        try:
            for node in self.nodes:
                self.procs.append(self.process(node).start())
            for p in self.procs:
                p.wait_log(r"Opening Directory listener|Opened Directory listener", timeout_s)
            self.up_s = self.wait_consensus(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def consensus_summary(self) -> tuple[int, int]:
        """(relays, exits) with the Running flag in the first authority's cached
        consensus; (0, 0) before there is one."""
        path = Path(self.authorities[0].datadir) / "cached-consensus"
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return 0, 0
        flags = [ln.split()[1:] for ln in text.splitlines() if ln.startswith("s ")]
        running = [f for f in flags if "Running" in f]
        return len(running), sum("Exit" in f for f in running)

    def wait_consensus(self, timeout_s: float) -> float:
        """Seconds until a consensus lists every relay running and every exit as an
        exit: before that a client may bootstrap but find no exit ("Have tried
        connecting ... at 3 different places. Giving up.")."""
        assert self.started_at is not None
        want = (len(self.nodes), len(self.relays))
        deadline = self.started_at + timeout_s
        while time.monotonic() < deadline:
            got = self.consensus_summary()
            if got[0] >= want[0] and got[1] >= want[1]:
                return time.monotonic() - self.started_at
            if self.dead():
                raise LabError(f"tor network: {', '.join(self.dead())} exited")
            time.sleep(0.5)
        raise LabError(f"tor network: no consensus with {want[0]} running relays and "
                       f"{want[1]} exits within {timeout_s:.0f} s "
                       f"(last: {self.consensus_summary()})")

    def dead(self) -> list[str]:
        return [p.name for p in self.procs if not p.running()]

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs = []


_SHARED: dict[str, TorNetwork] = {}
_LOCK = threading.Lock()


def _key(lab: Lab) -> str:
    """The lab's id: only a lab that is up (and so has one) has a network."""
    if lab.id is None:
        raise LabError("the private Tor network needs a lab that is up")
    return lab.id


def shared(lab: Lab, base: Path) -> TorNetwork:
    """The lab's network, started on first use."""
    with _LOCK:
        net = _SHARED.get(_key(lab))
        if net is None or net.dead():
            if net is not None:
                net.stop()
            net = _SHARED[_key(lab)] = TorNetwork(lab, base).start()
        return net


def existing(lab: Lab) -> TorNetwork | None:
    """The lab's network if one was started (never starts one)."""
    with _LOCK:
        return _SHARED.get(lab.id) if lab.id is not None else None


def stop_shared(lab: Lab) -> None:
    """Stop the lab's network, if one was started (the runner calls this on teardown)."""
    with _LOCK:
        net = _SHARED.pop(lab.id, None) if lab.id is not None else None
    if net is not None:
        net.stop()
