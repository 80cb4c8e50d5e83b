"""The Conjure client: register, derive the phantom, connect to it, speak the transport.

Per connection (as the gotapdance client does with an API registrar):

1. a fresh 32-byte shared secret goes to the registrar in a ``C2SWrapper``
   (``POST`` to ``url=``, optionally domain-fronted through ``front=``);
2. after the registration delay (``reg-delay=``, Conjure's 750 ms), the client
   derives the seed and selects its phantom and port from ``phantoms=`` and
   ``generation=`` (the ClientConf Conjure ships with its client; a bridge-line
   argument here, ours);
3. it connects to the phantom and sends the transport's tag (``transport=min``),
   then the stream is the covert connection (``covert=HOST:PORT``, the address
   the station connects to: a web node or a bridge's ORPort).

A refused registration (HTTP 4xx with the station's reason) is a
:class:`TransportError`; so is a phantom that does not answer.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from transports.base import Streams, TransportError
from transports.common.fronting import FrontingError, fronted
from transports.common.httpbody import read_limited
from transports.obfs4.transport import Obfs4ClientFactory
from transports.pt.messages import format_addr

from .phantom import (
    CURRENT_CLIENT_LIB_VERSION,
    PhantomConfig,
    SubnetGroup,
    derive_keys,
    obfs4_identity,
    select_phantom,
    select_port,
)
from .registration import build_registration, new_secret
from .wrapping import PREFIXES, min_tag, prefix_hello

REG_DELAY_S = 0.75
CONNECT_TIMEOUT_S = 10.0
SUPPORTED = ("min", "prefix", "obfs4")


@dataclass(frozen=True)
class ConjureArgs:
    url: str
    host: str
    transport: str
    covert: str
    phantoms: PhantomConfig
    generation: int
    v6: bool = False
    reg_delay_s: float = REG_DELAY_S
    randomize_port: bool = False
    prefix_id: int = 1
    station_public: bytes | None = None

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ConjureArgs:
        def need(key: str) -> str:
            if not args.get(key):
                raise TransportError(f"conjure: missing argument {key!r}")
            return args[key]

        try:
            url, host = fronted(need("url"), args.get("front", ""))
        except FrontingError as exc:
            raise TransportError(f"conjure: {exc}") from None
        transport = args.get("transport", "min")
        if transport not in SUPPORTED:
            raise TransportError(f"conjure: transport {transport!r} is not supported "
                                 f"(supported: {', '.join(SUPPORTED)})")
        randomize = args.get("randomize-port", "0") == "1"  # the transport's parameters
        try:
            # The subnet group's own permission (the ClientConf's randomize_dst_port):
            # without it every transport uses port 443 (phantom.select_port).
            group = SubnetGroup.parse(
                1, need("phantoms").split(","),
                args.get("phantoms-random-port", "1" if randomize else "0") == "1")
            generation = int(args.get("generation", "1"))
            delay = float(args.get("reg-delay", REG_DELAY_S))
        except ValueError as exc:
            raise TransportError(f"conjure: {exc}") from None
        prefix_id, public = 1, None
        if transport == "prefix":
            try:
                prefix_id = int(args.get("prefix", "1"))
                public = bytes.fromhex(need("pubkey"))
            except ValueError as exc:
                raise TransportError(f"conjure: {exc}") from None
            if prefix_id not in PREFIXES or len(public) != 32:
                raise TransportError("conjure: prefix must be a known prefix id and pubkey "
                                     "the station's 32-byte X25519 key in hex")
        return cls(url, host, transport, need("covert"), PhantomConfig([group]), generation,
                   args.get("v6", "0") == "1", delay, randomize, prefix_id, public)


async def register(args: ConjureArgs, secret: bytes) -> None:
    body = build_registration(secret, args.transport, args.covert, args.generation,
                              v4=not args.v6, v6=args.v6, randomize_port=args.randomize_port,
                              prefix_id=args.prefix_id if args.transport == "prefix" else None)
    timeout = aiohttp.ClientTimeout(total=30)
    # The station keys IPv4 phantoms by the address the registration came from: register
    # from the family the phantom will be reached in.
    connector = aiohttp.TCPConnector(family=socket.AF_INET6 if args.v6 else socket.AF_INET)
    async with aiohttp.ClientSession(timeout=timeout, cookie_jar=aiohttp.DummyCookieJar(),
                                     connector=connector,
                                     skip_auto_headers=("User-Agent",)) as http:
        try:
            async with http.post(args.url, data=body, headers={
                    "Host": args.host, "Content-Type": "application/octet-stream"}) as r:
                detail = await read_limited(r.content, 4096)
                if r.status not in (200, 204):
                    raise TransportError(f"conjure: registration refused (HTTP {r.status}): "
                                         f"{detail.decode('utf-8', 'replace')[:200]}")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise TransportError(f"conjure: registration failed: {exc}") from None


class ConjureClientFactory:
    def __init__(self, args: ConjureArgs) -> None:
        self.args = args

    async def dial(self, host: str, port: int) -> Streams:  # noqa: ARG002 - the phantom decides
        args = self.args
        secret = new_secret()
        await register(args, secret)
        await asyncio.sleep(args.reg_delay_s)
        seed = derive_keys(secret, CURRENT_CLIENT_LIB_VERSION).seed
        phantom = select_phantom(seed, args.phantoms, args.v6)
        default = PREFIXES[args.prefix_id][1] if args.transport == "prefix" else None
        phantom_port = select_port(seed, args.transport, phantom, args.randomize_port, default)
        address = str(phantom.address)
        if args.transport == "obfs4":
            _, public, node_id = obfs4_identity(derive_keys(secret, CURRENT_CLIENT_LIB_VERSION))
            # Conjure's station decodes with a pre-0.0.12 Elligator2 decoder: padding bits
            # clear (elligator2.without_high_bits).
            return await Obfs4ClientFactory(node_id, public, 0, CONNECT_TIMEOUT_S,
                                            legacy_representatives=True).dial(
                address, phantom_port)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(address, phantom_port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise TransportError(f"conjure: phantom {format_addr(address, phantom_port)} did not "
                                 f"answer: {exc or type(exc).__name__}") from None
        if args.transport == "prefix":
            assert args.station_public is not None
            writer.write(prefix_hello(secret, args.station_public, args.prefix_id))
        else:
            writer.write(min_tag(secret))
        return reader, writer
