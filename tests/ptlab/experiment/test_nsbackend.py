"""The namespace backend's cell captures: whole packets by default, the spec's
snap length when it sets one (docs/lab/results.md §8)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from censor_sim.pcapflows import read_packets
from netns.capture import WHOLE_PACKETS

pytestmark = pytest.mark.lab

#: The length the captures were cut to before whole packets became the default.
OLD_SNAPLEN = 256


def _snaplen_field(pcap: Path) -> int:
    """The snap length a classic pcap's global header records (tcpdump's byte order)."""
    head = pcap.read_bytes()[:24]
    endian = "<" if head[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    return int(struct.unpack(endian + "I", head[16:20])[0])


def _captures(lab, snaplen: int) -> list[tuple[Path, list[tuple[int, int]]]]:
    """Run direct x none with ``snaplen``; each pcap with its (captured, original)
    IP lengths."""
    saved = lab.spec.capture_snaplen
    lab.spec.capture_snaplen = snaplen
    try:
        row = lab.run_cell("direct", "none")
    finally:
        lab.spec.capture_snaplen = saved
    assert row.status == "reachable", row.error
    assert len(row.pcaps) == 2  # both censor interfaces
    paths = [lab.runner.work / p for p in row.pcaps]
    return [(p, [(len(ip), orig) for _, ip, orig in read_packets(p)]) for p in paths]


def test_cell_captures_keep_whole_packets(lab) -> None:
    for pcap, packets in _captures(lab, WHOLE_PACKETS):
        assert _snaplen_field(pcap) == WHOLE_PACKETS
        long_ones = [(cap, orig) for cap, orig in packets if orig > OLD_SNAPLEN]
        # The bulk download's packets are far longer than 256 bytes, and every one
        # of them is in the file whole.
        assert long_ones, pcap
        assert all(cap == orig for cap, orig in long_ones), pcap


def test_the_spec_snap_length_cuts_packets(lab) -> None:
    for pcap, packets in _captures(lab, OLD_SNAPLEN):
        assert _snaplen_field(pcap) == OLD_SNAPLEN
        assert any(orig > OLD_SNAPLEN for _, orig in packets)
        # 256 bytes of frame: the 14-byte Ethernet header and 242 of IP packet.
        assert max(cap for cap, _ in packets) <= OLD_SNAPLEN - 14
