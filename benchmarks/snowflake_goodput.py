"""Snowflake goodput: our proxy against Debian's, with the client and our bridge fixed.

One lab, one run: Debian's ``snowflake-client`` 2.5.1 (or, with ``--client
ours``, our client) on the client node, our broker and our bridge; the proxy
slot is filled alternately by our aiortc proxy (``ptlab snowflake-proxy``) and
Debian's ``snowflake-proxy``, each on proxy0, for ``--rounds`` rounds.

Each round waits until the proxy polls the broker, starts the client, and
times three things on one SOCKS stream:

- **setup**: from the SOCKS connection to the first answer through the
  proxy (rendezvous, ICE, DTLS, SCTP, KCP and smux);
- **up**: ``--mb`` MB from the client to the data server, SHA-256 checked;
- **down**: the same back.

Goodput is the bytes of up and down over their time; setup is reported
beside it, not inside it. ``--delay-ms`` (added round-trip time) and ``--loss``
(percent, each direction) shape the censor-to-core link as an experiment's
topology does, so the client-to-proxy path is long and lossy. Printed: each
round, then the medians and ours ÷ Debian's.

Run as root: ``.venv/bin/python benchmarks/snowflake_goodput.py [--mb 10 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass
class Round:
    setup_s: float
    up_mb_s: float
    down_mb_s: float
    goodput_mb_s: float


async def one_round(lab, out: Path, which: str, client: str, mb: int) -> Round:
    from tests.support.snowflakelab import MB, Rig, download, our_args, socks_open, upload

    rig = Rig(lab, out)
    try:
        (rig.our_proxy if which == "ours" else rig.debian_proxy)(0)
        await asyncio.to_thread(rig.wait_available, 1)
        port = rig.our_client() if client == "ours" else rig.debian_client()
        t_setup = time.monotonic()
        reader, writer = await socks_open(lab, port, our_args(rig) if client == "ours" else None)
        writer.write(b"U 1\nx")
        await writer.drain()
        await asyncio.wait_for(reader.readline(), 120)
        setup = time.monotonic() - t_setup
        up_took = await upload(reader, writer, mb * MB)
        down_took = await download(reader, writer, mb * MB)
        writer.close()
        return Round(setup, mb / up_took, mb / down_took, 2 * mb / (up_took + down_took))
    finally:
        rig.close()


def impair(lab, delay_ms: float, loss: float, log: Path):
    """Delay and loss on the censor-to-core link, as an experiment's topology sets them:
    every client-to-proxy packet crosses it, the proxy-to-bridge WebSocket does not."""
    from netns import shaping

    return shaping.shape_link(lab, "inet", "censor", shaping.Shape(0.0, loss, delay_ms / 2), log)


async def main(mb: int, rounds: int, client: str, delay_ms: float, loss: float) -> None:
    from netns.lab import Lab
    from netns.topology import default_topology

    lab = Lab(default_topology(proxies=1)).up()
    results: dict[str, list[Round]] = {"ours": [], "debian": []}
    line = None
    try:
        with tempfile.TemporaryDirectory(prefix="ptl-sfbench-") as tmp:
            if delay_ms or loss:
                line = impair(lab, delay_ms, loss, Path(tmp) / "delayline.log")
            for r in range(rounds):
                for which in ("ours", "debian"):
                    out = Path(tmp) / f"{which}-{r}"
                    out.mkdir()
                    res = await one_round(lab, out, which, client, mb)
                    results[which].append(res)
                    print(f"round {r + 1} {which:6s} proxy: {res.goodput_mb_s:6.2f} MB/s "
                          f"(up {res.up_mb_s:.2f}, down {res.down_mb_s:.2f}; {mb} MB each way), "
                          f"setup {res.setup_s:.2f} s", flush=True)
    finally:
        if line is not None:
            line.stop()
        lab.down()
    med = {k: Round(*(statistics.median(getattr(x, f) for x in v)
                      for f in ("setup_s", "up_mb_s", "down_mb_s", "goodput_mb_s")))
           for k, v in results.items()}
    ours, theirs = med["ours"], med["debian"]
    print(f"client {client}, delay {delay_ms} ms, loss {loss} %: median goodput ours "
          f"{ours.goodput_mb_s:.2f} MB/s, Debian {theirs.goodput_mb_s:.2f} MB/s, "
          f"ours / Debian = {ours.goodput_mb_s / theirs.goodput_mb_s:.2f} "
          f"(up {ours.up_mb_s / theirs.up_mb_s:.2f}, down {ours.down_mb_s / theirs.down_mb_s:.2f});"
          f" setup ours {ours.setup_s:.2f} s, Debian {theirs.setup_s:.2f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--client", choices=("debian", "ours"), default="debian")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="added round-trip time")
    ap.add_argument("--loss", type=float, default=0.0, help="percent, each direction")
    a = ap.parse_args()
    asyncio.run(main(a.mb, a.rounds, a.client, a.delay_ms, a.loss))
