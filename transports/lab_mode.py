"""Running any registered transport as a lab process (client or server).

``python -m transports.lab_mode client --transport NAME --socks HOST:PORT``
serves a SOCKS5 front; each CONNECT dials the requested bridge through the
transport. ``... server --transport NAME --listen HOST:PORT --upstream
HOST:PORT`` accepts transport connections and relays them to a fixed
upstream, as a bridge relays to its ORPort. Events go to stdout as JSON lines;
SIGTERM exits cleanly. Tor's managed mode is a separate entry point.

The server faces strangers as a bridge does (docs/transports/budgets.md §3): it
takes the descriptors its hard limit allows, and an expected failure (a
handshake that fails, a connection reset, the upstream refusing) is counted and
written as one ``failures`` event a second per kind, never one per connection
and never a traceback. No event names a client's address unless the operator
asks (``--unsafe-logging``): the lab's captures already hold them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from pathlib import Path

from ptcommon.events import EventLog, run_until_stopped

from . import base
from .common.budget import QuietErrors, describe_error, raise_nofile_limit
from .common.hostport import split_hostport
from .common.relay import relay
from .pt import socks5


def _emit(component: str, event: str, **fields: object) -> None:
    EventLog(component).emit_fields(event, fields)


async def run_client(args: argparse.Namespace, stop: asyncio.Event) -> None:
    transport = base.get(args.transport)
    comp = f"{args.transport}-client"
    state = Path(args.state) if args.state else None

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await socks5.read_request(reader, writer)
        except (socks5.SocksError, asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            code = getattr(exc, "reply", None)
            if code is not None:
                with contextlib.suppress(Exception):
                    writer.write(socks5.reply(code))
            writer.close()
            _emit(comp, "socks_error", error=str(exc))
            return
        t0 = time.monotonic()
        try:
            factory = transport.client_factory(state, req.args)
            inner = await factory.dial(req.host, req.port)
        except (OSError, base.TransportError, asyncio.IncompleteReadError) as exc:
            writer.write(socks5.reply(socks5.REP_HOST_UNREACHABLE))
            writer.close()
            _emit(comp, "dial_failed", target=f"{req.host}:{req.port}", error=str(exc))
            return
        writer.write(socks5.reply(socks5.REP_OK))
        await writer.drain()
        _emit(comp, "connected", target=f"{req.host}:{req.port}",
              handshake_ms=round((time.monotonic() - t0) * 1000, 3))
        up, down = await relay((reader, writer), inner)
        _emit(comp, "closed", target=f"{req.host}:{req.port}", up=up, down=down)

    host, port = split_hostport(args.socks)
    server = await asyncio.start_server(handle, host, port)
    bound = server.sockets[0].getsockname()
    _emit(comp, "ready", socks=f"{bound[0]}:{bound[1]}")
    async with server:
        await stop.wait()


async def run_server(args: argparse.Namespace, stop: asyncio.Event) -> None:
    transport = base.get(args.transport)
    comp = f"{args.transport}-server"
    state = Path(args.state) if args.state else None
    budget = raise_nofile_limit()  # before the factory derives its caps from it
    factory = transport.server_factory(state, dict(a.split("=", 1) for a in args.arg))
    if not isinstance(factory, base.StreamServerFactory):
        raise base.TransportError(f"{args.transport}: its server listens itself; run its own "
                          "server module, not the generic lab server")
    up_host, up_port = split_hostport(args.upstream)
    unsafe = bool(getattr(args, "unsafe_logging", False))
    # asyncio's reports (a failed accept() when descriptors run out) and the failures
    # a bridge expects from strangers: one line a second each, with a count.
    failures = QuietErrors(lambda line: _emit(comp, "failures", message=line))
    failures.install(asyncio.get_running_loop())
    flusher = asyncio.create_task(failures.flush_forever())

    def peer_of(writer: asyncio.StreamWriter) -> dict[str, str]:
        return {"peer": str(writer.get_extra_info("peername"))} if unsafe else {}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            inner = await factory.wrap(reader, writer)
        except Exception as exc:  # probes and garbage are normal for a bridge (as managed.py)
            writer.close()
            who = f" from {writer.get_extra_info('peername')}" if unsafe else ""
            failures.report("handshake", f"handshake failed{who}: {describe_error(exc)}")
            return
        try:
            upstream = await asyncio.open_connection(up_host, up_port)
        except OSError as exc:
            inner[1].close()
            failures.report("upstream", f"cannot reach the upstream: {describe_error(exc)}")
            return
        _emit(comp, "accepted", **peer_of(writer))
        up, down = await relay(inner, upstream)
        _emit(comp, "closed", **peer_of(writer), up=up, down=down)

    # The handlers, held here: the loop keeps tasks only weakly, and one whose
    # connection a transport took over would otherwise be collected mid-relay.
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await serve(reader, writer)
        except asyncio.CancelledError:
            # Shutdown: Python 3.11 prints a traceback for each cancelled handler
            # task otherwise.
            writer.close()
        finally:
            handlers.discard(task)

    servers = []
    for spec in args.listen:
        host, port = split_hostport(spec)
        servers.append(await asyncio.start_server(handle, host, port))
    _emit(comp, "ready", listen=[f"{s.sockets[0].getsockname()[0]}:{s.sockets[0].getsockname()[1]}"
                                 for s in servers], descriptor_budget=budget)
    await stop.wait()
    for s in servers:
        s.close()
    for task in list(handlers):
        task.cancel()
    if handlers:
        await asyncio.wait(list(handlers), timeout=2.0)
    flusher.cancel()
    failures.flush(final=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m transports.lab_mode", description=__doc__)
    sub = p.add_subparsers(dest="role", required=True)
    c = sub.add_parser("client", help="SOCKS5 front dialing through the transport")
    c.add_argument("--transport", required=True)
    c.add_argument("--socks", default="127.0.0.1:1080", help="HOST:PORT to listen on")
    c.add_argument("--state", help="state directory")
    s = sub.add_parser("server", help="accept transport connections, relay to upstream")
    s.add_argument("--transport", required=True)
    s.add_argument("--listen", action="append", required=True, help="HOST:PORT (repeatable)")
    s.add_argument("--upstream", required=True, help="HOST:PORT to relay to")
    s.add_argument("--state", help="state directory")
    s.add_argument("--arg", action="append", default=[], help="server option KEY=VALUE")
    s.add_argument("--unsafe-logging", action="store_true",
                   help="name clients' addresses in the events (off: the lab's captures "
                        "hold them already)")
    args = p.parse_args(argv)
    run = run_client if args.role == "client" else run_server
    return run_until_stopped(f"{args.transport}-{args.role}", lambda stop: run(args, stop),
                             config_errors=(base.TransportError, ValueError))


if __name__ == "__main__":
    raise SystemExit(main())
