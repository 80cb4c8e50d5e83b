"""A userspace delay line for kernels without netem (docs/architecture.md §4.2).

Forwarded packets of the core router go to an NFQUEUE (the xtables target
through iptables-nft: this kernel has no nft ``queue`` statement); this
process holds each one for the configured delay and then accepts it, in
arrival order. Every packet crosses the core router once per direction, so a
delay of D adds 2·D to every client↔server RTT.

Its throughput cap is what one Python process can verdict per second;
``benchmarks/delayline.py`` measures it, and reports must state the RTT they
ran with.

``python -m netns.delayline --queue N --delay-ms D`` (run it inside the namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal
import sys
import time


def _emit(event: str, **fields: object) -> None:
    rec = {"ts": round(time.time(), 6), "component": "delayline", "event": event, **fields}
    print(json.dumps(rec), flush=True)


class DelayLine:
    """Holds queued packets for `delay` seconds, then accepts them (FIFO)."""

    def __init__(self, queue_num: int, delay: float, max_len: int = 65536) -> None:
        from netfilterqueue import NetfilterQueue

        self.delay = delay
        self.held: collections.deque = collections.deque()
        self.nfq = NetfilterQueue()
        self.nfq.bind(queue_num, self._on_packet, max_len=max_len)
        self.passed = 0
        self.max_held = 0
        self._timer: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def _on_packet(self, pkt) -> None:
        now = time.monotonic()
        self.held.append((now + self.delay, pkt))
        self.max_held = max(self.max_held, len(self.held))
        if self._timer is None and self.loop is not None:
            self._timer = self.loop.call_at(self.loop.time() + self.delay, self._release)

    def _release(self) -> None:
        self._timer = None
        now = time.monotonic()
        while self.held and self.held[0][0] <= now:
            _, pkt = self.held.popleft()
            pkt.accept()
            self.passed += 1
        if self.held and self.loop is not None:
            wait = max(self.held[0][0] - now, 0.0)
            self._timer = self.loop.call_at(self.loop.time() + wait, self._release)

    async def run(self, stop: asyncio.Event) -> None:
        self.loop = asyncio.get_running_loop()
        fd = self.nfq.get_fd()
        self.loop.add_reader(fd, lambda: self.nfq.run(block=False))
        try:
            await stop.wait()
        finally:
            self.loop.remove_reader(fd)
            while self.held:  # let nothing in flight be lost
                self.held.popleft()[1].accept()
                self.passed += 1
            self.nfq.unbind()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m netns.delayline", description=__doc__)
    p.add_argument("--queue", type=int, required=True, help="NFQUEUE number")
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay to add")
    args = p.parse_args(argv)
    if not 0 <= args.delay_ms <= 10_000:
        print("delayline: --delay-ms must be between 0 and 10000", file=sys.stderr)
        return 2

    async def amain() -> None:
        line = DelayLine(args.queue, args.delay_ms / 1000)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        _emit("ready", queue=args.queue, delay_ms=args.delay_ms)
        await line.run(stop)
        _emit("stopped", passed=line.passed, max_held=line.max_held)

    try:
        asyncio.run(amain())
    except ImportError:
        print("delayline: the NetfilterQueue binding is missing (scripts/setup installs it)",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"delayline: {exc} (needs root / CAP_NET_ADMIN)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
