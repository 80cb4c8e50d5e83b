"""What a meek client's TLS ClientHello looks like: captured from a real connection.

Why: a censor's JA3/JA4 blocklist needs the fingerprints of the clients under
test, and those depend on the local OpenSSL (Python's ssl) or on the curl_cffi
profile. :func:`capture_client_hellos` points our round tripper at a loopback
listener that records the first flight of each connection and closes it; the
experiment then puts the result in the censor profile. ``python -m
transports.meek.fingerprint [--tls chrome] [-n 3]`` prints JA3 and JA4.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from ptcommon.tlshello import ClientHello, NeedMore, ja3, ja4, parse_client_hello

from .client import MeekArgs, round_tripper

SNI = "front.lab"


async def capture_client_hellos(tls: str, count: int = 1, sni: str = SNI) -> list[ClientHello]:
    """``count`` ClientHellos from fresh meek round trippers using ``tls``."""
    hellos: list[ClientHello] = []
    got = asyncio.Event()

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = b""
        with contextlib.suppress(Exception):
            while len(stream) < 1 << 16:
                chunk = await asyncio.wait_for(reader.read(4096), 5)
                if not chunk:
                    break
                stream += chunk
                try:
                    hello = parse_client_hello(stream)
                except NeedMore:
                    continue
                if hello is not None:
                    hellos.append(hello)
                    got.set()
                break
        writer.close()

    server = await asyncio.start_server(record, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        for _ in range(count):
            got.clear()
            rt = round_tripper(MeekArgs(f"https://{sni}:{port}/", sni, tls),
                               resolve={sni: "127.0.0.1"})
            with contextlib.suppress(Exception):  # the "server" hangs up mid-handshake
                await asyncio.wait_for(rt.post(b"", "0" * 32), 5)
            await rt.close()
            await asyncio.wait_for(got.wait(), 5)
    finally:
        server.close()
    return hellos


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transports.meek.fingerprint",
                                description="JA3/JA4 of a meek client's ClientHello.")
    p.add_argument("--tls", default="python")
    p.add_argument("-n", type=int, default=1)
    args = p.parse_args(argv)
    for hello in asyncio.run(capture_client_hellos(args.tls, args.n)):
        print(f"ja3={ja3(hello)} ja4={ja4(hello)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
