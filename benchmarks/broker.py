"""The broker under load: 1,000 distinct proxies polling from 1,000 lab addresses.

A lab with one proxy node that owns 198.19.240.0/22 (a topology extension);
our broker (``python -m broker``) on the broker node with Tor's timers (10 s
long polls); on the proxy node, N simulated proxies, each from its own
address and with its own Sid, polling every 5 s as Debian's 2.5.1 proxy does
and answering at once when matched; on the client node, client polls at a
stated rate. Printed: requests and non-2xx answers by endpoint, client
rendezvous latency (poll → answer) p50/p99, ``/answer`` latency, and the
broker's resident memory (now and peak).

Run as root: ``.venv/bin/python benchmarks/broker.py [--proxies 1000 --client-rate 20
--seconds 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ptcommon.events import READY_PATTERN

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PREFIX = "198.19.240.0/22"
OFFER = json.dumps({"type": "offer", "sdp": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\n"})
ANSWER = json.dumps({"type": "answer", "sdp": "v=0\r\no=- 2 2 IN IP4 0.0.0.0\r\ns=-\r\n"})


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 2)


async def gen_proxies(url: str, n: int, prefix: str, seconds: float) -> dict:
    import aiohttp

    from transports.snowflake import messages as m

    hosts = list(ipaddress.ip_network(prefix).hosts())[:n]
    stats = {"requests": {"proxy": 0, "answer": 0}, "non2xx": {"proxy": 0, "answer": 0},
             "errors": 0, "matches": 0, "answer_latency": []}
    deadline = time.monotonic() + seconds

    async def one(i: int, addr: str) -> None:
        conn = aiohttp.TCPConnector(local_addr=(addr, 0), limit=1)
        async with aiohttp.ClientSession(connector=conn) as s:
            await asyncio.sleep(5 * i / n)  # spread the first polls over one interval
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                sid = f"bench-{i}-{int(t0 * 1000)}"
                body = m.ProxyPoll(sid, "standalone", "unrestricted", 0, "^snowflake.lab$")
                try:
                    async with s.post(url + "proxy", data=body.encode()) as r:
                        stats["requests"]["proxy"] += 1
                        data = await r.read()
                        if r.status != 200:
                            stats["non2xx"]["proxy"] += 1
                            continue
                    resp = m.ProxyPollResponse.decode(data)
                    if resp.status == m.STATUS_MATCH:
                        stats["matches"] += 1
                        t1 = time.monotonic()
                        async with s.post(url + "answer",
                                          data=m.AnswerRequest(sid, ANSWER).encode()) as r:
                            stats["requests"]["answer"] += 1
                            await r.read()
                            stats["answer_latency"].append(time.monotonic() - t1)
                            if r.status != 200:
                                stats["non2xx"]["answer"] += 1
                except (aiohttp.ClientError, OSError, m.MessageError):
                    stats["errors"] += 1
                await asyncio.sleep(max(0.0, 5.0 - (time.monotonic() - t0)))

    await asyncio.gather(*(one(i, str(h)) for i, h in enumerate(hosts)))
    lat = stats.pop("answer_latency")
    stats["answer_p50_ms"], stats["answer_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
    return stats


async def gen_clients(url: str, rate: float, seconds: float) -> dict:
    import aiohttp

    from transports.snowflake import messages as m

    stats = {"requests": 0, "non2xx": 0, "answered": 0, "denied": 0, "timeouts": 0,
             "errors": 0}
    lat: list[float] = []
    body = m.ClientPoll(OFFER, "restricted").encode()

    async def one(s: aiohttp.ClientSession) -> None:
        t0 = time.monotonic()
        try:
            async with s.post(url + "client", data=body) as r:
                stats["requests"] += 1
                data = await r.read()
                if r.status != 200:
                    stats["non2xx"] += 1
                    return
            resp = m.ClientPollResponse.decode(data)
            if resp.answer:
                stats["answered"] += 1
                lat.append(time.monotonic() - t0)
            elif resp.error == m.ERR_NO_PROXIES:
                stats["denied"] += 1
            else:
                stats["timeouts"] += 1
        except (aiohttp.ClientError, OSError, m.MessageError):
            stats["errors"] += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        tasks = []
        start = time.monotonic()
        k = 0
        while time.monotonic() - start < seconds:
            tasks.append(asyncio.create_task(one(s)))
            k += 1
            await asyncio.sleep(max(0.0, start + k / rate - time.monotonic()))
        await asyncio.gather(*tasks)
    stats["rendezvous_p50_ms"], stats["rendezvous_p99_ms"] = pct(lat, 0.5), pct(lat, 0.99)
    return stats


def rss_kib(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--proxies", type=int, default=1000)
    ap.add_argument("--client-rate", type=float, default=20.0, help="client polls per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--gen", choices=["proxies", "clients"], help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gen == "proxies":
        print(json.dumps(asyncio.run(gen_proxies(args.url, args.proxies, PREFIX, args.seconds))))
        return 0
    if args.gen == "clients":
        print(json.dumps(asyncio.run(gen_clients(args.url, args.client_rate, args.seconds))))
        return 0

    from netns.lab import Lab
    from netns.process import LabProcess
    from netns.topology import default_topology

    topo = default_topology(proxies=1)
    topo.add_prefix("proxy0", PREFIX)
    with Lab(topo) as lab, tempfile.TemporaryDirectory() as td:
        url = f"http://{lab.addr('broker')}:8080/"
        broker = LabProcess(lab.ns("broker"), [
            sys.executable, "-m", "broker", "--addr", f"{lab.addr('broker')}:8080",
            "--disable-tls", "--allowed-relay-pattern", "^snowflake.lab$",
            "--default-relay-pattern", "^snowflake.lab$", "--bridge-list-path",
            str(_bridges(Path(td)))], "broker", Path(td) / "broker.log").start()
        broker.wait_log(READY_PATTERN, timeout=20)
        me = str(Path(__file__).resolve())
        common = ["--url", url, "--seconds", str(args.seconds)]
        procs = {
            "proxies": subprocess.Popen(["ip", "netns", "exec", lab.ns("proxy0"), sys.executable,
                                         me, "--gen", "proxies", "--proxies", str(args.proxies),
                                         *common], stdout=subprocess.PIPE, text=True),
            "clients": subprocess.Popen(["ip", "netns", "exec", lab.ns("client"), sys.executable,
                                         me, "--gen", "clients", "--client-rate",
                                         str(args.client_rate), *common],
                                        stdout=subprocess.PIPE, text=True),
        }
        time.sleep(args.seconds * 0.8)
        assert broker.pid is not None
        rss_mid = rss_kib(broker.pid)
        out = {k: json.loads(p.communicate(timeout=args.seconds + 60)[0]) for k, p in
               procs.items()}
        rss, hwm = rss_kib(broker.pid)
        broker.stop()
        final = [json.loads(x) for x in broker.log_text().splitlines() if '"stats"' in x]
    px, cl = out["proxies"], out["clients"]
    non2xx = sum(px["non2xx"].values()) + cl["non2xx"]
    print(f"broker under {args.proxies} proxies from {args.proxies} addresses "
          f"(5 s poll interval, 10 s long polls) and {args.client_rate:g} client polls/s, "
          f"{args.seconds:g} s:")
    print(f"  proxy polls {px['requests']['proxy']}, answers {px['requests']['answer']}, "
          f"client polls {cl['requests']}; non-2xx {non2xx}; transport errors "
          f"{px['errors'] + cl['errors']}")
    print(f"  clients: answered {cl['answered']}, denied {cl['denied']}, timed out "
          f"{cl['timeouts']}; rendezvous p50 {cl['rendezvous_p50_ms']} ms, "
          f"p99 {cl['rendezvous_p99_ms']} ms")
    print(f"  /answer p50 {px['answer_p50_ms']} ms, p99 {px['answer_p99_ms']} ms")
    print(f"  broker RSS {rss_mid[0] / 1024:.1f} MiB under load, {rss / 1024:.1f} MiB at the "
          f"end, peak {hwm / 1024:.1f} MiB")
    if final:
        print(f"  broker counters: {final[-1]}")
    return 0 if non2xx == 0 else 1


def _bridges(tmp: Path) -> Path:
    from transports.snowflake.messages import DEFAULT_BRIDGE_FINGERPRINT

    p = tmp / "bridges.jsonl"
    p.write_text(json.dumps({"displayName": "lab", "webSocketAddress": "wss://snowflake.lab/",
                             "fingerprint": DEFAULT_BRIDGE_FINGERPRINT}) + "\n")
    return p


if __name__ == "__main__":
    raise SystemExit(main())
