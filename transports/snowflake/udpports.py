"""Confine WebRTC's UDP sockets to a port range (the proxy's ``-ephemeral-ports-range``).

Why an event loop: a volunteer behind a firewall can open only some UDP ports,
so Tor's proxy takes ``-ephemeral-ports-range min:max`` and pion binds its ICE
sockets there. aioice offers no such option: it binds every host candidate
with ``loop.create_datagram_endpoint(local_addr=(address, 0))``. A loop whose
``create_datagram_endpoint`` turns "any port" into a free port of the range
gives the same effect without touching aioice. Only UDP requests for port 0
with no remote address change; everything else passes through.
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from transports.common import eventloop


class PortRange(NamedTuple):
    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """``"min:max"``, as Tor's flag takes it; ValueError says what is wrong."""
        low_s, sep, high_s = text.strip().partition(":")
        if not sep or not low_s.isdigit() or not high_s.isdigit():
            raise ValueError(f"port range {text!r}: expected <min>:<max>")
        low, high = int(low_s), int(high_s)
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"port range {text!r}: need 1 <= min <= max <= 65535")
        return cls(low, high)


if TYPE_CHECKING:
    # What the mixin is always mixed into, so that its super() call is checked.
    _LoopBase = asyncio.AbstractEventLoop
else:
    _LoopBase = object


class PortRangeMixin(_LoopBase):
    """Binds "any port" UDP endpoints inside ``self.ports``, on whichever event
    loop class it is mixed into (asyncio's or uvloop's: transports.common.eventloop)."""

    ports: PortRange

    async def create_datagram_endpoint(self, protocol_factory: Any, local_addr: Any = None,
                                       remote_addr: Any = None, **kwargs: Any) -> Any:
        if (local_addr is None or remote_addr is not None or kwargs.get("sock") is not None
                or local_addr[1] != 0):
            return await super().create_datagram_endpoint(
                protocol_factory, local_addr=local_addr, remote_addr=remote_addr, **kwargs)
        candidates = list(range(self.ports.low, self.ports.high + 1))
        random.shuffle(candidates)  # like pion: no predictable first port
        for port in candidates:
            try:
                return await super().create_datagram_endpoint(
                    protocol_factory, local_addr=(local_addr[0], port, *local_addr[2:]),
                    **kwargs)
            except OSError as exc:
                # uvloop wraps the bind error ("could not bind to local_addr"),
                # its errno on the cause.
                if errno.EADDRINUSE not in (exc.errno, getattr(exc.__cause__, "errno", None)):
                    raise
        raise OSError(errno.EADDRINUSE, f"no free UDP port in {self.ports.low}:"
                                        f"{self.ports.high} on {local_addr[0]}")


class PortRangeEventLoop(PortRangeMixin, asyncio.SelectorEventLoop):
    """asyncio's own loop, binding "any port" UDP endpoints inside ``ports``."""

    def __init__(self, ports: PortRange) -> None:
        super().__init__()
        self.ports = ports


_UVLOOP_CLASSES: dict[type, type] = {}


def port_range_loop(ports: PortRange, base: type | None = None) -> asyncio.AbstractEventLoop:
    """A new loop of class ``base`` (default: transports.common.eventloop's choice)
    that binds "any port" UDP endpoints inside ``ports``."""
    base = base or eventloop.loop_class()
    if base is asyncio.SelectorEventLoop:
        return PortRangeEventLoop(ports)
    cls = _UVLOOP_CLASSES.get(base)
    if cls is None:
        cls = _UVLOOP_CLASSES[base] = type(f"PortRange{base.__name__}", (PortRangeMixin, base),
                                           {})
    loop = cls()
    loop.ports = ports
    return loop


def loop_factory(ports: PortRange | None) -> Callable[[], asyncio.AbstractEventLoop]:
    """The ``loop_factory`` every proxy process runs with: the chosen loop
    (transports.common.eventloop), confined to ``ports`` when there are any."""
    if ports is None:
        return eventloop.loop_class()
    return lambda: port_range_loop(ports)
