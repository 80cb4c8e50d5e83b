"""Snowflake goodput: our proxy against Debian's, with Debian's client and our bridge fixed.

One lab, one run: Debian's ``snowflake-client`` 2.5.1 on the client node, our
broker and our bridge; the proxy slot is filled alternately by our aiortc
proxy (``ptlab snowflake-proxy``) and Debian's ``snowflake-proxy``, each on
proxy0, for ``--rounds`` rounds. Each round moves ``--mb`` MB up and the same
down on one stream, SHA-256 checked. Printed: MB/s per round and the ratio of
medians (ours ÷ Debian's).

Run as root: ``.venv/bin/python benchmarks/snowflake_goodput.py [--mb 20 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


async def one_round(lab, out: Path, which: str, mb: int) -> float:
    from tests.support.snowflakelab import MB, Rig, socks_open, upload_and_download

    rig = Rig(lab, out)
    try:
        (rig.our_proxy if which == "ours" else rig.debian_proxy)(0)
        port = rig.debian_client()
        reader, writer = await socks_open(lab, port, None)
        took = await upload_and_download(reader, writer, mb * MB)
        writer.close()
        return 2 * mb / took
    finally:
        rig.close()


async def main(mb: int, rounds: int) -> None:
    from netns.lab import Lab
    from netns.topology import default_topology

    lab = Lab(default_topology(proxies=1)).up()
    rates: dict[str, list[float]] = {"ours": [], "debian": []}
    try:
        with tempfile.TemporaryDirectory(prefix="ptl-sfbench-") as tmp:
            for r in range(rounds):
                for which in ("ours", "debian"):
                    out = Path(tmp) / f"{which}-{r}"
                    out.mkdir()
                    rate = await one_round(lab, out, which, mb)
                    rates[which].append(rate)
                    print(f"round {r + 1} {which:6s} proxy: {rate:6.2f} MB/s "
                          f"({mb} MB up + {mb} MB down)", flush=True)
    finally:
        lab.down()
    ours, theirs = statistics.median(rates["ours"]), statistics.median(rates["debian"])
    print(f"median goodput: ours {ours:.2f} MB/s, Debian {theirs:.2f} MB/s, "
          f"ours / Debian = {ours / theirs:.2f}")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    asyncio.run(main(a.mb, a.rounds))
