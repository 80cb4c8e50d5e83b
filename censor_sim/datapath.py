"""The censor's kernel datapath: what the kernel does so Python doesn't have to.

The kernel forwards. Two pieces of state live in the censor's network namespace:

* nft table ``inet ptlcensor``: counters that prove traffic crossed the censor;
  static address blocklists (interval sets); residual blocking (sets with a
  timeout per element, keyed on client, server, protocol, server port, and
  matched only client→server, as the GFW's FET residual is); servers blocked
  at run time (the prober's verdicts); and enforcement of flow decisions kept
  in the conntrack mark: drop, police to a rate (the TSPU throttle), or freeze
  (drop the server's packets once it has sent a number of bytes, by conntrack's
  byte accounting: the TSPU's "16 KB" stall).
* iptables-nft chain ``ptlcensor`` in the mangle table (this kernel has no nft
  ``queue`` statement, so the xtables NFQUEUE target is used): the first
  packets of each *undecided* flow (conntrack mark 0, at most ``inspect_packets``
  packets by connbytes) go to userspace, on one queue per direction. An
  on-path censor gets copies instead (the NFLOG target, one log group per
  direction) while the kernel forwards the packets, and writes its decisions
  into the conntrack mark over ctnetlink. A flow the
  engine has decided is offloaded by conntrack mark, as OpenGFW does, so bulk
  traffic never touches Python. Profiles that need every packet (Geneva's TCB
  censors) drop the connbytes and mark conditions.

Userspace sets the packet mark with its verdict; the ``post`` chain (after
the queue) copies it into the conntrack mark and enforces it on that same packet.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from dataclasses import dataclass, field

TABLE = "ptlcensor"
CHAIN = "ptlcensor"
QUEUE_C2S, QUEUE_S2C = 10, 11
MARK_MASK = 0x70
MARK_ACCEPT, MARK_DROP, MARK_THROTTLE = 0x10, 0x20, 0x40
MARK_FREEZE = 0x30  # values within MARK_MASK, as the others are
MARK_LOSS = 0x50
# Packet-only bit (never saved to conntrack): let this one packet past the
# residual set that its own verdict just filled (Iran's "after the first").
MARK_PASS = 0x80
FLOW_MASK = 0x70
# Conntrack-only bit: this connection already passed the static blocklist.
MARK_CHECKED = 0x100
# Packet-only bit set before the queue: a TCP segment with no payload, not a bare SYN
# (with ``watch_births``, a bare SYN too).
MARK_EMPTY = 0x200
# Conntrack-only bit: this TCP connection began with a SYN the censor's ruleset saw
# (``watch_births``), so its first copied segment is its first payload.
MARK_BORN = 0x400
FLOW_MARKS = {"accept": MARK_ACCEPT, "drop": MARK_DROP, "throttle": MARK_THROTTLE,
              "freeze": MARK_FREEZE, "loss": MARK_LOSS}
BLOCK_COUNTERS = {
    "blocklist_drop": ("ip_blocklist", "drop"),
    "residual_drop": ("residual", "drop"),
    "flow_drop": ("flow", "drop"),
    "server_drop": ("prober", "block_server"),
    "throttle_drop": ("throttle", "police"),
    "freeze_drop": ("freeze", "drop"),
    "allowlist_drop": ("ip_allowlist", "drop"),
    "loss_drop": ("loss", "drop"),
}


class DatapathError(RuntimeError):
    pass


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


@dataclass
class Allowlist:
    """Who may reach the outside at all (Iran, 2026): a kernel rule on every packet
    from the client side.

    ``match = "destination"``: only the listed destinations are reachable.
    ``match = "source"``: only the listed client addresses reach anything outside
    ``domestic`` (the destinations inside the country, reachable from every
    source). net4people/bbs#630 reports the second: of 11.8 million Iranian source
    addresses, about 2,000 reached servers abroad, "consistent with a source-IP
    allowlist" (docs/censors/iran.md §3.3).
    """

    listed: Blocklist = field(default_factory=Blocklist)
    match: str = "destination"
    domestic: Blocklist = field(default_factory=Blocklist)

    MATCHES = ("destination", "source")

    @classmethod
    def from_params(cls, params: dict) -> Allowlist:
        match = params.get("match", "destination")
        if match not in cls.MATCHES:
            raise DatapathError(f"match must be one of {', '.join(cls.MATCHES)}, "
                                f"not {match!r}")
        return cls(Blocklist.from_params({"addresses": params.get("addresses", [])}), match,
                   Blocklist.from_params({"addresses": params.get("domestic", [])}))


@dataclass
class QueueConfig:
    """Which packets go to userspace. ``inspect_packets`` None means every packet.

    ``skip_empty_tcp``: TCP segments with no payload other than the client's SYN
    (the handshake's SYN+ACK and ACK, bare ACKs, FINs) stay in the kernel. A censor whose
    inspectors judge payloads alone needs only the SYN (which starts a flow) and
    the payloads; this halves what a short TCP flow costs it.

    ``watch_births``: the SYN stays in the kernel as well. The ruleset marks each
    TCP connection whose SYN it sees (``MARK_BORN``) and copies only those
    connections' segments, so the first copy of a connection is its first
    payload, and a connection that began before the censor is never mistaken for
    a new one. A TCP flow then costs the censor one copy instead of two. For an
    on-path tap whose inspectors read only clients' payloads.
    """

    inside: str
    outside: str
    inspect_packets: int | None = 12
    skip_empty_tcp: bool = False
    # "queue": NFQUEUE, the packet waits for the verdict (an in-path censor);
    # "tap": NFLOG, the kernel forwards the packet and hands the censor a copy
    # (an on-path censor, which decides by conntrack marks: censor_sim.ctmark).
    mechanism: str = "queue"
    # The tap's batching: the kernel sends copies when `tap_batch` wait, or
    # `tap_wait_cs` hundredths of a second after the first. The packets never
    # wait; only the censor's view of them (and so its forgeries) is later.
    tap_batch: int = 1
    tap_wait_cs: int = 0
    # No inspector reads what the server side sends: only the client side's
    # packets go to the censor (blocking still acts on both ways, in the kernel).
    client_side_only: bool = False
    watch_births: bool = False
    # The transport protocols (IP protocol numbers) some inspector reads; None for
    # all. Packets of the others never leave the kernel (FET reads TCP alone, so
    # a FET censor sees no UDP).
    protocols: tuple[int, ...] | None = None


@dataclass
class Throttle:
    """Per-flow, per-direction policing: packets over the rate are dropped."""

    rate_bytes_s: int
    burst_bytes: int


def ruleset(blocklist: Blocklist | None, throttle: Throttle | None = None,
            dynamic: bool = True, servers: bool = True,
            stateful_blocklist: bool | None = None, freeze_bytes: int | None = None,
            allowlist: Allowlist | None = None, inside: str | None = None,
            loss_percent: float | None = None, skip_empty_tcp: bool = False,
            watch_births: bool = False) -> str:
    """The nft script for the censor table (replacing any previous one).

    Only what the profile can use is emitted (every rule costs every forwarded
    packet): ``dynamic`` adds the post-queue chain (flow marks, residual sets,
    policing), ``servers`` the run-time server blocklist (prober verdicts).
    """
    def elements(xs: list[str]) -> str:
        return f" elements = {{ {', '.join(xs)} }};" if xs else ""

    bl = blocklist or Blocklist()
    al = allowlist or Allowlist()
    ports = ", ".join(str(p) for p in bl.ports)
    dport = f" th dport {{ {ports} }}" if ports else ""
    sport = f" th sport {{ {ports} }}" if ports else ""
    # Conntrack costs every forwarded packet (about 10 % at 20 Gbit/s here), so a
    # profile that needs no flow state (a static blocklist) stays stateless and
    # does not count new flows.
    stateful = dynamic if stateful_blocklist is None else stateful_blocklist
    pre = ["counter name forwarded"]
    if stateful:
        pre.append("ct state new counter name new_flows")
    blocks = []
    if blocklist is not None:
        # A connection is checked against the static blocklist until one of its
        # packets has passed; then a conntrack bit lets the rest skip the lookups.
        blocks += [f"ct mark & {MARK_CHECKED:#x} != 0 accept"] if stateful else []
        if bl.v4:
            blocks += [f"ip daddr @blocklist4{dport} counter name blocklist_drop drop",
                       f"ip saddr @blocklist4{sport} counter name blocklist_drop drop"]
        if bl.v6:
            blocks += [f"ip6 daddr @blocklist6{dport} counter name blocklist_drop drop",
                       f"ip6 saddr @blocklist6{sport} counter name blocklist_drop drop"]
        blocks += [f"ct mark set ct mark or {MARK_CHECKED:#x}"] if stateful else []
    if servers:
        pre += [
            "ip daddr . meta l4proto . th dport @servers4 counter name server_drop drop",
            "ip saddr . meta l4proto . th sport @servers4 counter name server_drop drop",
            "ip6 daddr . meta l4proto . th dport @servers6 counter name server_drop drop",
            "ip6 saddr . meta l4proto . th sport @servers6 counter name server_drop drop",
        ]
    if allowlist is not None:
        # Only listed destinations, or listed sources, reach the outside (Iran,
        # 2026): the check is on every packet from the client side, stateless.
        if not inside:
            raise DatapathError("an address allowlist needs the inside interface")
        if allowlist.match == "source":
            pre[1:1] = [f'iifname "{inside}" ip saddr != @allowlist4 ip daddr != @domestic4 '
                        "counter name allowlist_drop drop",
                        f'iifname "{inside}" ip6 saddr != @allowlist6 ip6 daddr != @domestic6 '
                        "counter name allowlist_drop drop"]
        else:
            pre[1:1] = [f'iifname "{inside}" ip daddr != @allowlist4 counter name '
                        "allowlist_drop drop",
                        f'iifname "{inside}" ip6 daddr != @allowlist6 counter name '
                        "allowlist_drop drop"]
    empty_chains = ""
    if skip_empty_tcp and dynamic:
        # Payload length is IP length minus both headers; nft cannot subtract, so a
        # verdict map on the TCP data offset jumps to a chain per header size that
        # knows the one IP length a segment with no payload has (no IP options).
        doffs = range(5, 16)
        not_syn = "" if watch_births else "tcp flags & (syn | ack) != syn "
        if watch_births:
            pre.append("ct state new meta l4proto tcp tcp flags & (syn | ack) == syn "
                       f"ct mark set ct mark or {MARK_BORN:#x}")
        pre.append(f"ct mark & {MARK_MASK:#x} == 0 meta l4proto tcp {not_syn}"
                   "tcp doff vmap { " + ", ".join(f"{d} : jump empty{d}" for d in doffs) + " }")
        empty_chains = "".join(
            f"  chain empty{d} {{\n"
            f"    ip hdrlength 5 ip length {20 + 4 * d} meta mark set meta mark | {MARK_EMPTY:#x}\n"
            f"    ip6 length {4 * d} meta mark set meta mark | {MARK_EMPTY:#x}\n  }}\n"
            for d in doffs)
    pre += blocks  # last: its fast path accepts
    post = [] if not dynamic else [
        f"meta mark & {MARK_MASK | MARK_PASS:#x} != 0 ct mark set meta mark & {FLOW_MASK:#x}",
        f"meta mark & {MARK_PASS:#x} == {MARK_PASS:#x} accept",
        # Residual blocking sits after the queue so the engine still sees new
        # connection attempts (Iran's filter restarts its timer on them).
        "ip saddr . ip daddr . meta l4proto . th dport @residual4 "
        "counter name residual_drop drop",
        "ip6 saddr . ip6 daddr . meta l4proto . th dport @residual6 "
        "counter name residual_drop drop",
        f"ct mark & {MARK_MASK:#x} == {MARK_DROP:#x} counter name flow_drop drop",
    ]
    if throttle is not None and dynamic:
        lim = (f"limit rate over {throttle.rate_bytes_s} bytes/second "
               f"burst {throttle.burst_bytes} bytes")
        post += [
            f"ct mark & {MARK_MASK:#x} == {MARK_THROTTLE:#x} meta nfproto ipv4 update "
            f"@police4 {{ ip saddr . ip daddr . meta l4proto . th sport . th dport {lim} }} "
            "counter name throttle_drop drop",
            f"ct mark & {MARK_MASK:#x} == {MARK_THROTTLE:#x} meta nfproto ipv6 update "
            f"@police6 {{ ip6 saddr . ip6 daddr . meta l4proto . th sport . th dport {lim} }} "
            "counter name throttle_drop drop",
        ]
    if freeze_bytes is not None and dynamic:
        # Conntrack counts the packet in hand before this hook: the server has
        # delivered at most freeze_bytes (IP bytes) when its packets start to vanish.
        # What vanishes is what goes to the client: for TCP that is the reply
        # direction; a WebRTC flow's conntrack direction is whoever sent first.
        to_client = (f'oifname "{inside}" ' if inside
                     else "ct direction reply ")
        post.append(f"{to_client}ct mark & {MARK_MASK:#x} == {MARK_FREEZE:#x} "
                    f"ct reply bytes > {int(freeze_bytes)} counter name freeze_drop drop")
    if loss_percent is not None and dynamic:
        # Random loss on marked flows, both ways (no netem here: nft's numgen).
        per_mille = max(0, min(1000, round(loss_percent * 10)))
        post.append(f"ct mark & {MARK_MASK:#x} == {MARK_LOSS:#x} numgen random mod 1000 < "
                    f"{per_mille} counter name loss_drop drop")
    counters = "\n  ".join(f"counter {n} {{}}" for n in ("forwarded", "new_flows", *BLOCK_COUNTERS))
    res = "flags timeout;"
    pre_rules = "\n    ".join(pre)
    post_chain = ""
    if post:
        post_rules = "\n    ".join(post)
        post_chain = ("  chain post {\n    type filter hook forward priority -100; "
                      "policy accept;\n    " + post_rules + "\n  }\n")
    return f"""table inet {TABLE}
delete table inet {TABLE}
table inet {TABLE} {{
  {counters}
  set blocklist4 {{ type ipv4_addr; flags interval;{elements(bl.v4)} }}
  set blocklist6 {{ type ipv6_addr; flags interval;{elements(bl.v6)} }}
  set allowlist4 {{ type ipv4_addr; flags interval;{elements(al.listed.v4)} }}
  set allowlist6 {{ type ipv6_addr; flags interval;{elements(al.listed.v6)} }}
  set domestic4 {{ type ipv4_addr; flags interval;{elements(al.domestic.v4)} }}
  set domestic6 {{ type ipv6_addr; flags interval;{elements(al.domestic.v6)} }}
  set servers4 {{ type ipv4_addr . inet_proto . inet_service; {res} }}
  set servers6 {{ type ipv6_addr . inet_proto . inet_service; {res} }}
  set residual4 {{ type ipv4_addr . ipv4_addr . inet_proto . inet_service; {res} }}
  set residual6 {{ type ipv6_addr . ipv6_addr . inet_proto . inet_service; {res} }}
  set police4 {{ type ipv4_addr . ipv4_addr . inet_proto . inet_service . inet_service;
    flags dynamic,timeout; timeout 10m; }}
  set police6 {{ type ipv6_addr . ipv6_addr . inet_proto . inet_service . inet_service;
    flags dynamic,timeout; timeout 10m; }}
{empty_chains}  chain pre {{
    type filter hook forward priority -200; policy accept;
    {pre_rules}
  }}
{post_chain}}}
"""


# iptables' names for the protocols an inspector may read.
PROTOCOL_NAMES = {6: "tcp", 17: "udp", 1: "icmp", 58: "ipv6-icmp", 132: "sctp"}


def queue_rules(q: QueueConfig) -> list[list[str]]:
    """iptables arguments (after ``-t mangle``) for the queue chain."""
    cond: list[str] = []
    if q.inspect_packets is not None:
        cond = ["-m", "connmark", "--mark", f"0/{MARK_MASK:#x}",
                "-m", "connbytes", "--connbytes", f"0:{q.inspect_packets}",
                "--connbytes-dir", "both", "--connbytes-mode", "packets"]
    if q.skip_empty_tcp:
        cond += ["-m", "mark", "!", "--mark", f"{MARK_EMPTY:#x}/{MARK_EMPTY:#x}"]
    births = q.watch_births and q.inspect_packets is not None
    # TCP under watch_births: only connections born under the ruleset (and undecided).
    tcp_cond = (cond[:3] + [f"{MARK_BORN:#x}/{MARK_MASK | MARK_BORN:#x}"] + cond[4:]
                if births else cond)
    if q.protocols is not None:
        variants = [["-p", PROTOCOL_NAMES.get(p, str(p)), *(tcp_cond if p == 6 else cond)]
                    for p in sorted(set(q.protocols))]
    elif births:
        variants = [["-p", "tcp", *tcp_cond], ["!", "-p", "tcp", *cond]]
    else:
        variants = [cond]
    def target(num: int) -> list[str]:
        if q.mechanism == "tap":
            return ["-j", "NFLOG", "--nflog-group", str(num), "--nflog-threshold",
                    str(q.tap_batch)]
        return ["-j", "NFQUEUE", "--queue-num", str(num)]

    rules = [["-A", CHAIN, "-i", q.inside, *c, *target(QUEUE_C2S)] for c in variants]
    if not q.client_side_only:
        rules += [["-A", CHAIN, "-i", q.outside, "-o", q.inside, *c, *target(QUEUE_S2C)]
                  for c in variants]
    return rules


def _run(argv: list[str], input: str | None = None, check: bool = True) -> str:
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=10)
    except FileNotFoundError as exc:
        pkg = "nftables" if argv[0] == "nft" else "iptables"
        raise DatapathError(f"missing system tool {argv[0]!r} (Debian package {pkg})") from exc
    if check and proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise DatapathError(f"{' '.join(argv[:4])}…: {err}")
    return proc.stdout


def _nft(args: list[str], input: str | None = None) -> str:
    return _run(["nft", *args], input=input)


def install(blocklist: Blocklist | None, queue: QueueConfig | None = None,
            throttle: Throttle | None = None, servers: bool = False,
            freeze_bytes: int | None = None, allowlist: Allowlist | None = None,
            inside: str | None = None, loss_percent: float | None = None,
            dynamic: bool | None = None) -> None:
    """The censor's table, and its queue or tap rules. ``dynamic`` (the flow marks
    and residual sets) defaults to whether there is a queue; the kernel fast path
    (censor_sim.bpf) has none and asks for it."""
    _nft(["-f", "-"], input=ruleset(blocklist, throttle,
                                    dynamic=queue is not None if dynamic is None else dynamic,
                                    servers=servers, freeze_bytes=freeze_bytes,
                                    allowlist=allowlist,
                                    inside=inside or (queue.inside if queue else None),
                                    loss_percent=loss_percent,
                                    skip_empty_tcp=bool(queue and queue.skip_empty_tcp),
                                    watch_births=bool(queue and queue.watch_births)))
    if queue is not None:
        remove_queue()
        for tool in ("iptables", "ip6tables"):
            _run([tool, "-t", "mangle", "-N", CHAIN])
            for rule in queue_rules(queue):
                _run([tool, "-t", "mangle", *rule])
            _run([tool, "-t", "mangle", "-I", "FORWARD", "-m", "comment", "--comment", CHAIN,
                  "-j", CHAIN])


def remove_queue() -> None:
    for tool in ("iptables", "ip6tables"):
        jump = [tool, "-t", "mangle", "-D", "FORWARD", "-m", "comment", "--comment", CHAIN,
                "-j", CHAIN]
        for _ in range(4):  # tolerate duplicates left by a crash
            if subprocess.run(jump, capture_output=True).returncode != 0:
                break
        subprocess.run([tool, "-t", "mangle", "-F", CHAIN], capture_output=True)
        subprocess.run([tool, "-t", "mangle", "-X", CHAIN], capture_output=True)
        # iptables-nft created the mangle table for us; leave no empty table behind.
        rules = subprocess.run([tool, "-t", "mangle", "-S"], capture_output=True, text=True)
        if rules.returncode == 0 and all(line.startswith("-P ") and line.endswith(" ACCEPT")
                                         for line in rules.stdout.splitlines()):
            fam = "ip" if tool == "iptables" else "ip6"
            subprocess.run(["nft", "delete", "table", fam, "mangle"], capture_output=True)


def remove() -> None:
    remove_queue()
    subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True)


UDP_TIMEOUTS = ("/proc/sys/net/netfilter/nf_conntrack_udp_timeout",
                "/proc/sys/net/netfilter/nf_conntrack_udp_timeout_stream")
ACCOUNTING = "/proc/sys/net/netfilter/nf_conntrack_acct"


def set_sysctls(values: dict[str, int]) -> dict[str, str]:
    """Write sysctls of this namespace; returns the old values for restore_sysctls."""
    old = {}
    for path, value in values.items():
        try:
            with open(path) as f:
                old[path] = f.read().strip()
            with open(path, "w") as f:
                f.write(str(int(value)))
        except OSError as exc:
            raise DatapathError(f"cannot set {path}: {exc}") from exc
    return old


def set_udp_timeout(seconds: int) -> dict[str, str]:
    """Let a UDP flow's conntrack entry (and so its offloaded verdict) die after
    `seconds` of silence, in this namespace only; returns the old values.

    The GFW's QUIC censor treats a flow unseen for 60 s as new (docs/censors/quic.md
    §3.1); with the kernel's 120 s for a flow that had replies, a flow silent for
    61 s would stay offloaded and its next first datagram would go unjudged.
    """
    return set_sysctls({p: seconds for p in UDP_TIMEOUTS})


def restore_sysctls(old: dict[str, str]) -> None:
    for path, value in old.items():
        try:
            with open(path, "w") as f:
                f.write(value)
        except OSError:
            pass  # the namespace is going away, or was never ours to change


def _fam(addr: str) -> str:
    return "4" if ipaddress.ip_address(addr).version == 4 else "6"


def add_residual(client: str, server: str, proto: int, port: int, seconds: float,
                 refresh: bool = True) -> None:
    """Block client→server:port for `seconds`; an existing entry restarts its timer."""
    elem = f"{{ {client} . {server} . {proto} . {port} timeout {max(int(seconds * 1000), 1)}ms }}"
    bare = f"{{ {client} . {server} . {proto} . {port} }}"
    s = f"residual{_fam(client)}"
    script = f"add element inet {TABLE} {s} {elem}\n"
    if refresh:  # add (so it exists), delete, add afresh: one atomic transaction
        script += f"delete element inet {TABLE} {s} {bare}\nadd element inet {TABLE} {s} {elem}\n"
    _nft(["-f", "-"], input=script)


def block_server(server: str, proto: int, port: int, seconds: float | None = None) -> None:
    timeout = f" timeout {int(seconds)}s" if seconds else ""
    _nft(["add", "element", "inet", TABLE, f"servers{_fam(server)}",
          f"{{ {server} . {proto} . {port}{timeout} }}"])


def counters() -> dict[str, dict[str, int]]:
    """Every named counter of the table: {name: {"packets": n, "bytes": n}}."""
    data = json.loads(_nft(["-j", "list", "counters", "table", "inet", TABLE]))
    out: dict[str, dict[str, int]] = {}
    for item in data.get("nftables", []):
        c = item.get("counter")
        if c and c.get("table") == TABLE:
            out[c["name"]] = {"packets": c.get("packets", 0), "bytes": c.get("bytes", 0)}
    return out
