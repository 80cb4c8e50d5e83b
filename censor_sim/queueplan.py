"""Which packets the censor's engine needs from the kernel, from its inspectors.

Every packet that leaves the kernel costs the censor a hand-off (an NFQUEUE
round trip in-path, an NFLOG copy on-path; docs/lab/censor.md §5), so the
queue rules ask only for what some inspector or action reads:

* only the transport protocols some inspector reads;
* no TCP segment without payload when every inspector judges payloads alone;
* nothing from the server side when no inspector reads it;
* no SYN either (``watch_births``) when, on top of that, nothing acts on a
  SYN: the ruleset marks the connections it saw born and hands over their
  first payload as the flow's start. A residual block that a new connection
  attempt restarts (Iran's protocol filter) must see the attempt's SYN, so it
  keeps SYNs.
"""

from __future__ import annotations

from typing import Any

from . import datapath, packet
from .engine import Engine


def queue_config(engine: Engine, dp: dict[str, Any], on_path: bool, inside: str,
                 outside: str) -> datapath.QueueConfig:
    """The queue (or tap) rules' configuration for ``engine`` and the profile's
    ``[datapath]`` table ``dp``."""
    every = bool(dp.get("every_packet", False))
    whole_packets = engine.packet_censor is not None
    payload_only = not whole_packets and not any(
        (i.sees_empty or i.uses_flow_stats) and packet.TCP in i.protocols
        for i in engine.inspectors)
    client_side = not whole_packets and not any(i.reads_server for i in engine.inspectors)
    queue = datapath.QueueConfig(
        inside, outside, None if every else int(dp.get("inspect_packets", 12)),
        skip_empty_tcp=payload_only and not every and bool(dp.get("skip_empty_tcp", True)),
        mechanism="tap" if on_path else "queue",
        tap_batch=int(dp.get("tap_batch", 1)),
        # The kernel counts in hundredths; round up.
        tap_wait_cs=-(-int(dp.get("tap_wait_ms", 0)) // 10),
        client_side_only=client_side and not every,
        protocols=None if whole_packets or every else tuple(sorted(
            {p for i in engine.inspectors for p in i.protocols})))
    queue.watch_births = (queue.skip_empty_tcp and queue.client_side_only
                          and not engine.needs_syns and bool(dp.get("watch_births", True)))
    return queue
