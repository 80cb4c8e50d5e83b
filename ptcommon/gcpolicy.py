"""The garbage-collector policy of processes that handle packets in Python.

The censor and the Snowflake proxy allocate a few short-lived objects per
packet (a parsed packet and its verdict; an SCTP chunk, a DTLS record) and
keep long-lived ones per flow or association. With CPython's default
thresholds the cyclic collector runs every 700 allocations and, every few
runs, walks every object the process keeps. Profiles of the censor's pcap mode
showed that walk as a third of the time per packet, landing on whichever
packet happened to trigger it (docs/lab/censor.md §5). Nothing on these
per-packet paths depends on prompt collection of cycles, so collections can be
rarer, and what exists at start-up (imported modules, configuration, tables)
is moved out of the collector's view for good.
"""

from __future__ import annotations

import gc

# Allocations between young collections; the older generations' ratios stay.
YOUNG_THRESHOLD = 50_000


def for_packet_loop() -> None:
    """Call once the process is set up, before its first packet."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
