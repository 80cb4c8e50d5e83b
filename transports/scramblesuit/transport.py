"""ScrambleSuit as a transport: the server obfs4proxy's client talks to, and our client.

Server (``wrap``): read the client's first bytes until they form a session-ticket
redemption (tried first: a ticket only our keys open) or a UniformDH handshake
under k_B; answer a UniformDH handshake with the server's half (a redemption
needs no answer); then send a fresh ticket (new-ticket frame: master key and
ticket for the next connection) and the server's PRNG seed, and carry the
stream in frames. Until a handshake verifies, nothing is sent: the server
reads and discards until the peer closes or the unauthenticated timeout (300 s
plus jitter, as obfs4's) passes, whatever arrives. Replayed handshakes and
tickets are refused the same way.

Shaping (:mod:`.shaping`): bursts padded to seeded lengths, and with
``iat-mode=1`` sent a segment at a time with seeded gaps.

Client (``dial``): a ticket from the state directory's store if one is valid
(``scramblesuit_tickets.json``, obfs4proxy's file and format), else UniformDH;
new tickets are stored for the next connection.

The inner streams are one end of a socket pair; the other end is pumped
through the framing in both directions.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transports.base import BOTH_ROLES, Streams, Transport, TransportError
from transports.common.pipes import spawn, stream_pair
from transports.common.silence import Gatekeeper, ServerPolicy
from transports.pt.messages import format_addr

from .framing import (
    FLAG_NEW_TICKET,
    FLAG_PAYLOAD,
    FLAG_PRNG_SEED,
    MAX_SEGMENT,
    PRNG_SEED_LENGTH,
    Decoder,
    Encoder,
    session_keys,
)
from .handshake import (
    MAX_HANDSHAKE,
    SECRET_LENGTH,
    ClientHandshake,
    HandshakeError,
    parse_client_hello,
    server_response,
)
from .shaping import Shaping
from .tickets import KEY_LENGTH, TICKET_LENGTH, TicketIssuer, parse_ticket_hello, ticket_handshake

PASSWORD_ARG = "password"
SECRET_FILE = "scramblesuit_password"
BRIDGE_FILE = "scramblesuit_bridgeline.txt"
TICKET_STORE = "scramblesuit_tickets.json"
READ_SIZE = 65536


def encode_password(k_b: bytes) -> str:
    return base64.b32encode(k_b).decode("ascii")


def decode_password(text: str) -> bytes:
    try:
        raw = base64.b32decode(text.strip(), casefold=False)
    except (binascii.Error, ValueError) as exc:
        raise TransportError(f"scramblesuit: password is not base32: {exc}") from None
    if len(raw) != SECRET_LENGTH:
        raise TransportError(f"scramblesuit: password must decode to {SECRET_LENGTH} bytes")
    return raw


class Session:
    """Pumps between the network and the application's end of a socket pair."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 enc: Encoder, dec: Decoder, shaping: Shaping,
                 on_ticket: Callable[[bytes], None] | None = None) -> None:
        self.reader, self.writer = reader, writer
        self.enc, self.dec, self.shaping = enc, dec, shaping
        self.on_ticket = on_ticket

    async def start(self, leftover: bytes, first: bytes = b"") -> Streams:
        (app_r, app_w), inner = await stream_pair(READ_SIZE, 1 << 20)
        if first:
            self.writer.write(first)
        spawn(self._run(app_r, app_w, leftover))
        return inner

    def _handle(self, frames: list[tuple[int, bytes]], app_w: asyncio.StreamWriter) -> None:
        for flags, data in frames:
            if flags == FLAG_PAYLOAD:
                if data:
                    app_w.write(data)
            elif flags == FLAG_NEW_TICKET and self.on_ticket is not None:
                self.on_ticket(data)
            elif flags == FLAG_PRNG_SEED and len(data) == PRNG_SEED_LENGTH:
                self.shaping.reseed(data)

    async def _down(self, app_w: asyncio.StreamWriter, leftover: bytes) -> None:
        data = leftover
        while True:
            if data:
                self._handle(self.dec.feed(data), app_w)
                await app_w.drain()
            data = await self.reader.read(READ_SIZE)
            if not data:
                return

    async def _up(self, app_r: asyncio.StreamReader) -> None:
        while data := await app_r.read(READ_SIZE):
            burst = self.enc.payload(data)
            burst += self.enc.padding(self.shaping.pad_length(len(burst)))
            if not self.shaping.iat_mode:
                self.writer.write(burst)
                await self.writer.drain()
                continue
            for i in range(0, len(burst), MAX_SEGMENT):
                self.writer.write(burst[i:i + MAX_SEGMENT])
                await self.writer.drain()
                await asyncio.sleep(self.shaping.gap_s())

    async def _run(self, app_r: asyncio.StreamReader, app_w: asyncio.StreamWriter,
                   leftover: bytes) -> None:
        down = asyncio.create_task(self._down(app_w, leftover))
        up = asyncio.create_task(self._up(app_r))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            for t in (down, up):
                t.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(down, up, return_exceptions=True)
            for w in (app_w, self.writer):
                with contextlib.suppress(Exception):
                    w.close()


@dataclass
class ScrambleSuitServerFactory:
    k_b: bytes
    tickets: TicketIssuer
    prng_seed: bytes = field(default_factory=lambda: os.urandom(PRNG_SEED_LENGTH))
    policy: ServerPolicy = field(default_factory=ServerPolicy)
    clock: Callable[[], float] = time.time
    iat_mode: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    _seen: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.gate = Gatekeeper(self.policy)

    def smethod_args(self) -> dict[str, str]:
        return {PASSWORD_ARG: encode_password(self.k_b)}

    def _replayed(self, mac: bytes) -> bool:
        if mac in self._seen:
            return True
        self._seen.add(mac)
        return False

    async def wrap(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Streams:
        start = asyncio.get_running_loop().time()
        with self.gate.admitted(writer, reader):
            try:
                master, consumed, buf, response = await asyncio.wait_for(
                    self._handshake(reader, writer), self.policy.handshake_timeout_s)
            except (HandshakeError, TimeoutError, ConnectionError) as exc:
                reason = str(exc).split(":")[0] or type(exc).__name__
                self.failures[reason] = self.failures.get(reason, 0) + 1
                await self.gate.stay_silent(reader, writer, start)
                raise TransportError(f"scramblesuit handshake failed: {reason}") from None
        c2s, s2c = session_keys(master)
        enc = Encoder(s2c)
        next_master, ticket = self.tickets.new_ticket()
        first = response + enc.frame(FLAG_NEW_TICKET, next_master + ticket) + \
            enc.frame(FLAG_PRNG_SEED, self.prng_seed)
        session = Session(reader, writer, enc, Decoder(c2s),
                          Shaping(self.prng_seed, self.iat_mode))
        return await session.start(buf[consumed:], first)

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         ) -> tuple[bytes, int, bytes, bytes]:
        buf = b""
        while True:
            data = await reader.read(READ_SIZE)
            if not data:
                raise ConnectionError("EOF before a valid handshake")
            buf += data
            now = self.clock()
            ticket = parse_ticket_hello(buf, self.tickets, now)
            if ticket is not None:
                return ticket.master, ticket.consumed, buf, b""
            hello = parse_client_hello(buf, self.k_b, now, self._replayed)
            if hello is not None:
                response, master = server_response(self.k_b, hello)
                return master, hello.consumed, buf, response
            if len(buf) > MAX_HANDSHAKE:
                raise HandshakeError("no handshake in the maximum length")
            self.gate.examined(writer)


class TicketStore:
    """obfs4proxy's client ticket store: ``{addr: {"key-ticket": base32, "issuedAt": s}}``."""

    LIFETIME_S = 7 * 24 * 3600

    def __init__(self, path: Path | None, clock: Callable[[], float] = time.time) -> None:
        self.path, self.clock = path, clock

    def _load(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _save(self, doc: dict[str, Any]) -> None:
        if self.path is None:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)

    def take(self, addr: str) -> tuple[bytes, bytes] | None:
        """(master key, ticket) for ``addr``, used up; None when none is valid."""
        doc = self._load()
        entry = doc.pop(addr, None)
        self._save(doc)
        if not isinstance(entry, dict):
            return None
        try:
            raw = base64.b32decode(entry["key-ticket"])
            issued = float(entry["issuedAt"])
        except (KeyError, TypeError, ValueError, binascii.Error):
            return None
        if len(raw) != KEY_LENGTH + TICKET_LENGTH or issued + self.LIFETIME_S <= self.clock():
            return None
        return raw[:KEY_LENGTH], raw[KEY_LENGTH:]

    def put(self, addr: str, key_ticket: bytes) -> None:
        if len(key_ticket) != KEY_LENGTH + TICKET_LENGTH:
            return
        doc = self._load()
        doc[addr] = {"key-ticket": base64.b32encode(key_ticket).decode(),
                     "issuedAt": int(self.clock())}
        self._save(doc)


@dataclass
class ScrambleSuitClientFactory:
    k_b: bytes
    store: TicketStore
    clock: Callable[[], float] = time.time
    timeout_s: float = 60.0

    async def dial(self, host: str, port: int) -> Streams:
        addr = format_addr(host, port)  # the ticket store's key, as obfs4proxy's
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
                ticket = self.store.take(addr)
                if ticket is not None:
                    master, blob = ticket
                    writer.write(ticket_handshake(blob, master, self.clock()))
                    leftover = b""
                else:
                    hs = ClientHandshake(self.k_b, now=self.clock)
                    writer.write(hs.generate())
                    buf = b""
                    while (done := hs.parse_server(buf)) is None:
                        data = await reader.read(READ_SIZE)
                        if not data:
                            raise TransportError("scramblesuit: server closed the handshake")
                        buf += data
                    consumed, master = done
                    leftover = buf[consumed:]
        except (HandshakeError, OSError, TimeoutError) as exc:
            raise TransportError(f"scramblesuit: {exc or type(exc).__name__}") from None
        c2s, s2c = session_keys(master)
        session = Session(reader, writer, Encoder(c2s), Decoder(s2c),
                          Shaping(os.urandom(PRNG_SEED_LENGTH)),
                          on_ticket=lambda kt: self.store.put(addr, kt))
        return await session.start(leftover)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def load_or_create_secret(state_dir: Path) -> bytes:
    """k_B from the state directory (made on first start), and the bridge line an
    operator hands out, as obfs4proxy's clients read it: ``password=`` in base32."""
    path = state_dir / SECRET_FILE
    try:
        k_b = decode_password(path.read_text())
    except FileNotFoundError:
        k_b = os.urandom(SECRET_LENGTH)
        state_dir.mkdir(parents=True, exist_ok=True)
        _write_private(path, encode_password(k_b) + "\n")
    _write_private(state_dir / BRIDGE_FILE,
                   "# scramblesuit torrc client bridge line: fill in the placeholders.\n"
                   f"Bridge scramblesuit <IP ADDRESS>:<PORT> <FINGERPRINT> "
                   f"{PASSWORD_ARG}={encode_password(k_b)}\n")
    return k_b


@dataclass(frozen=True)
class ScrambleSuit(Transport):
    roles = BOTH_ROLES

    def client_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ScrambleSuitClientFactory:
        if PASSWORD_ARG not in args:
            raise TransportError(f"scramblesuit: missing argument '{PASSWORD_ARG}'")
        store = TicketStore(state_dir / TICKET_STORE if state_dir else None)
        return ScrambleSuitClientFactory(decode_password(args[PASSWORD_ARG]), store)

    def server_factory(self, state_dir: Path | None,
                       args: Mapping[str, str]) -> ScrambleSuitServerFactory:
        if state_dir is None:
            raise TransportError("scramblesuit server needs a state directory")
        k_b = decode_password(args[PASSWORD_ARG]) if PASSWORD_ARG in args else \
            load_or_create_secret(state_dir)
        try:
            tickets = TicketIssuer.load_or_create(state_dir)
            policy = ServerPolicy.from_options(args)
        except ValueError as exc:
            raise TransportError(f"scramblesuit server: {exc}") from None
        iat = args.get("iat-mode", "0")
        if iat not in ("0", "1"):
            raise TransportError("scramblesuit server: iat-mode must be 0 or 1")
        return ScrambleSuitServerFactory(k_b, tickets, policy=policy, iat_mode=int(iat))


TRANSPORT = ScrambleSuit("scramblesuit")
