"""Link shaping: rate, loss and delay on both directions of a lab link.

This kernel has no netem (docs/architecture.md §4.2), so: rate is ``tc tbf`` on
each end's egress; loss is an nft ``numgen random`` drop in each end's
namespace; delay uses netem where the kernel has it, and otherwise the
userspace delay line (:mod:`netns.delayline`) in a router namespace.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import LabError
from .process import LabProcess
from .sh import run

SHAPE_TABLE = "ptlshape"


@dataclass(frozen=True)
class Shape:
    rate_mbit: float = 0.0  # 0 = unlimited
    loss_pct: float = 0.0
    delay_ms: float = 0.0

    def is_null(self) -> bool:
        return not (self.rate_mbit or self.loss_pct or self.delay_ms)


def netem_available(ns: str, dev: str) -> bool:
    proc = run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle",
                "9:", "netem", "delay", "0ms"], check=False)
    if proc.returncode == 0:
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"], check=False)
        return True
    return False


DELAY_QUEUE = 7


class DelayLineHandle:
    """A running delay line: its process and the rules that feed it."""

    def __init__(self, ns: str, proc: LabProcess, dev: str | None) -> None:
        self.ns, self.proc, self.dev = ns, proc, dev

    def _rules(self, op: str) -> None:
        # Only what crosses `dev` (both directions), as netem on that link would.
        matches = [["-i", self.dev], ["-o", self.dev]] if self.dev else [[]]
        for ipt in ("iptables", "ip6tables"):
            for m in matches:
                run(["ip", "netns", "exec", self.ns, ipt, "-t", "mangle", op, "FORWARD", *m,
                     "-j", "NFQUEUE", "--queue-num", str(DELAY_QUEUE)], check=(op == "-A"))

    def stop(self) -> None:
        """Unhook the queue first (nothing is left queued to a dead reader), then stop."""
        self._rules("-D")
        self.proc.stop()

    def log_text(self) -> str:
        return self.proc.log_text()


def start_delay_line(ns: str, delay_ms: float, log_path: Path,
                     dev: str | None = None) -> DelayLineHandle:
    """Delay packets router `ns` forwards through `dev` (all if None) by `delay_ms`.

    Use it where netem is missing. Packets are queued without bypass: if the
    delay line dies, traffic stops and the run fails visibly rather than
    silently running without its delay.
    """
    proc = LabProcess(ns, [sys.executable, "-m", "netns.delayline", "--queue",
                           str(DELAY_QUEUE), "--delay-ms", str(delay_ms)],
                      "delayline", log_path).start()
    proc.wait_log(r'"event": ?"ready"', 10)
    handle = DelayLineHandle(ns, proc, dev)
    handle._rules("-A")
    return handle


def apply_egress(ns: str, dev: str, shape: Shape) -> None:
    """Shape what `dev` in namespace `ns` sends (delay only where netem exists)."""
    if shape.delay_ms:
        if not netem_available(ns, dev):
            raise LabError("tc netem is missing: use start_delay_line for delay")
        args = ["netem", "delay", f"{shape.delay_ms}ms"]
        if shape.rate_mbit:
            args += ["rate", f"{shape.rate_mbit}mbit"]
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", *args])
    elif shape.rate_mbit:
        # Burst of about 10 ms at the rate, and at least a few full-size packets.
        burst = max(int(shape.rate_mbit * 1e6 / 8 * 0.01), 16 * 1514)
        run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
             "rate", f"{shape.rate_mbit}mbit", "burst", str(burst), "latency", "50ms"])
    if shape.loss_pct:
        if not 0 < shape.loss_pct < 100:
            raise LabError(f"loss_pct must be between 0 and 100, got {shape.loss_pct}")
        per_10k = int(round(shape.loss_pct * 100))
        script = (f"table inet {SHAPE_TABLE} {{\n chain out_{dev} {{\n"
                  f"  type filter hook postrouting priority 10; policy accept;\n"
                  f"  oifname \"{dev}\" numgen random mod 10000 < {per_10k} counter drop\n"
                  " }\n}\n")
        run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=script)


def shape_link(lab, a: str, b: str, shape: Shape, log_path: Path) -> DelayLineHandle | None:
    """Shape both directions of the link between nodes ``a`` and ``b`` of ``lab``: the
    delay, ``shape.delay_ms`` each way, in netem where the kernel has it, and otherwise in
    the userspace delay line of ``a`` (returned, for the caller to stop); rate and loss
    on each end's egress."""
    line = None
    if shape.delay_ms and not netem_available(lab.ns(a), lab.iface(a, b)):
        line = start_delay_line(lab.ns(a), shape.delay_ms, log_path, dev=lab.iface(a, b))
        shape = Shape(shape.rate_mbit, shape.loss_pct, 0.0)
    for x, y in ((a, b), (b, a)):
        apply_egress(lab.ns(x), lab.iface(x, y), shape)
    return line
