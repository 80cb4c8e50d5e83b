"""The censor's garbage-collector policy.

The censor allocates a few short-lived objects per packet (the parsed packet,
its verdict) and keeps long-lived ones per flow. With CPython's default
thresholds the cyclic collector runs every 700 allocations and, every few
runs, walks every flow the censor remembers; profiles of pcap mode showed
that walk as a third of the time per packet, landing on whichever packet
happened to trigger it. Nothing on the per-packet path builds reference
cycles, so collections can be rarer, and what exists at start-up (profiles,
tables, imported modules) is moved out of the collector's view for good.
"""

from __future__ import annotations

import gc

# Allocations between young collections; the older generations' ratios stay.
YOUNG_THRESHOLD = 50_000


def for_packet_loop() -> None:
    """Call once the censor is set up, before its first packet."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
