"""The floor under any NFQUEUE (or NFLOG) censor: the same rules, no engine.

Run by ``benchmarks/censor.py`` in the censor's namespace, beside the real
censor, so the two are measured side by side on the same machine. It installs
the datapath that ``gfw-fet-2021`` gets (the client side's packets only, since
its inspectors read nothing the server sends; segments with no payload left
in the kernel, TCP SYNs too, with only connections born under the rules
queued: ``watch_births``), and for every queued packet does the least
a censor can: a TCP payload or a UDP datagram ends the flow's inspection (the
accept mark, which conntrack then keeps, as the engine's verdict does), and
everything is accepted. What is left is the kernel's price for handing a packet
to a process and back, plus the Python of one callback. A censor that does
any work per packet cannot go below it.

With ``tap`` it is the floor of an on-path censor instead: the same rules
with the NFLOG target, and a reader that drains the copies
(``censor_sim.nflog``) and looks at nothing, while the kernel forwards the
packets on its own.

On SIGTERM it prints one JSON line: packets queued (or copies read), and its
CPU split into user and kernel time.

Usage: ``python benchmarks/nfqueue_floor.py INSIDE OUTSIDE [queue|tap [BATCH]]`` as root.
"""

from __future__ import annotations

import json
import resource
import select
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from censor_sim import datapath  # noqa: E402


def main(inside: str, outside: str, mechanism: str = "queue", batch: str = "1") -> int:
    queued = 0
    if mechanism == "tap":
        from censor_sim import nflog

        reader = nflog.Reader([datapath.QUEUE_C2S, datapath.QUEUE_S2C], threshold=int(batch),
                              timeout_cs=0 if int(batch) == 1 else 1)

        def drain() -> None:
            nonlocal queued
            queued += len(reader.read())

        sources = {reader.fileno(): drain}
        closers = [reader.close]
    else:
        from netfilterqueue import NetfilterQueue

        def on_packet(p) -> None:
            nonlocal queued
            queued += 1
            data = p.get_payload()
            ihl = (data[0] & 0x0F) * 4
            proto = data[9]
            has_payload = proto == 17 or (
                proto == 6 and len(data) > ihl + ((data[ihl + 12] >> 4) * 4))
            if has_payload:
                p.set_mark(datapath.MARK_ACCEPT)
            p.accept()

        sources, closers = {}, []
        for num in (datapath.QUEUE_C2S, datapath.QUEUE_S2C):
            q = NetfilterQueue()
            q.bind(num, on_packet, max_len=8192)
            sources[q.get_fd()] = lambda q=q: q.run(block=False)
            closers.append(q.unbind)
    datapath.install(None, datapath.QueueConfig(inside, outside, 12, skip_empty_tcp=True,
                                                mechanism=mechanism, tap_batch=int(batch),
                                                client_side_only=True,
                                                watch_births=True))
    poller = select.epoll()
    for fd in sources:
        poller.register(fd, select.EPOLLIN)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # getrusage, not os.times: the latter counts 10 ms ticks, and a short run's
    # whole CPU can fall under one tick (it read 0, and the floor went missing).
    start = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"event": "ready"}), flush=True)
    try:
        while not stopping:
            try:
                for fd, _ in poller.poll(0.2):
                    sources[fd]()
            except InterruptedError:
                continue
    finally:
        end = resource.getrusage(resource.RUSAGE_SELF)
        datapath.remove()
        for close in closers:
            close()
        user, kernel = end.ru_utime - start.ru_utime, end.ru_stime - start.ru_stime
        print(json.dumps({"event": "counters", "queued": queued, "user_s": round(user, 3),
                          "sys_s": round(kernel, 3),
                          "cpu_per_packet_us": round((user + kernel) / queued * 1e6, 2)
                          if queued else None,
                          "user_per_packet_us": round(user / queued * 1e6, 2)
                          if queued else None}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))
