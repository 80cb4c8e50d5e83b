"""torrc files for a private Tor network (``TestingTorNetwork 1``).

Every option here is from tor(1). The timing options are what make a
network usable in a minute instead of an hour:

* ``TestingTorNetwork 1`` lowers many defaults for a test network (private
  addresses allowed, several relays per address, no reachability wait, no
  download back-off);
* ``TestingV3AuthInitialVotingInterval`` / ``...VoteDelay`` / ``...DistDelay``
  (authorities): the first consensus after start-up is voted on this
  schedule; tor requires the interval to divide 30 minutes and the delays
  (each at least 2 s) to add up to less than it;
* ``V3AuthVotingInterval`` / ``V3AuthVoteDelay`` / ``V3AuthDistDelay``: the
  schedule after that (at least 10 s in a test network; the delays must add
  up to less than half the interval);
* ``TestingDirAuthVoteExit/Guard/HSDir *``: authorities give every relay
  those flags at once, instead of after days of measured uptime;
* ``AssumeReachable 1`` (authorities): no self-test before publishing;
* ``PathsNeededToBuildCircuits 0.67``: a client builds circuits once it has
  descriptors for two thirds of the paths, which a five-relay network
  reaches at once.

Authorities are listed in every node's torrc (``DirAuthority``), so nothing
ever talks to the public Tor network's authorities.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Voting schedule (seconds): see the module docstring for tor's constraints.
INITIAL_VOTING_INTERVAL, INITIAL_VOTE_DELAY, INITIAL_DIST_DELAY = 10, 2, 2
VOTING_INTERVAL, VOTE_DELAY, DIST_DELAY = 10, 2, 2


@dataclass
class TorNode:
    """One tor process: its role, where it lives and listens, and its keys."""

    nick: str
    kind: str  # authority | relay | bridge | client
    ns_role: str  # the lab node it runs on
    address: str
    datadir: str
    orport: int = 0
    dirport: int = 0
    socksport: int = 0
    controlport: int = 0
    fingerprint: str = ""  # RSA identity, 40 hex digits
    v3ident: str = ""  # authorities: the v3 authority key's fingerprint
    extra: list[str] = field(default_factory=list)

    def authority_line(self) -> str:
        """``DirAuthority`` as every node of the network must list this authority."""
        if self.kind != "authority" or not (self.fingerprint and self.v3ident):
            raise ValueError(f"{self.nick}: not an authority with known keys")
        return (f"DirAuthority {self.nick} orport={self.orport} no-v2 v3ident={self.v3ident} "
                f"{self.address}:{self.dirport} {self.fingerprint}")


def render(node: TorNode, authorities: list[TorNode]) -> str:
    """The torrc of `node` in a network whose authorities are `authorities`."""
    lines = [
        "# Written by ptlab (ptlab/tor/torrc.py): a private test network.",
        "TestingTorNetwork 1",
        f"DataDirectory {node.datadir}",
        f"Nickname {node.nick}",
        "RunAsDaemon 0",
        # Managed pluggable transports are not allowed with the sandbox.
        "Sandbox 0",
        "Log notice stdout",
        "SafeLogging 0",
        "LogTimeGranularity 1",
        "ShutdownWaitLength 0",
        "DisableDebuggerAttachment 0",
        "PathsNeededToBuildCircuits 0.67",
        "TestingDirAuthVoteExit *",
        "TestingDirAuthVoteGuard *",
        "TestingDirAuthVoteHSDir *",
        "TestingMinExitFlagThreshold 0",
        "V3AuthNIntervalsValid 2",
        # The control port listens on the node's loopback only.
        f"ControlPort {_hostport('127.0.0.1', node.controlport)}" if node.controlport
        else "ControlPort 0",
        "CookieAuthentication 1",
        *(a.authority_line() for a in authorities),
    ]
    if node.kind in ("authority", "relay", "bridge"):
        lines += [
            f"Address {node.address}",
            f"ORPort {_hostport(node.address, node.orport)}",
            "SocksPort 0",
            "ServerDNSDetectHijacking 0",
            "ServerDNSTestAddresses",
            "ServerDNSResolvConfFile /dev/null",
        ]
    if node.kind in ("authority", "relay"):
        lines.append(f"DirPort {_hostport(node.address, node.dirport)}")
    if node.kind == "authority":
        lines += [
            "AuthoritativeDirectory 1",
            "V3AuthoritativeDirectory 1",
            f"ContactInfo {node.nick}@lab.invalid",
            "AssumeReachable 1",
            "ExitRelay 0",
            f"TestingV3AuthInitialVotingInterval {INITIAL_VOTING_INTERVAL}",
            f"TestingV3AuthInitialVoteDelay {INITIAL_VOTE_DELAY}",
            f"TestingV3AuthInitialDistDelay {INITIAL_DIST_DELAY}",
            f"V3AuthVotingInterval {VOTING_INTERVAL}",
            f"V3AuthVoteDelay {VOTE_DELAY}",
            f"V3AuthDistDelay {DIST_DELAY}",
        ]
    if node.kind == "relay":  # exits, so circuits can reach the lab's web node
        lines += ["ExitRelay 1", "ExitPolicyRejectPrivate 0", "ExitPolicy accept *:*",
                  "AssumeReachable 1"]
    if node.kind == "bridge":
        lines += ["BridgeRelay 1", "ExitRelay 0", "ExitPolicy reject *:*",
                  "PublishServerDescriptor 0", "AssumeReachable 1"]
    if node.kind == "client":
        lines += [f"SocksPort {_hostport(node.address, node.socksport)}"]
    lines += node.extra
    return "\n".join(lines) + "\n"


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"

