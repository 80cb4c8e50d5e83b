"""Probe resistance shared by the servers that must not answer strangers (obfs4, ScrambleSuit).

Frolov et al. (probe-resistant proxies, NDSS 2020) tell servers apart by when and
how they close on probes. So a server that cannot verify a handshake neither
answers nor closes on a data-dependent threshold: it reads and discards until
the peer closes or a per-connection deadline (300 s plus 0-60 s of jitter) has
passed. Until a handshake verifies, a connection counts as unauthenticated; the
pool is bounded, so silence cannot be used to exhaust the server.

When the pool is full, a newcomer displaces the connection least likely to be a
client (docs/transports/budgets.md): first one already proved a stranger (it is
being kept silent), then one whose bytes were read and hold no handshake, then
one not yet examined. Within a tier, the one with the fewest bytes waiting to be
read goes, the oldest on a tie: a client's handshake may be in those bytes, and
an obfs4 or ScrambleSuit hello is longer than most probes. Evicting plainly by
age closed a client whose handshake was waiting unread whenever a burst of
strangers larger than the cap was accepted just after it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import itertools
import random
import struct
import termios
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .budget import unauthenticated_cap

READ_SIZE = 65536
# How many of a tier's oldest connections eviction compares by bytes waiting,
# so that choosing a victim stays cheap under a flood.
EVICTION_SCAN = 32
# One tier of the pool: connections by id, oldest first, with the reader if known.
_Tier = collections.OrderedDict[int, tuple[asyncio.StreamWriter, asyncio.StreamReader | None]]


@dataclass
class ServerPolicy:
    """The server's timers and limits (all parameters, so tests run them short)."""

    handshake_timeout_s: float = 60.0
    unauth_timeout_s: float = 300.0
    unauth_jitter_s: float = 60.0
    # Derived from the descriptor budget when the policy is made (transports/common/budget.py).
    max_unauthenticated: int = field(default_factory=unauthenticated_cap)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ServerPolicy:
        """The policy a server's options ask for, the defaults for those they leave out.

        The keys are ptlab's own (``handshake-timeout``, ``unauth-timeout``,
        ``unauth-jitter`` in seconds, ``max-unauthenticated``); obfs4proxy ignores
        unknown options, so a bridge line may carry them to either server. A value
        that is no number raises ValueError.
        """
        policy = cls()
        for key, attr in (("handshake-timeout", "handshake_timeout_s"),
                          ("unauth-timeout", "unauth_timeout_s"),
                          ("unauth-jitter", "unauth_jitter_s")):
            if key in options:
                setattr(policy, attr, float(options[key]))
        if "max-unauthenticated" in options:
            policy.max_unauthenticated = int(options["max-unauthenticated"])
        return policy


class Gatekeeper:
    """The unauthenticated pool and the silence, for one server.

    The pool is three tiers, each in arrival order: ``pending`` (nothing of the
    connection examined yet), ``examined`` (bytes read that hold no handshake so
    far) and ``silent`` (proved a stranger, kept until it closes or times out).
    """

    def __init__(self, policy: ServerPolicy) -> None:
        self.policy = policy
        self._pending: _Tier = collections.OrderedDict()
        self._examined: _Tier = collections.OrderedDict()
        self._silent: _Tier = collections.OrderedDict()
        # By tier: who a full pool displaced.
        self.evicted: collections.Counter[str] = collections.Counter()

    @property
    def unauthenticated(self) -> dict[int, asyncio.StreamWriter]:
        """Every connection still waiting for a handshake, by id (a snapshot)."""
        return {token: entry[0] for tier in (self._pending, self._examined, self._silent)
                for token, entry in tier.items()}

    def __len__(self) -> int:
        return len(self._pending) + len(self._examined) + len(self._silent)

    @contextlib.contextmanager
    def admitted(self, writer: asyncio.StreamWriter,
                 reader: asyncio.StreamReader | None = None) -> Iterator[None]:
        """Count ``writer`` as unauthenticated for the duration of the handshake.

        ``reader``, when given, lets eviction see bytes already read into it."""
        while len(self) >= self.policy.max_unauthenticated:
            self._evict_one()
        token = id(writer)
        self._pending[token] = (writer, reader)
        try:
            yield
        finally:
            for tier in (self._pending, self._examined, self._silent):
                if tier.pop(token, None) is not None:
                    break

    def examined(self, writer: asyncio.StreamWriter) -> None:
        """The connection's bytes so far were read and hold no handshake yet."""
        self._move(writer, self._pending, self._examined)

    def _move(self, writer: asyncio.StreamWriter, *tiers: collections.OrderedDict) -> None:
        token, dest = id(writer), tiers[-1]
        for tier in tiers[:-1]:
            if (entry := tier.pop(token, None)) is not None:
                dest[token] = entry
                return

    def _evict_one(self) -> None:
        if self._silent:
            _, (writer, _) = self._silent.popitem(last=False)
            self.evicted["silent"] += 1
            writer.close()
            return
        name, tier = ("examined", self._examined) if self._examined else \
            ("pending", self._pending)
        victim, fewest = next(iter(tier)), None
        for token, (writer, reader) in itertools.islice(tier.items(), EVICTION_SCAN):
            waiting = _unread_bytes(writer, reader)
            if fewest is None or waiting < fewest:
                victim, fewest = token, waiting
                if waiting == 0:
                    break
        writer, _ = tier.pop(victim)
        self.evicted[name] += 1
        writer.close()

    async def stay_silent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          start: float) -> None:
        """Discard everything until the peer closes or the jittered deadline passes."""
        self._move(writer, self._pending, self._examined, self._silent)
        loop = asyncio.get_running_loop()
        deadline = start + self.policy.unauth_timeout_s + \
            random.uniform(0, self.policy.unauth_jitter_s)
        with contextlib.suppress(Exception):
            while not writer.is_closing():
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    data = await asyncio.wait_for(reader.read(READ_SIZE), left)
                except TimeoutError:
                    break
                if not data:
                    break
        writer.close()


def _unread_bytes(writer: asyncio.StreamWriter, reader: asyncio.StreamReader | None) -> int:
    """How many bytes wait for the server: in ``reader``'s buffer (asyncio has read
    them and the handler has not yet run) and in the socket's receive queue."""
    # asyncio's StreamReader keeps what it has read in _buffer; nothing public tells
    # how much that is (at_eof and the limit do not).
    buffered = len(getattr(reader, "_buffer", b"")) if reader is not None else 0
    sock = writer.get_extra_info("socket")
    if sock is None:
        return buffered
    try:
        queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]
    except (OSError, ValueError):
        return buffered
    return buffered + queued
