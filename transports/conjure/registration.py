"""Conjure registrations: what a client sends, and the station's table of them.

A client picks a fresh 32-byte shared secret and sends it, with the transport
it will speak and the covert address it wants, in a ``C2SWrapper`` (an API
registration: ``POST /api/register`` over HTTPS, docs/transports/conjure.md §2.2-§2.3).
Both ends then derive the same seed (:mod:`.phantom`), so the phantom address
and port are never sent.

:class:`Registry` is the station's side:

* it validates a registration (secret length, a supported transport and
  selection version, a covert address with exactly one ``:`` that is not on
  the covert blocklist) and derives the phantoms for the families the client
  supports and the station serves;
* a secret is accepted once: the same secret again, from the same or another
  source address, is a replay and is refused;
* a registration lives 10 minutes if unused and 6 hours from its first use
  (both configurable), on an injectable clock; :meth:`Registry.expire` drops
  the dead ones and returns them, so the station can remove their rules;
* lookups go by (client address, phantom, port) for IPv4 and by (phantom,
  port) for IPv6, as Conjure's detector keys its sessions.

Decoy registration (a tag hidden in TLS to a decoy site the station taps) is
not built: it needs the station to see inside decoy TLS flows and the client to
steer TLS ciphertext bits through uTLS, which Python's TLS stacks cannot do.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from google.protobuf.message import DecodeError

from transports.common.elligator2 import Keypair
from transports.obfs4.handshake import ServerKey

from . import signalling as sig
from .phantom import (
    CURRENT_CLIENT_LIB_VERSION,
    PHANTOM_HKDF_MIN_VERSION,
    ConjureKeys,
    Phantom,
    PhantomConfig,
    PhantomError,
    derive_keys,
    obfs4_identity,
    select_phantom,
    select_port,
)
from .wrapping import PREFIXES

if TYPE_CHECKING:
    from google.protobuf import any_pb2

SECRET_LENGTH = 32
UNUSED_TIMEOUT_S = 600.0
ACTIVE_TIMEOUT_S = 6 * 3600.0
TRANSPORTS = ("min", "prefix", "obfs4")
TRANSPORT_BY_NUMBER = {sig.TRANSPORT_TYPES[t]: t for t in TRANSPORTS}
MAX_REGISTRATION = 16 * 1024

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RegistrationError(ValueError):
    """A registration the station refuses; the message says why."""


class _WithTransportParams(Protocol):
    """What :meth:`Registry._params` reads of a ``ClientToStation``, whose class
    :mod:`.signalling` builds from a descriptor at run time (so no type states it)."""

    @property
    def transport_params(self) -> any_pb2.Any: ...

    def HasField(self, field_name: str) -> bool: ...


def new_secret() -> bytes:
    return os.urandom(SECRET_LENGTH)


def build_registration(secret: bytes, transport: str, covert: str, generation: int,
                       v4: bool = True, v6: bool = False, randomize_port: bool = False,
                       prefix_id: int | None = None,
                       client_lib_version: int = CURRENT_CLIENT_LIB_VERSION) -> bytes:
    """A serialized ``C2SWrapper`` for an API registration."""
    if transport not in TRANSPORTS:
        raise RegistrationError(f"unknown transport {transport!r} (known: {', '.join(TRANSPORTS)})")
    payload = sig.ClientToStation(
        protocol_version=0, decoy_list_generation=generation,
        client_lib_version=client_lib_version, transport=sig.TRANSPORT_TYPES[transport],
        covert_address=covert, v4_support=v4, v6_support=v6)
    if transport == "prefix":
        params = sig.PrefixTransportParams(randomize_dst_port=randomize_port,
                                           prefix_id=prefix_id or 0)
    else:
        params = sig.GenericTransportParams(randomize_dst_port=randomize_port)
    payload.transport_params.Pack(params)
    payload.transport_params.type_url = ""  # as the Go client does, to save space
    return sig.C2SWrapper(shared_secret=secret, registration_payload=payload,
                          registration_source=sig.SOURCE_API).SerializeToString()


@dataclass
class Registration:
    secret: bytes
    keys: ConjureKeys
    client: IPAddress
    transport: str
    covert: str
    phantoms: list[Phantom]
    port: int
    randomize_port: bool
    prefix_id: int
    created: float
    first_use: float | None = None
    obfs4_key: ServerKey | None = None  # the obfs4 server identity (obfs4 transport)

    def expires_at(self, unused_s: float, active_s: float) -> float:
        if self.first_use is None:
            return self.created + unused_s
        return self.first_use + active_s


def _covert(address: str, blocked: Callable[[str], bool]) -> str:
    if address.count(":") != 1 and not address.startswith("["):
        raise RegistrationError("covert address must be HOST:PORT with exactly one ':'")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RegistrationError(f"bad covert address {address!r}")
    if blocked(host.strip("[]")):
        raise RegistrationError(f"covert address {address!r} is not allowed")
    return address


@dataclass
class Registry:
    """The station's registrations (see the module doc)."""

    phantoms: PhantomConfig
    generation: int
    covert_blocked: Callable[[str], bool] = lambda _host: False
    clock: Callable[[], float] = time.monotonic
    unused_timeout_s: float = UNUSED_TIMEOUT_S
    active_timeout_s: float = ACTIVE_TIMEOUT_S
    serve_v6: bool = True
    _by_key: dict[tuple, list[Registration]] = field(default_factory=dict)
    _seen: set[bytes] = field(default_factory=set)

    def register(self, data: bytes, source: str) -> Registration:
        """Parse and admit one API registration from ``source`` (the client's address)."""
        if len(data) > MAX_REGISTRATION:
            raise RegistrationError("registration too large")
        wrapper = sig.C2SWrapper()
        try:
            wrapper.ParseFromString(data)
        except DecodeError:
            raise RegistrationError("not a C2SWrapper") from None
        secret = wrapper.shared_secret
        if len(secret) != SECRET_LENGTH:
            raise RegistrationError(f"shared secret must be {SECRET_LENGTH} bytes")
        if not wrapper.HasField("registration_payload"):
            raise RegistrationError("no registration payload")
        c2s = wrapper.registration_payload
        try:
            client = ipaddress.ip_address(source)
        except ValueError:
            raise RegistrationError(f"bad source address {source!r}") from None
        if secret in self._seen:
            raise RegistrationError("replayed registration (this secret was registered before)")
        version = c2s.client_lib_version
        if version < PHANTOM_HKDF_MIN_VERSION:
            raise RegistrationError(f"client library version {version} is not supported")
        if c2s.decoy_list_generation != self.generation:
            raise RegistrationError(f"unknown phantom generation {c2s.decoy_list_generation}")
        transport = TRANSPORT_BY_NUMBER.get(c2s.transport)
        if transport is None:
            raise RegistrationError(f"unsupported transport {c2s.transport}")
        covert = _covert(c2s.covert_address, self.covert_blocked)
        randomize, prefix_id = self._params(c2s, transport)
        keys = derive_keys(secret, version)
        families = []  # False: IPv4, True: IPv6; a client that says neither means IPv4
        # IPv4 phantoms are keyed by the client's address, so only a registration that
        # came from the client's IPv4 address can have one.
        if (c2s.v4_support or not c2s.v6_support) and client.version == 4:
            families.append(False)
        if c2s.v6_support and self.serve_v6:
            families.append(True)
        if not families:
            raise RegistrationError("no phantom family fits: an IPv4 phantom needs the "
                                    "registration to come from the client's IPv4 address")
        try:
            phantoms = [select_phantom(keys.seed, self.phantoms, v6, version) for v6 in families]
        except PhantomError as exc:
            raise RegistrationError(str(exc)) from None
        if transport == "prefix" and prefix_id not in PREFIXES:
            raise RegistrationError(f"unknown prefix {prefix_id}")
        default_port = PREFIXES[prefix_id][1] if transport == "prefix" else None
        # One port for the registration: the group's policy is the same in both families.
        port = select_port(keys.seed, transport, phantoms[0], randomize, default_port,
                           version)
        obfs4_key = None
        if transport == "obfs4":
            private, public, node_id = obfs4_identity(keys)
            obfs4_key = ServerKey(node_id, Keypair(private, public, None))
        reg = Registration(secret, keys, client, transport, covert, phantoms, port, randomize,
                           prefix_id, self.clock(), obfs4_key=obfs4_key)
        self._seen.add(secret)
        for phantom in phantoms:
            self._by_key.setdefault(self._key(client, phantom.address, port), []).append(reg)
        return reg

    @staticmethod
    def _params(c2s: _WithTransportParams, transport: str) -> tuple[bool, int]:
        any_msg = c2s.transport_params
        if not c2s.HasField("transport_params"):
            return False, 0
        cls = sig.PrefixTransportParams if transport == "prefix" else sig.GenericTransportParams
        params = cls()
        try:
            params.ParseFromString(any_msg.value)
        except DecodeError:
            raise RegistrationError("unreadable transport parameters") from None
        return params.randomize_dst_port, getattr(params, "prefix_id", 0)

    @staticmethod
    def _key(client: IPAddress, phantom: IPAddress, port: int) -> tuple:
        if phantom.version == 6:
            return (phantom, port)
        return (client, phantom, port)

    def lookup(self, client: str, phantom: str, port: int) -> list[Registration]:
        """Live registrations a connection from ``client`` to ``phantom:port`` may belong to."""
        try:
            c, p = ipaddress.ip_address(client), ipaddress.ip_address(phantom)
        except ValueError:
            return []
        now = self.clock()
        return [r for r in self._by_key.get(self._key(c, p, port), [])
                if r.expires_at(self.unused_timeout_s, self.active_timeout_s) > now]

    def forget(self, reg: Registration) -> None:
        """Drop a registration at once (its secret stays spent)."""
        for phantom in reg.phantoms:
            key = self._key(reg.client, phantom.address, reg.port)
            regs = [r for r in self._by_key.get(key, []) if r is not reg]
            if regs:
                self._by_key[key] = regs
            else:
                self._by_key.pop(key, None)

    def mark_used(self, reg: Registration) -> None:
        if reg.first_use is None:
            reg.first_use = self.clock()

    def expire(self) -> list[Registration]:
        """Drop registrations past their lifetime; return them (for rule removal)."""
        now = self.clock()
        gone: list[Registration] = []
        for key, regs in list(self._by_key.items()):
            live = [r for r in regs
                    if r.expires_at(self.unused_timeout_s, self.active_timeout_s) > now]
            gone += [r for r in regs if r not in live and r not in gone]
            if live:
                self._by_key[key] = live
            else:
                del self._by_key[key]
        return gone

    def __iter__(self) -> Iterable[Registration]:
        seen: list[Registration] = []
        for regs in self._by_key.values():
            seen += [r for r in regs if r not in seen]
        return iter(seen)
