"""A receive buffer on ICE's UDP sockets big enough for a window of DATA.

aioice asks for 256 KiB of receive buffer on each socket it gathers with
(``aioice.turn.UDP_SOCKET_BUFFER_SIZE``). A pion sender may have a whole
1 MiB receive window in flight, and each 1.2 KB datagram costs the kernel
about twice its size in buffer, so on a fast path a burst overflowed the
buffer while Python was busy: 232 drops in a 10 MB upload through our proxy
in the lab, each one a retransmission and often a 1 s timeout. Tor's proxy
reads in its own goroutine and keeps up.

The kernel caps the request at ``net.core.rmem_max`` (Debian's default is
208 KiB; the lab machines allow 4 MiB), so on a stock host the buffer stays
where aioice put it; docs/transports/snowflake.md says how a volunteer raises
the cap.
"""

from __future__ import annotations

RECEIVE_BUFFER = 4 << 20


def enlarge_ice_receive_buffer(size: int = RECEIVE_BUFFER) -> int:
    """Make aioice ask for at least ``size`` bytes on the sockets it opens from now on;
    returns what it will ask for."""
    import aioice.turn

    aioice.turn.UDP_SOCKET_BUFFER_SIZE = max(int(aioice.turn.UDP_SOCKET_BUFFER_SIZE), size)
    return aioice.turn.UDP_SOCKET_BUFFER_SIZE
