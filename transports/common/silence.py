"""Probe resistance shared by the servers that must not answer strangers (obfs4, ScrambleSuit).

Frolov et al. (probe-resistant proxies, NDSS 2020) tell servers apart by when and
how they close on probes. So a server that cannot verify a handshake neither
answers nor closes on a data-dependent threshold: it reads and discards until
the peer closes or a per-connection deadline (300 s plus 0-60 s of jitter) has
passed. Until a handshake verifies, a connection counts as unauthenticated; the
pool is bounded, and the oldest is closed first when it is full, so silence
cannot be used to exhaust the server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from .budget import unauthenticated_cap

READ_SIZE = 65536


@dataclass
class ServerPolicy:
    """The server's timers and limits (all parameters, so tests run them short)."""

    handshake_timeout_s: float = 60.0
    unauth_timeout_s: float = 300.0
    unauth_jitter_s: float = 60.0
    # Derived from the descriptor budget when the policy is made (transports/common/budget.py).
    max_unauthenticated: int = field(default_factory=unauthenticated_cap)


class Gatekeeper:
    """The unauthenticated pool and the silence, for one server."""

    def __init__(self, policy: ServerPolicy) -> None:
        self.policy = policy
        self.unauthenticated: collections.OrderedDict[int, asyncio.StreamWriter] = \
            collections.OrderedDict()

    @contextlib.contextmanager
    def admitted(self, writer: asyncio.StreamWriter) -> Iterator[None]:
        """Count ``writer`` as unauthenticated for the duration of the handshake."""
        while len(self.unauthenticated) >= self.policy.max_unauthenticated:
            _, oldest = self.unauthenticated.popitem(last=False)
            oldest.close()
        token = id(writer)
        self.unauthenticated[token] = writer
        try:
            yield
        finally:
            self.unauthenticated.pop(token, None)

    async def stay_silent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          start: float) -> None:
        """Discard everything until the peer closes or the jittered deadline passes."""
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
