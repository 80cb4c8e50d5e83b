"""Packet capture with tcpdump inside a namespace (the censor's interfaces).

Captures keep whole packets unless told otherwise: a pcap whose payloads are
cut is of no use to anyone who opens it in Wireshark (docs/lab/results.md §8).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from .errors import LabError
from .process import LabProcess
from .sh import require_tools

#: tcpdump's largest snap length (what its ``-s 0`` means): every packet whole,
#: a veth's 64 KiB GSO packets included.
WHOLE_PACKETS = 262144
#: The kernel's buffer for a capture, in KiB (tcpdump's ``-B``; its default is
#: 2 MiB). With whole packets a 2 MiB buffer holds some thirty 64 KiB GSO packets,
#: and a busy 2-CPU machine that is slow to schedule tcpdump lost a third of a
#: 2 MB transfer's packets from the capture. 32 MiB holds a cell's bulk transfer
#: in flight.
BUFFER_KIB = 32768


def dropped_packets(log: str) -> int | None:
    """How many packets the kernel dropped from a capture, as tcpdump says when it
    stops ("N packets dropped by kernel"); None before it has said so."""
    m = re.search(r"^(\d+) packets? dropped by kernel", log, re.MULTILINE)
    return int(m.group(1)) if m else None


class Capture:
    """tcpdump on one interface of namespace `ns`, writing `pcap`; `snaplen`
    bytes of each packet (whole packets by default)."""

    def __init__(self, ns: str, dev: str, pcap: Path, snaplen: int = WHOLE_PACKETS,
                 bpf: str | None = None, buffer_kib: int = BUFFER_KIB) -> None:
        require_tools("tcpdump")
        self.pcap = Path(pcap)
        self.proc = LabProcess(
            ns, ["tcpdump", "-n", "--immediate-mode", "-i", dev, "-s", str(snaplen),
                 "-B", str(buffer_kib), "-U", "-w", str(self.pcap),
                 *(bpf.split() if bpf else [])],
            name=f"tcpdump-{dev}", log_path=self.pcap.with_suffix(".log"))

    def start(self, timeout: float = 5.0) -> Capture:
        self.proc.start()
        self.proc.wait_log(r"listening on", timeout)
        return self

    def stop(self) -> Path:
        self.proc.stop()
        deadline = time.monotonic() + 2
        while not self.pcap.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not self.pcap.exists():
            raise LabError(f"capture {self.pcap} was not written")
        return self.pcap

    def log_text(self, this_run_only: bool = False) -> str:
        """What tcpdump said (its drop count once stopped: :func:`dropped_packets`)."""
        return self.proc.log_text(this_run_only)
