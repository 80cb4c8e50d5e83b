"""The obfs4 transport: client and server factories over the layers of this package.

Probe resistance, stricter than obfs4proxy's. obfs4proxy closes every
unauthenticated connection with a FIN at one per-bridge time in [30, 90) s,
which is the signature Frolov et al. use to find obfs4 bridges. Our server:

- never sends a byte to a peer that has not proved knowledge of the bridge's
  cert (no handshake, a bad MAC, a replayed handshake, trailing bytes: all the same);
- reads and discards whatever such a peer sends, without any size or
  content threshold;
- closes only when the peer closes, or at ``unauth_timeout_s`` (300 s by
  default) plus a per-connection random jitter of up to ``unauth_jitter_s``,
  so no two probes see the same close time and none sees one in 300 s;
- keeps at most ``max_unauthenticated`` such connections; past the cap the
  oldest one is closed (documented: a cap keeps a flood from exhausting the
  server, and under a flood the close time is no longer a per-bridge constant).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import socket
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ..base import (
    BOTH_ROLES,
    ClientFactory,
    Streams,
    StreamServerFactory,
    Transport,
    TransportError,
)
from ..common.drbg import DrbgSeed
from ..common.elligator2 import (
    Keypair,
    new_keypair,
    public_key_from_private,
    without_high_bits,
)
from ..common.ntor import derive_session_keys
from ..common.replayfilter import ReplayFilter
from ..common.silence import Gatekeeper, ServerPolicy
from .framing import Decoder, Encoder
from .handshake import (
    MAX_HANDSHAKE_LENGTH,
    ClientHandshake,
    HandshakeError,
    ServerKey,
    parse_client_hello,
    server_response,
)
from .packet import PacketEncoder
from .session import Shaping, attach
from .statefile import ClientArgs, ServerState, load_or_create

CLIENT_HANDSHAKE_TIMEOUT_S = 60.0  # obfs4proxy's, covering dial and handshake
READ_SIZE = 8192

# ``first-segment=N``: a ptlab-only client argument (obfs4proxy has none).
FIRST_SEGMENT_ARG = "first-segment"
MAX_FIRST_SEGMENT = 1448  # one full-sized segment at a 1500-byte MTU with timestamps
SIOCOUTQNSD = 0x894B  # Linux: bytes in the send queue not yet sent (<linux/sockios.h>)
SEND_WAIT_S = 0.2  # how long to wait for the first segment to leave, at most
SEND_POLL_S = 0.001


def parse_first_segment(value: str | None) -> int:
    """The ``first-segment`` client argument: 0 (off, also when absent) or 1..1448.

    Raises ValueError naming the argument for anything else.
    """
    if value is None:
        return 0
    try:
        n = int(value.strip(), 10)
    except ValueError:
        raise ValueError(f"{FIRST_SEGMENT_ARG}: {value!r} is not an integer") from None
    if not 0 <= n <= MAX_FIRST_SEGMENT:
        raise ValueError(f"{FIRST_SEGMENT_ARG}: {n} is out of range "
                         f"(0 = off, or 1..{MAX_FIRST_SEGMENT})")
    return n


def _unsent_bytes(sock: socket.socket) -> int | None:
    """Bytes queued on ``sock`` that TCP has not yet sent; None where unsupported."""
    try:
        out = fcntl.ioctl(sock.fileno(), SIOCOUTQNSD, b"\0" * 4)
    except (OSError, ValueError):
        return None
    return struct.unpack("i", out)[0]


async def send_split(writer: asyncio.StreamWriter, data: bytes, first: int) -> None:
    """Write ``data`` with its first ``first`` bytes in a TCP segment of their own.

    Why: first-packet tests (Wang et al., CCS 2015, whose entropy/length test
    skips a first client payload shorter than 149 bytes) classify a flow by its
    first data segment, which otherwise carries the whole obfs4 hello (>= 141
    bytes of uniform randomness). The peer reads the same byte stream; only the
    TCP segmentation changes, so any obfs4 server (ours, obfs4proxy) accepts it.

    How: TCP_NODELAY keeps Nagle from holding the rest back for a round trip
    until the first segment is acked (asyncio sets it already; we make sure).
    That is not enough: Linux's TCP autocorking (net.ipv4.tcp_autocorking) can
    hold a small write while an earlier packet still sits in the qdisc or the
    device queue, and a write that follows is appended to the same skb, i.e.
    goes out in the same segment. So after the first write has
    drained into the kernel we poll SIOCOUTQNSD (bytes queued but not yet sent)
    until it reads 0, for at most SEND_WAIT_S (200 ms), before writing the rest.
    Where the ioctl is unavailable we sleep a few milliseconds instead. Past the
    bound we write anyway (best effort; the stream is correct either way). A
    retransmission may collapse the two segments, as with any TCP data.

    Cost: one extra packet (its TCP/IP headers), zero extra payload bytes.
    With ``first`` <= 0 or >= len(data) this is a plain single write.
    """
    if first <= 0 or first >= len(data):
        writer.write(data)
        await writer.drain()
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    writer.write(data[:first])
    await writer.drain()
    if sock is not None:
        await _wait_transmitted(sock)
    writer.write(data[first:])
    await writer.drain()


async def _wait_transmitted(sock: socket.socket) -> None:
    """Until the kernel has sent everything queued on ``sock``, at most SEND_WAIT_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SEND_WAIT_S
    while True:
        unsent = _unsent_bytes(sock)
        if unsent is None:  # not Linux (or no such ioctl): a short fixed pause
            await asyncio.sleep(0.005)
            return
        if unsent <= 0 or loop.time() >= deadline:
            return
        await asyncio.sleep(SEND_POLL_S)


class Obfs4ClientFactory:
    """Dials obfs4 bridges with one (node id, identity key, iat-mode).

    ``first_segment`` (the ``first-segment`` client argument; 0 = off) sends the
    first that many bytes of the client hello as a TCP segment of their own: see
    :func:`send_split`.
    """

    def __init__(self, node_id: bytes, id_public: bytes, iat_mode: int,
                 timeout_s: float = CLIENT_HANDSHAKE_TIMEOUT_S,
                 first_segment: int = 0, legacy_representatives: bool = False) -> None:
        self.node_id, self.id_public, self.iat_mode = node_id, id_public, iat_mode
        self.timeout_s = timeout_s
        self.first_segment = first_segment
        # For peers with a pre-0.0.12 Elligator2 decoder (Conjure's obfs4 fork):
        # representatives with their padding bits clear (elligator2.without_high_bits).
        self.legacy_representatives = legacy_representatives

    async def dial(self, host: str, port: int) -> Streams:
        # The hello is made before the connection, so it follows the TCP handshake at
        # once: a pause there (0.5 ms for the Elligator key) is something a censor
        # can time, and a server under a flood evicts the unexamined first.
        keypair = new_keypair(elligator=True)
        if self.legacy_representatives:
            keypair = without_high_bits(keypair)
        hs = ClientHandshake(self.node_id, self.id_public, keypair)
        hello = hs.generate()
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    return await self._handshake(reader, writer, hs, hello)
                except BaseException:
                    writer.close()
                    raise
        except TimeoutError:
            raise TransportError(f"obfs4 handshake with {host}:{port} timed out") from None
        except asyncio.IncompleteReadError:
            raise TransportError(f"obfs4 bridge {host}:{port} closed during the handshake") \
                from None

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         hs: ClientHandshake, hello: bytes) -> Streams:
        await send_split(writer, hello, self.first_segment)
        buf = bytearray()
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise TransportError("obfs4 bridge closed during the handshake")
            buf += data
            try:
                done = hs.parse_server_response(bytes(buf))
            except HandshakeError as exc:
                raise TransportError(f"obfs4 handshake failed: {exc}") from None
            if done is not None:
                break
        consumed, key_seed = done
        c2s, s2c = derive_session_keys(key_seed)
        # Until the server's PRNG seed arrives, shape with a seed of our own.
        shaping = Shaping.from_seed(bytes(DrbgSeed.new()), self.iat_mode)
        return attach(reader, writer, bytes(buf[consumed:]), Encoder(c2s), Decoder(s2c),
                      shaping, is_server=False)


class Obfs4ServerFactory:
    """Accepts obfs4 for any of a set of server keys; silent to everyone else."""

    def __init__(self, keys: Sequence[ServerKey], drbg_seed: bytes, iat_mode: int,
                 policy: ServerPolicy | None = None,
                 clock: Callable[[], float] = time.time,
                 legacy_representatives: bool = False) -> None:
        if not keys:
            raise TransportError("obfs4 server needs at least one key")
        self.legacy_representatives = legacy_representatives  # as the client's
        self.keys = list(keys)
        self.len_seed = bytes(drbg_seed)
        self.iat_mode = iat_mode
        self.policy = policy or ServerPolicy()
        self.clock = clock
        self.replay = ReplayFilter()
        self.gate = Gatekeeper(self.policy)
        self.failures: collections.Counter[str] = collections.Counter()
        self.state: ServerState | None = None

    def smethod_args(self) -> dict[str, str]:
        if self.state is None:
            return {}
        return {"cert": self.state.cert, "iat-mode": str(self.iat_mode)}

    async def wrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   initial: bytes = b"") -> Streams:
        """Run the server handshake; ``initial`` is what was already read from the
        connection (Conjure's station reads it to find the registration)."""
        start = asyncio.get_running_loop().time()
        with self.gate.admitted(writer, reader):
            try:
                hello, buf = await asyncio.wait_for(self._read_hello(reader, writer, initial),
                                                    self.policy.handshake_timeout_s)
            except (HandshakeError, TimeoutError, asyncio.IncompleteReadError) as exc:
                reason = type(exc).__name__ if not str(exc) else str(exc)
                self.failures[reason.split(":")[0]] += 1
                await self.gate.stay_silent(reader, writer, start)
                raise TransportError(f"obfs4 handshake failed: {reason}") from None
        keypair = new_keypair(elligator=True)
        if self.legacy_representatives:
            keypair = without_high_bits(keypair)
        response, key_seed = server_response(hello, keypair)
        c2s, s2c = derive_session_keys(key_seed)
        enc = Encoder(s2c)
        # The response and our PRNG seed go out in one write, as obfs4proxy's do.
        writer.write(response + PacketEncoder(enc).encode_seed(self.len_seed))
        shaping = Shaping.from_seed(self.len_seed, self.iat_mode)
        return attach(reader, writer, bytes(buf[hello.consumed:]), enc, Decoder(c2s),
                      shaping, is_server=True)

    async def _read_hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          initial: bytes = b""):
        buf = bytearray(initial)
        while True:
            if buf:
                hello = parse_client_hello(bytes(buf), self.keys, self.clock(), self.replay)
                if hello is not None:
                    return hello, buf
                if len(buf) > MAX_HANDSHAKE_LENGTH:
                    raise HandshakeError("no valid mark in the maximum handshake length")
                self.gate.examined(writer)
            data = await reader.read(READ_SIZE)
            if not data:
                raise HandshakeError("EOF before a valid handshake")
            buf += data

    @property
    def unauthenticated(self) -> dict[int, asyncio.StreamWriter]:
        return self.gate.unauthenticated


class Obfs4(Transport):
    """obfs4, registered as ``obfs4``."""

    roles = BOTH_ROLES

    def client_factory(self, state_dir: Path | None, args: Mapping[str, str]) -> ClientFactory:
        try:
            parsed = ClientArgs.parse(args)
            first_segment = parse_first_segment(args.get(FIRST_SEGMENT_ARG))
        except ValueError as exc:
            raise TransportError(f"obfs4 client arguments: {exc}") from None
        return Obfs4ClientFactory(parsed.node_id, parsed.public_key, parsed.iat_mode,
                                  first_segment=first_segment)

    def server_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> StreamServerFactory:
        if state_dir is None:
            raise TransportError("obfs4 server needs a state directory")
        iat = args.get("iat-mode")
        try:
            state = load_or_create(state_dir, iat_mode=int(iat) if iat is not None else None,
                                   args=args)
        except ValueError as exc:
            raise TransportError(f"obfs4 server state: {exc}") from None
        identity = Keypair(state.identity_private,
                           public_key_from_private(state.identity_private))
        try:
            policy = ServerPolicy.from_options(args)
        except ValueError as exc:
            raise TransportError(f"obfs4 server options: {exc}") from None
        factory = Obfs4ServerFactory([ServerKey(state.node_id, identity)], state.drbg_seed,
                                     state.iat_mode, policy)
        factory.state = state
        return factory


TRANSPORT = Obfs4("obfs4")
