"""Conjure's keys and phantom selection (docs/transports/conjure.md §3; conjure
``pkg/core``, ``pkg/phantoms``).

Client and station derive the same phantom address, and port, from the shared
secret without ever sending them, so a censor would have to invert a hash to
know which unused address a client is about to contact:

* :func:`derive_keys`: HKDF-SHA256 over the shared secret with the salt
  ``"conjureconjureconjureconjure"`` and no info gives one byte stream. For
  client library version 4 and later the 16-byte Conjure seed is its first 16
  bytes, and what follows feeds the transports' keys (obfs4's identity, ...);
  older clients take the seed at bytes 104-120.
* :func:`select_phantom` (selection version 2+, HKDF): pick one weighted subnet
  group (groups sorted by weight, ascending; one draw below the total weight
  from HKDF(seed, info "phantom-select-subnet"), weights subtracted in order
  until negative); keep its IPv4 or its IPv6 subnets; draw an address index
  below the total size of those subnets from HKDF(seed, info
  "phantom-addr-id"), and count through the subnets in their listed order.
  Network and broadcast addresses are not excluded.
* :func:`select_port`: with a subnet group that allows it and a transport that
  asks for it, ``min + draw(HKDF(seed, info "phantom-select-dst-port"),
  65535 - min)``; otherwise the transport's port.

Draws are Go's ``crypto/rand.Int`` on the HKDF stream (k bytes, top byte masked
to the bit length of max-1, rejected and redrawn when >= max), so the station
and Conjure's own client agree with ours bit for bit. Selection versions 0 and
1 (client library versions before 2) seed Go's ``math/rand`` and need its
generator's 607-word table; they are refused with a clear error.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

CONJURE_SALT = b"conjureconjureconjureconjure"
SEED_LENGTH = 16
SHARED_KEYS_REFACTOR_MIN_VERSION = 4  # seed = the first 16 bytes of the stream
PHANTOM_HKDF_MIN_VERSION = 2
CURRENT_CLIENT_LIB_VERSION = 4
LEGACY_SEED_OFFSET = 104  # fsp_key, fsp_iv, vsp_key, vsp_iv, new master secret come first
_HKDF_MAX = 255 * 32

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class PhantomError(ValueError):
    """No phantom can be selected (bad configuration, unsupported version)."""


class HkdfStream:
    """An HKDF-SHA256 output read sequentially, like Go's ``hkdf.New`` reader."""

    def __init__(self, secret: bytes, salt: bytes | None, info: bytes) -> None:
        self.secret, self.salt, self.info = secret, salt, info
        self._buf = b""
        self.pos = 0

    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end > _HKDF_MAX:
            raise PhantomError("HKDF stream exhausted (255 blocks)")
        if end > len(self._buf):
            # HKDF-Expand's output for a longer length starts with the shorter one.
            size = min(_HKDF_MAX, max(end, 2 * len(self._buf), 64))
            self._buf = HKDF(hashes.SHA256(), size, self.salt, self.info).derive(self.secret)
        out = self._buf[self.pos:end]
        self.pos = end
        return out


def go_rand_int(stream: HkdfStream, maximum: int) -> int:
    """A uniform integer in [0, maximum) read the way Go's ``crypto/rand.Int`` reads."""
    if maximum <= 0:
        raise PhantomError("draw bound must be positive")
    bit_len = (maximum - 1).bit_length()
    if bit_len == 0:
        return 0
    k = (bit_len + 7) // 8
    top_bits = bit_len % 8 or 8
    while True:
        raw = bytearray(stream.read(k))
        raw[0] &= (1 << top_bits) - 1
        value = int.from_bytes(raw, "big")
        if value < maximum:
            return value


@dataclass(frozen=True)
class ConjureKeys:
    """What client and station share after a registration."""

    shared_secret: bytes
    seed: bytes
    transport_stream: HkdfStream  # what follows the seed (v4+): transport keys
    transport_offset: int = SEED_LENGTH  # where that stream starts


def derive_keys(shared_secret: bytes,
                client_lib_version: int = CURRENT_CLIENT_LIB_VERSION) -> ConjureKeys:
    stream = HkdfStream(shared_secret, CONJURE_SALT, b"")
    if client_lib_version < SHARED_KEYS_REFACTOR_MIN_VERSION:
        stream.read(LEGACY_SEED_OFFSET)
    seed = stream.read(SEED_LENGTH)
    return ConjureKeys(shared_secret, seed, stream, stream.pos)


def obfs4_identity(keys: ConjureKeys) -> tuple[bytes, bytes, bytes]:
    """(private key, public key, node id) of the registration's obfs4 server.

    Conjure reads them from the transport stream that follows the seed: 32 bytes
    of private key (clamped as X25519 clamps), then 20 bytes of node id; the
    public key is the clean X25519 public key. Both ends draw them in this order
    from a fresh stream, so each call gives the same identity.
    """
    from nacl.bindings import crypto_scalarmult_base

    stream = HkdfStream(keys.shared_secret, CONJURE_SALT, b"")
    stream.read(keys.transport_offset)
    private = bytearray(stream.read(32))
    private[0] &= 248
    private[31] &= 127
    private[31] |= 64
    node_id = stream.read(20)
    return bytes(private), crypto_scalarmult_base(bytes(private)), node_id


@dataclass(frozen=True)
class SubnetGroup:
    """One weighted group of phantom subnets (``PhantomSubnets`` in ClientConf)."""

    weight: int
    subnets: tuple[IPNetwork, ...]
    randomize_dst_port: bool = False

    @classmethod
    def parse(cls, weight: int, subnets: Iterable[str],
              randomize_dst_port: bool = False) -> SubnetGroup:
        try:
            nets = tuple(ipaddress.ip_network(s, strict=False) for s in subnets)
        except ValueError as exc:
            raise PhantomError(f"bad phantom subnet: {exc}") from None
        if not nets:
            raise PhantomError("a subnet group needs at least one subnet")
        if not isinstance(weight, int) or weight < 0:
            raise PhantomError(f"bad subnet weight {weight!r}")
        return cls(weight, nets, randomize_dst_port)


@dataclass(frozen=True)
class Phantom:
    address: IPAddress
    subnet: IPNetwork
    randomize_dst_port: bool


@dataclass
class PhantomConfig:
    """The phantom subnets of one generation (``phantom_subnets.toml``)."""

    groups: list[SubnetGroup] = field(default_factory=list)

    def choose_group(self, seed: bytes) -> SubnetGroup:
        choices = sorted(self.groups, key=lambda g: g.weight)  # ascending, as Conjure
        total = sum(g.weight for g in choices)
        if total <= 0:
            raise PhantomError("no weighted phantom subnets")
        r = go_rand_int(HkdfStream(seed, None, b"phantom-select-subnet"), total)
        for group in choices:
            r -= group.weight
            if r < 0:
                return group
        raise AssertionError("unreachable: r < total")


def select_address(seed: bytes, subnets: Sequence[IPNetwork]) -> tuple[IPAddress, IPNetwork]:
    """The address at a seeded index over ``subnets`` in their listed order."""
    total = sum(n.num_addresses for n in subnets)
    if total <= 0:
        raise PhantomError("no valid addresses specified")
    index = go_rand_int(HkdfStream(seed, None, b"phantom-addr-id"), total)
    for net in subnets:
        if index < net.num_addresses:
            return net.network_address + index, net
        index -= net.num_addresses
    raise AssertionError("unreachable: index < total")


def select_phantom(seed: bytes, config: PhantomConfig, v6: bool,
                   client_lib_version: int = CURRENT_CLIENT_LIB_VERSION) -> Phantom:
    """The phantom for ``seed`` in one address family (the station runs both)."""
    if client_lib_version < PHANTOM_HKDF_MIN_VERSION:
        raise PhantomError(f"phantom selection for client library version {client_lib_version} "
                           "(Go math/rand based) is not supported; version 2+ is")
    group = config.choose_group(seed)
    family = 6 if v6 else 4
    nets = [n for n in group.subnets if n.version == family]
    address, net = select_address(seed, nets)
    return Phantom(address, net, group.randomize_dst_port)


# Transports' ports (pkg/transports): the default port, and the floor of a random one.
DEFAULT_PORTS = {"min": 443, "prefix": 443, "obfs4": 443, "dtls": 443}
RANDOM_PORT_MIN = {"min": 1024, "prefix": 1024, "obfs4": 22, "dtls": 1024}
FIXED_PORT = 443  # every transport's port where the subnet group allows no other
RANDOM_PORT_MIN_VERSION = 3  # client library version that may leave port 443


def select_port(seed: bytes, transport: str, phantom: Phantom, randomize: bool,
                default_port: int | None = None,
                client_lib_version: int = CURRENT_CLIENT_LIB_VERSION) -> int:
    """The phantom port, as conjure v0.7.10's station (``getPhantomDstPort``) and
    gotapdance v1.7.10's client (``UnidirectionalRegData``) choose it:

    * **443** for every transport, the prefix's included, unless the subnet group
      allows other ports (``randomize_dst_port`` in the ClientConf) and the client
      library is version 3 or later;
    * where it does, the transport decides: random above its floor when its
      parameters ask, else its own port (a prefix's: 80 for HTTP, 22 for SSH...).

    Ours once gave a prefix its own port in every group; Conjure's client then
    dialled 443 (docs/transports/conjure.md §9)."""
    if transport not in DEFAULT_PORTS:
        raise PhantomError(f"unknown transport {transport!r}")
    if client_lib_version < RANDOM_PORT_MIN_VERSION or not phantom.randomize_dst_port:
        return FIXED_PORT
    if randomize:
        low = RANDOM_PORT_MIN[transport]
        return low + go_rand_int(HkdfStream(seed, None, b"phantom-select-dst-port"), 65535 - low)
    return default_port if default_port is not None else DEFAULT_PORTS[transport]
