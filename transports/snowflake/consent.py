"""ICE consent freshness that a busy proxy does not mistake for a dead peer
(RFC 7675).

aioice checks consent every 5 s with one binding request, no retransmission
and 0.5 s to answer, and closes the connection after six failures in a row.
RFC 7675 §5.1 asks for less: consent expires only when no answer has come for
30 s. The difference matters under load. With 20 clients through one proxy in
the lab, the round trip to each client reached 1-10 s while the transfer ran;
every check timed out, and about 30 s into the transfer all 20 connections
closed at once, each client then waiting its turn at the broker for a new proxy
(benchmarks/snowflake_clients.py; docs/transports/snowflake.md §3.8). pion, under
Tor's proxy and client, counts any traffic from the peer as a sign of life and
never does this.

:class:`PatientConsent` overrides only aioice's ``query_consent``: each check
is retransmitted on STUN's back-off (0.5, 1, 2 s after the last send, so an
answer up to 7.5 s late still counts), and the connection closes once
``CONSENT_TIMEOUT_S`` passes with no answer to any check. It is installed by
changing the class of the connection aiortc made, before ICE completes
(:func:`use_patient_consent`); the tests pin the private names it relies on.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from aioice import stun
from aioice.ice import CONSENT_INTERVAL, Connection

CONSENT_TIMEOUT_S = 30.0  # RFC 7675 §5.1
RETRANSMISSIONS = 3  # sends at 0, 0.5, 1.5 and 3.5 s; given up at 7.5 s


class PatientConsent(Connection):
    """aioice's ICE connection, with consent that expires only after 30 s of silence."""

    consent_timeout_s = CONSENT_TIMEOUT_S
    consent_interval_s = float(CONSENT_INTERVAL)

    async def query_consent(self) -> None:
        loop = asyncio.get_running_loop()
        last_answer = loop.time()
        while True:
            await asyncio.sleep(self.consent_interval_s * (0.8 + 0.4 * random.random()))
            for pair in list(self._nominated.values()):
                # aiortc hands aioice the remote's credentials before ICE starts, so
                # before any pair is nominated.
                assert self.remote_password is not None
                request = self.build_request(pair, nominate=False)
                try:
                    await pair.protocol.request(
                        request, pair.remote_addr,
                        integrity_key=self.remote_password.encode("utf8"),
                        retransmissions=RETRANSMISSIONS)
                    last_answer = loop.time()
                except stun.TransactionError:
                    pass
            if loop.time() - last_answer >= self.consent_timeout_s:
                self._query_consent_task = None
                await self.close()
                return


def ice_connection(pc: Any) -> Any | None:
    """The aioice connection under ``pc``'s data channel transport, if it has one yet."""
    sctp = getattr(pc, "sctp", None)
    if sctp is None:
        return None
    try:
        return sctp.transport.transport.iceGatherer._connection
    except AttributeError:
        return None


def use_patient_consent(pc: Any) -> bool:
    """Give ``pc``'s ICE connection :class:`PatientConsent`; False if it has none yet.

    Call it before ICE completes (right after setting the descriptions): the
    consent loop starts when the connection does."""
    conn = ice_connection(pc)
    if conn is None:
        return False
    if type(conn) is Connection:
        conn.__class__ = PatientConsent
    return isinstance(conn, PatientConsent)
