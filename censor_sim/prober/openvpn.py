"""Xue et al. 2022's active probes for OpenVPN over TCP, and their decision chain.

Source: "OpenVPN is Open to VPN Fingerprinting", USENIX Security 2022, §6.3, Table 1
and Appendix Figure 11 (docs/censors/vpn.md §2.4). OpenVPN over TCP reads a 16-bit
length and then waits for that many bytes before it checks anything, so:

* **Base Probe 1**, a typical 16-byte client reset (``00 0e 38``, an 8-byte session
  id, five zero bytes), is complete: a server without tls-auth answers with its own
  server reset; one with tls-auth fails the HMAC and closes at once (short close);
* **Base Probe 2**, the same less its last byte, is one byte short: the server waits
  for it until its handshake timeout (long close);
* the length-validity probes: ``\\r\\n\\r\\n`` (length 3338, above max_len 1627),
  two zero bytes (length 0) and Epmd's ``00 01 6e`` are refused at once (short
  close); one zero byte is half a length, so the server waits (long close);
* 2,000 random bytes overflow the ~1,550–1,660-byte buffer: a RST;
* SSH, HTTP and TLS probes, sent after the base probes: an answer to any of them
  means the port is shared with another service, which the paper left to manual
  analysis.

The paper gives no seconds for "short" and "long"; here a short close is one within
``short_s`` (2 s by default) and a long one is no close within the prober's watch, or
a close after ``long_s``. With OpenVPN's default handshake window of 60 s a long
close takes a minute; a lab prober that watches for 3 s sees it as a timeout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .observe import ProbeResult, SockFactory, run_suite
from .probes import Probe, tls_client_hello

SERVER_RESET_OPCODES = (2, 8)  # P_CONTROL_HARD_RESET_SERVER_V1 and _V2
SHORT_S = 2.0

OPENVPN = "openvpn"  # an explicit server reset, or every reaction as OpenVPN's
PORT_SHARED = "port-shared"  # the base probes fit, and SSH, HTTP or TLS got an answer
NOT_OPENVPN = "not-openvpn"
UNREACHABLE = "unreachable"


def base_probes(rng: random.Random) -> list[Probe]:
    reset = b"\x00\x0e\x38" + rng.randbytes(8) + b"\x00" * 5
    return [Probe("BaseProbe1", reset), Probe("BaseProbe2", reset[:-1])]


def protocol_probes(seed: int = 0) -> list[Probe]:
    return [Probe("SSH", b"SSH-2.0-OpenSSH_8.1\r\n"),
            Probe("HTTP-GET", b"GET / HTTP/1.0\r\n\r\n"),
            Probe("TLS", tls_client_hello("example.com", seed))]


def length_probes(rng: random.Random) -> list[Probe]:
    return [Probe("TCP-Generic", b"\r\n\r\n"), Probe("One-Zero", b"\x00"),
            Probe("Two-Zero", b"\x00\x00"), Probe("Epmd", b"\x00\x01\x6e"),
            Probe("2K-Random", rng.randbytes(2000))]


def server_reset(data: bytes) -> bool:
    """A framed OpenVPN server reset: a 16-bit length that fits, then its opcode."""
    return (len(data) >= 3 and 10 <= (data[0] << 8 | data[1]) <= 1627
            and data[2] >> 3 in SERVER_RESET_OPCODES)


def short_close(r: ProbeResult, short_s: float = SHORT_S) -> bool:
    return (r.connected and not r.response_len and r.close in ("FIN", "RST")
            and r.close_after_s is not None and r.close_after_s <= short_s)


def long_close(r: ProbeResult, long_s: float) -> bool:
    if not r.connected or r.response_len:
        return False
    return r.close == "TIMEOUT" or (r.close_after_s is not None and r.close_after_s >= long_s)


@dataclass
class Verdict:
    label: str
    reason: str
    results: list[ProbeResult]


def decide(results: dict[str, ProbeResult], short_s: float = SHORT_S,
           long_s: float = 10.0) -> tuple[str, str] | None:
    """The chain of Figure 11 over the results so far; None while it needs more."""
    b1, b2 = results.get("BaseProbe1"), results.get("BaseProbe2")
    if b1 is None or b2 is None:
        return None
    if not b1.connected:
        return UNREACHABLE, "the base probe could not connect"
    if server_reset(b1.response):
        return OPENVPN, "an explicit server reset to Base Probe 1"
    if not short_close(b1, short_s):
        return NOT_OPENVPN, "Base Probe 1 was not closed at once"
    if not long_close(b2, long_s):
        return NOT_OPENVPN, "Base Probe 2 was not held open"
    protocol = [results.get(n) for n in ("SSH", "HTTP-GET", "TLS")]
    if any(r is None for r in protocol):
        return None
    if any(r is not None and r.response_len for r in protocol):
        return PORT_SHARED, "SSH, HTTP or TLS got an answer: another service shares the port"
    names = ("TCP-Generic", "One-Zero", "Two-Zero", "Epmd", "2K-Random")
    rest = {n: r for n in names if (r := results.get(n)) is not None}
    if len(rest) < len(names):
        return None
    want = {"TCP-Generic": short_close(rest["TCP-Generic"], short_s),
            "One-Zero": long_close(rest["One-Zero"], long_s),
            "Two-Zero": short_close(rest["Two-Zero"], short_s),
            "Epmd": short_close(rest["Epmd"], short_s),
            "2K-Random": rest["2K-Random"].close == "RST"}
    failed = [n for n, ok in want.items() if not ok]
    if failed:
        return NOT_OPENVPN, f"{failed[0]} did not react as OpenVPN does"
    return OPENVPN, "every probe's reaction was OpenVPN's (Table 1)"


async def investigate(host: str, port: int, *, watch_s: float = 10.0, seed: int = 0,
                      short_s: float = SHORT_S, sock_factory: SockFactory | None = None
                      ) -> Verdict:
    """The probes in the paper's order, stage by stage, stopping when decided: the base
    probes, then SSH/HTTP/TLS, then the length probes (2 to 10 connections)."""
    rng = random.Random(seed)
    results: dict[str, ProbeResult] = {}
    sent: list[ProbeResult] = []
    for stage in (base_probes(rng), protocol_probes(seed), length_probes(rng)):
        for r in await run_suite(host, port, stage, watch_s=watch_s,
                                 sock_factory=sock_factory):
            results[r.probe] = r
            sent.append(r)
        decided = decide(results, short_s, long_s=watch_s)
        if decided is not None:
            return Verdict(*decided, sent)
    return Verdict(NOT_OPENVPN, "undecided", sent)  # not reached: the last stage decides
