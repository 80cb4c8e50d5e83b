"""Tor PT managed mode for every registered transport (pt-spec v1).

Tor, ptadapter or the lab runner starts ``python -m transports.pt`` (``ptlab
pt``) with the ``TOR_PT_*`` environment. As a client we open one SOCKS5
listener on 127.0.0.1 per requested transport; each CONNECT carries the bridge
arguments in RFC 1929 fields and is dialed with
``transport.client_factory(state, args).dial(host, port)``. As a server we
listen where ``TOR_PT_SERVER_BINDADDR`` says, let the transport's server factory
``wrap`` each connection, and relay the inner stream to the ORPort, or to the
Extended ORPort (SafeCookie, USERADDR, TRANSPORT) when tor offers one.

A server factory may publish bridge-line arguments (obfs4's ``cert=``,
``iat-mode=``) through an optional ``smethod_args() -> dict[str, str]``; they
go out as ``SMETHOD ... ARGS:``. A factory may also have a
``smethod_address() -> (host, port)``: the SMETHOD line then announces that
address instead of the bound one (WebTunnel's synthetic address,
docs/transports/webtunnel.md §4); the listener still binds where tor said.

Lifetime follows the spec's shutdown section: stdin closing (when
``TOR_PT_EXIT_ON_STDIN_CLOSE=1``), SIGTERM or the parent's death end the
process now; a first SIGINT closes the listeners and waits for open
connections, a second SIGINT ends it now. Errors reach tor as ``LOG`` lines,
without client addresses, because tor's own logs scrub them too. A server
raises its descriptor limit to the hard one and derives its caps from it, and
running out of a resource is one ``LOG`` line a second, not a traceback per
failed ``accept()`` (transports/common/budget.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

from .. import base
from ..common.budget import (
    QuietErrors,
    describe_error,
    is_resource_error,
    raise_nofile_limit,
    unauthenticated_cap,
)
from ..common.relay import relay
from ..common.upstream import open_bounded
from . import environment, extorport, messages, socks5
from .environment import ClientConfig, PTEnvError, ServerConfig

SOCKS_TIMEOUT = 5.0  # the spec's limit on SOCKS negotiation
PARENT_POLL = 1.0
DEFAULT_BINDADDR = ("0.0.0.0", 0)  # no BINDADDR: a bridge is there to be reached

Closable = asyncio.Server | base.Listening
"""What the PT layer stops on shutdown: its own listeners, or a transport's."""

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _log(severity: str, message: str) -> None:
    messages.log(severity, message)


# Running out of descriptors or buffers: one LOG line a second, never one per failure.
_quiet = QuietErrors(lambda line: _log("warning", line))
# Probes and garbage are normal for a bridge: at most one line a second about them,
# which counts the rest, so a flood of strangers cannot fill the log.
_quiet_info = QuietErrors(lambda line: _log("info", line))


class Lifetime:
    """When to stop: ``now`` ends everything, ``drain`` only stops accepting."""

    def __init__(self) -> None:
        self.now = asyncio.Event()
        self.drain = asyncio.Event()
        self._sigints = 0
        self._tasks: set[asyncio.Task] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._parent_task: asyncio.Task | None = None

    def install(self, exit_on_stdin_close: bool) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.now.set)
        loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        if exit_on_stdin_close:
            threading.Thread(target=self._watch_stdin, args=(loop,), daemon=True,
                             name="pt-stdin").start()
        self._parent_task = loop.create_task(self._watch_parent(os.getppid()))

    def _on_sigint(self) -> None:
        self._sigints += 1
        (self.drain if self._sigints == 1 else self.now).set()

    def _watch_stdin(self, loop: asyncio.AbstractEventLoop) -> None:
        # A thread, because stdin may be a pipe, a tty, /dev/null or even closed,
        # and a blocking read handles all of them; EOF or an error means "go".
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        with contextlib.suppress(RuntimeError):  # loop already closed
            loop.call_soon_threadsafe(self.now.set)

    async def _watch_parent(self, ppid: int) -> None:
        # Re-parenting (to init or a subreaper) is how a U*IX child sees its parent die.
        while os.getppid() == ppid:
            await asyncio.sleep(PARENT_POLL)
        self.now.set()

    def track(self, handler: Handler) -> Handler:
        """Wrap a connection handler so shutdown can wait for it or cancel it.

        Being cancelled (by :meth:`wait`, or by ``asyncio.run`` at exit) ends a
        handler quietly: nobody awaits these tasks, and Python 3.11's
        ``StreamReaderProtocol`` logs "Exception in callback ..." with a
        traceback for a cancelled ``client_connected_cb`` task (3.12 no longer
        does). Any other exception still propagates and is logged.
        """
        async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            self._idle.clear()
            try:
                await handler(reader, writer)
            except asyncio.CancelledError:
                return  # shutdown: the process is about to end the connection anyway
            finally:
                self._tasks.discard(task)
                if not self._tasks:
                    self._idle.set()
        return tracked

    async def wait(self, servers: Sequence[Closable]) -> None:
        """Block until told to stop, then stop as asked."""
        await _first(self.now.wait(), self.drain.wait())
        for s in servers:
            s.close()
        if not self.now.is_set():
            await _first(self.now.wait(), self._idle.wait())
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
        if self._parent_task is not None:
            self._parent_task.cancel()


async def _first(*aws: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


def _lookup(name: str) -> base.Transport | None:
    """The registered transport, or None (logged) for a name we do not know.

    The spec says to ignore unknown names rather than answer with an error.
    """
    try:
        return base.get(name)
    except base.TransportError:
        _log("warning", f"unknown transport {name!r} ignored (known: {', '.join(base.names())})")
        return None


def _offered(names: list[str], role: base.Role,
             refuse: Callable[[str, str], None]) -> Iterator[tuple[str, base.Transport]]:
    """The transports tor asked for that we have in ``role``.

    Malformed and unknown names are passed over (the spec says to ignore them);
    a known transport without that role is refused with its ``*METHOD-ERROR``.
    """
    for name in names:
        if not environment.is_transport_name(name):
            continue
        transport = _lookup(name)
        if transport is None:
            continue
        if not transport.has_role(role):
            refuse(name, f"{role} not supported")
            continue
        yield name, transport


async def _relay(name: str, a: base.Streams, b: base.Streams) -> None:
    """:func:`relay`; and log it when a transport session ended on bad frames.

    A session that ends on a frame failing authentication looks like an EOF to
    the application (obfs4: ``get_extra_info("session_error")``), so say so in
    the log (stdout to the parent, never the network), without addresses.
    """
    try:
        await relay(a, b)
    finally:
        for _, writer in (a, b):
            error = writer.get_extra_info("session_error")
            if error is not None:
                # One line a second at most: a censor can break many sessions at once.
                _quiet.report(f"{name}-framing", f"{name}: session ended on a framing error: "
                                                 f"{describe_error(error)}")


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def _dial_failure_code(exc: BaseException) -> int:
    if isinstance(exc, ConnectionRefusedError):
        return socks5.REP_REFUSED
    if isinstance(exc, OSError | TimeoutError):
        return socks5.REP_HOST_UNREACHABLE
    return socks5.REP_FAILURE


def _socks_handler(name: str, transport: base.Transport, state: Path) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await asyncio.wait_for(socks5.read_request(reader, writer), SOCKS_TIMEOUT)
        except (socks5.SocksError, asyncio.IncompleteReadError, TimeoutError, OSError,
                ValueError) as exc:
            code = getattr(exc, "reply", None)
            if code is not None:
                with contextlib.suppress(Exception):
                    writer.write(socks5.reply(code))
            await _close(writer)
            _log("info", f"{name}: SOCKS negotiation failed: {describe_error(exc)}")
            return
        try:
            inner = await transport.client_factory(state, req.args).dial(req.host, req.port)
        except Exception as exc:  # any transport failure must become a SOCKS reply
            with contextlib.suppress(Exception):
                writer.write(socks5.reply(_dial_failure_code(exc)))
            await _close(writer)
            _log("warning", f"{name}: connecting through the transport failed: "
                            f"{describe_error(exc)}")
            return
        try:
            writer.write(socks5.reply(socks5.REP_OK))
            await writer.drain()
        except OSError:
            await _close(inner[1])
            await _close(writer)
            return
        await _relay(name, (reader, writer), inner)
    return handle


async def start_client(cfg: ClientConfig, life: Lifetime) -> list[asyncio.Server] | None:
    """Announce CMETHODs; None means a fatal error was already reported."""
    if cfg.proxy is not None:
        # Each transport dials by itself (the Transport API has no proxy hook),
        # so an upstream proxy cannot be honoured; the spec says to say so and exit.
        messages.proxy_error(f"{cfg.proxy.scheme} upstream proxies are not supported")
        return None
    servers = []
    for name, transport in _offered(cfg.transports, "client", messages.cmethod_error):
        handler = life.track(_socks_handler(name, transport, cfg.state_location))
        try:
            server = await asyncio.start_server(handler, "127.0.0.1", 0)
        except OSError as exc:
            messages.cmethod_error(name, f"cannot listen: {exc}")
            continue
        host, port = server.sockets[0].getsockname()[:2]
        messages.cmethod(name, host, port)
        servers.append(server)
    messages.cmethods_done()
    return servers


async def _hand_to_tor(name: str, cfg: ServerConfig, inner: base.Streams,
                      client_addr: str, read_buffer: int | None = None) -> None:
    """Connect to tor's Extended ORPort (or ORPort) and relay ``inner`` there; with
    ``read_buffer``, tor's side is read through a bounded buffer
    (:mod:`transports.common.upstream`)."""
    try:
        if cfg.ext_orport is not None:
            assert cfg.auth_cookie_file is not None
            upstream = await extorport.open_extorport(
                *cfg.ext_orport, cfg.auth_cookie_file, name, client_addr,
                read_buffer=read_buffer)
        else:
            assert cfg.orport is not None
            upstream = await (asyncio.open_connection(*cfg.orport) if read_buffer is None
                              else open_bounded(*cfg.orport, read_buffer))
    except (OSError, extorport.ExtORPortError) as exc:
        which = "Extended ORPort" if cfg.ext_orport else "ORPort"
        if is_resource_error(exc):
            _quiet.report(f"{name}-handoff", f"{name}: cannot hand the connection to the "
                                             f"{which}: {describe_error(exc)}")
        else:
            _log("error", f"{name}: cannot hand the connection to the {which}: "
                          f"{describe_error(exc)}")
        await _close(inner[1])
        return
    await _relay(name, inner, upstream)


def _orport_handler(name: str, factory: base.StreamServerFactory,
                    cfg: ServerConfig) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client_addr = messages.format_addr(peer[0], peer[1]) if peer else "0.0.0.0:0"
        try:
            inner = await factory.wrap(reader, writer)
        except Exception as exc:  # probes and garbage are normal for a bridge
            await _close(writer)
            _quiet_info.report(f"{name}-handshake",
                               f"{name}: handshake failed: {describe_error(exc)}")
            return
        await _hand_to_tor(name, cfg, inner, client_addr)
        await _close(writer)
    return handle


async def _start_one_server(name: str, transport: base.Transport, cfg: ServerConfig,
                            life: Lifetime) -> Closable | None:
    try:
        factory = transport.server_factory(cfg.state_location, cfg.options.get(name, {}))
        args = dict(factory.smethod_args())
        messages.format_smethod(name, "0.0.0.0", 0, args)  # validate ARGS before listening
    except Exception as exc:  # bad options, unreadable state, ...: report, keep the others
        messages.smethod_error(name, str(exc) or repr(exc))
        return None
    host, port = cfg.bindaddrs.get(name, DEFAULT_BINDADDR)
    try:
        if isinstance(factory, base.ListeningServerFactory):
            # A transport with its own listener (meek's HTTP server, Snowflake's
            # WebSocket bridge) hands over each inner stream with the client
            # address it learned; one that budgets what it holds for clients
            # asks for tor's side to be read through a bounded buffer.
            read_buffer = getattr(factory, "upstream_read_buffer", None)

            async def handoff(inner: base.Streams, client_addr: str) -> None:
                await _hand_to_tor(name, cfg, inner, client_addr, read_buffer)
            listening = await factory.listen(host, port, handoff)
            server: Closable = listening
            bound_host, bound_port = listening.host, listening.port
        else:
            accepting = await asyncio.start_server(
                life.track(_orport_handler(name, factory, cfg)), host, port)
            server = accepting
            bound_host, bound_port = accepting.sockets[0].getsockname()[:2]
    except OSError as exc:
        messages.smethod_error(name, f"cannot listen on {messages.format_addr(host, port)}: {exc}")
        return None
    announce = getattr(factory, "smethod_address", None)
    if callable(announce):
        # A transport whose clients never dial the bind address (WebTunnel: they
        # dial its url) may announce another one for tor's bridge line.
        bound_host, bound_port = announce()
    messages.smethod(name, bound_host, bound_port, args)
    return server


async def start_server(cfg: ServerConfig, life: Lifetime) -> list[Closable]:
    """Announce SMETHODs."""
    servers = []
    for name, transport in _offered(cfg.transports, "server", messages.smethod_error):
        server = await _start_one_server(name, transport, cfg, life)
        if server is not None:
            servers.append(server)
    messages.smethods_done()
    return servers


async def run(cfg: ClientConfig | ServerConfig) -> int:
    """Serve until told to stop; the exit status."""
    life = Lifetime()
    life.install(cfg.exit_on_stdin_close)
    _quiet.install(asyncio.get_running_loop())
    # What an interval left out is written a second later, not lost when a flood stops.
    flushers = [asyncio.create_task(q.flush_forever()) for q in (_quiet, _quiet_info)]
    try:
        return await _serve(cfg, life)
    finally:
        for task in flushers:
            task.cancel()
        for q in (_quiet, _quiet_info):
            q.flush(final=True)


async def _serve(cfg: ClientConfig | ServerConfig, life: Lifetime) -> int:
    if isinstance(cfg, ServerConfig):
        # A bridge faces strangers: take every descriptor the hard limit allows, and
        # derive the caps from that (transports/common/budget.py).
        budget = raise_nofile_limit()
        _log("notice", f"descriptor budget {budget}; at most {unauthenticated_cap(budget)} "
                       "connections may wait for a handshake")
    servers: Sequence[Closable] | None
    if isinstance(cfg, ClientConfig):
        servers = await start_client(cfg, life)
    else:
        servers = await start_server(cfg, life)
    if not servers:
        if servers is not None:
            _log("error", "no transport could be started")
        life.now.set()
        await life.wait([])
        return 1
    await life.wait(servers)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``ptlab pt`` / ``python -m transports.pt``: managed mode from the environment."""
    parser = argparse.ArgumentParser(
        prog="ptlab pt",
        description="Run ptlab transports as a Tor managed pluggable transport. "
                    "All configuration comes from the TOR_PT_* environment variables "
                    "(pt-spec v1); tor, ptadapter or the lab runner sets them.")
    parser.parse_args(argv)
    env = os.environ
    try:
        messages.version(environment.check_version(env))
    except PTEnvError as exc:
        messages.emit(exc.line())
        if "TOR_PT_MANAGED_TRANSPORT_VER" not in env:
            print("ptlab pt: not started as a managed PT (no TOR_PT_* environment); "
                  "see --help", file=sys.stderr)
        return 1
    try:
        cfg = environment.parse(env)
        cfg.state_location.mkdir(mode=0o700, parents=True, exist_ok=True)
    except PTEnvError as exc:
        messages.emit(exc.line())
        return 1
    except OSError as exc:
        messages.env_error(f"cannot create TOR_PT_STATE_LOCATION: {exc}")
        return 1
    return asyncio.run(run(cfg))
