"""tcpdump's closing counts, read from its log."""

from __future__ import annotations

from netns.capture import dropped_packets

CLOSING = """tcpdump: listening on ptl-c0, link-type EN10MB (Ethernet), snapshot length 262144 bytes
1234 packets captured
1300 packets received by filter
66 packets dropped by kernel
"""


def test_the_kernel_drop_count_is_read_once_tcpdump_has_stopped():
    assert dropped_packets(CLOSING) == 66
    assert dropped_packets(CLOSING.replace("66 packets", "0 packets")) == 0
    assert dropped_packets(CLOSING.replace("66 packets dropped", "1 packet dropped")) == 1
    # Still running: nothing said yet, which is not "none dropped".
    assert dropped_packets(CLOSING.splitlines()[0]) is None
    assert dropped_packets("") is None
