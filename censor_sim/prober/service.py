"""The probe service: the censor asks, the prober probes and answers.

``python -m censor_sim.prober serve --listen HOST:PORT`` runs in the lab's
prober namespace, the censor's own vantage point (docs/architecture.md §1.1). The
censor sends one JSON line per suspicious flow::

    {"id": ..., "host": ..., "port": ..., "first_payload": "<hex>",
     "suites": ["alice", "frolov"], "watch_s": 10, "delay_s": 0.5}

The service waits ``delay_s`` (the censor samples it from the published delay
distribution), runs the suites, and answers one JSON line::

    {"id", "label", "shadowsocks", "shadowsocks_reactions", "answers_replay",
     "escalated", "sources": [...], "results": [...]}

``shadowsocks`` is the Alice suite's class of the server (:func:`.alice.classify`),
``shadowsocks_reactions`` its reaction to each probe (R1: D, NR221: T, ...),
``openvpn`` the OpenVPN suite's (:func:`.openvpn.investigate`), ``https`` the HTTPS
front suite's (:func:`.https.classify`: is it only a web server?), ``label`` the
Frolov suite's.

With ``--sources PREFIX[,PREFIX6]`` every probe connection comes from its own
random address in those prefixes (:mod:`.sources`), as the GFW's probes come
from thousands of addresses; ``sources`` lists the distinct ones a request used.

A bad request gets ``{"id"?, "error": "..."}`` and the service keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ptcommon.events import EventLog

from . import alice, https, openvpn
from .observe import run_suite
from .probes import frolov_suite
from .sources import SourcePool
from .trees import Timing, label

MAX_LINE = 1 << 20


_emit = EventLog("prober").emit


async def handle_request(req: Any, pool: SourcePool | None = None) -> dict[str, Any]:
    """Run one probe request; a bad one gets ``{"id"?, "error"}``, never an exception."""
    if not isinstance(req, dict):
        return {"error": "request must be a JSON object"}
    rid = req.get("id")
    try:
        host, port = str(req["host"]), int(req["port"])
        payload = bytes.fromhex(req.get("first_payload", ""))
        suites = list(req.get("suites", ["alice"]))
        watch = float(req.get("watch_s", 10.0))
        delay = float(req.get("delay_s", 0.0))
        sni = req.get("sni")
        if sni is not None and not isinstance(sni, str):
            raise TypeError("sni must be a string")
    except (KeyError, ValueError, TypeError) as exc:
        return {"id": rid, "error": f"bad request: {exc!r}"}
    if not 0 < port < 65536 or not 0 < watch <= 600 or not 0 <= delay <= 3600:
        return {"id": rid, "error": "bad request: port, watch_s or delay_s out of range"}
    if unknown := set(suites) - {"alice", "frolov", "openvpn", "https"}:
        return {"id": rid, "error": f"bad request: unknown suites {sorted(unknown)}"}
    await asyncio.sleep(delay)
    factory = pool.factory if pool else None
    out: dict[str, Any] = {"id": rid, "label": None, "shadowsocks": None, "openvpn": None,
                           "https": None, "answers_replay": False, "escalated": False,
                           "results": []}
    if "alice" in suites and payload:
        inv = await alice.investigate(host, port, payload, watch_s=watch, sock_factory=factory)
        cls = alice.classify(inv)
        # Each probe's one-letter reaction (D, R, F, T, -), as Alice et al. tabulate them.
        out.update(answers_replay=inv.answers_replay, escalated=inv.escalated,
                   shadowsocks=cls.label, shadowsocks_reactions=cls.reactions)
        out["results"] += [r.to_json() for r in inv.results]
    if "openvpn" in suites:
        ov = await openvpn.investigate(host, port, watch_s=watch, sock_factory=factory)
        out["openvpn"] = ov.label
        out["results"] += [r.to_json() for r in ov.results]
    if "https" in suites:
        answers = await https.investigate(host, port, payload, sni=sni, watch_s=watch,
                                          sock_factory=factory)
        out["https"] = https.classify(answers)
        out["results"] += [a.to_json() for a in answers]
    if "frolov" in suites:
        probes = frolov_suite()
        results = await run_suite(host, port, probes, watch_s=watch, sock_factory=factory)
        # The paper's clock shrunk to this watch; "under 2 s" never below a quarter
        # second, so a short lab watch does not demand a reaction in milliseconds.
        out["label"] = label(results, [len(p.payload) for p in probes],
                             Timing.for_watch(watch, fast_floor_s=0.25, jitter_s=0.01))
        out["results"] += [r.to_json() for r in results]
    out["sources"] = sorted({r["source"] for r in out["results"] if r.get("source")})
    return out


async def _client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  pool: SourcePool | None) -> None:
    try:
        while line := await reader.readline():
            try:
                req = json.loads(line)
            except ValueError as exc:
                reply: dict[str, Any] = {"error": f"bad JSON: {exc}"}
            else:
                _emit("request", request={k: v for k, v in req.items() if k != "first_payload"}
                      if isinstance(req, dict) else req)
                try:
                    reply = await handle_request(req, pool)
                except Exception as exc:  # noqa: BLE001 - one bad probe must not end the service
                    _emit("error", error=f"{type(exc).__name__}: {exc}")
                    reply = {"id": req.get("id") if isinstance(req, dict) else None,
                             "error": f"probe failed: {type(exc).__name__}"}
            _emit("verdict", **{k: v for k, v in reply.items() if k != "results"})
            writer.write(json.dumps(reply).encode() + b"\n")
            await writer.drain()
    except (ConnectionError, asyncio.LimitOverrunError, ValueError):
        pass
    finally:
        writer.close()


async def serve(host: str, port: int, stop: asyncio.Event | None = None,
                pool: SourcePool | None = None) -> None:
    server = await asyncio.start_server(lambda r, w: _client(r, w, pool), host, port,
                                        limit=MAX_LINE)
    _emit("ready", listen=f"{host}:{port}",
          sources=[str(n) for n in pool.nets.values()] if pool else [])
    async with server:
        if stop is None:
            await server.serve_forever()
        else:
            await stop.wait()
