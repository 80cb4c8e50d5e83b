"""Which event loop the proxy runs on: uvloop by default, asyncio's on request."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from transports.common import eventloop


def test_uvloop_by_default(monkeypatch):
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.loop_class() is uvloop.Loop
    with asyncio.Runner(loop_factory=eventloop.loop_class()) as runner:
        assert runner.run(_name()) == "uvloop"


def test_asyncio_on_request(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "asyncio")
    assert eventloop.loop_class() is asyncio.SelectorEventLoop
    with asyncio.Runner(loop_factory=eventloop.loop_class()) as runner:
        assert runner.run(_name()) == "asyncio"


def test_missing_uvloop_falls_back_unless_asked_for(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import fails
    monkeypatch.delenv(eventloop.ENV, raising=False)
    assert eventloop.loop_class() is asyncio.SelectorEventLoop
    monkeypatch.setenv(eventloop.ENV, "uvloop")
    with pytest.raises(ValueError, match="not installed"):
        eventloop.loop_class()


def test_a_bad_choice_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(eventloop.ENV, "trio")
    with pytest.raises(ValueError, match="PTLAB_EVENT_LOOP='trio': must be"):
        eventloop.loop_class()


async def _name() -> str:
    return eventloop.name(asyncio.get_running_loop())


def test_a_subclass_of_uvloop_is_named_uvloop():
    from transports.snowflake.udpports import PortRange, port_range_loop

    loop = port_range_loop(PortRange(2000, 2001), uvloop.Loop)
    try:
        assert eventloop.name(loop) == "uvloop"
        assert isinstance(loop, uvloop.Loop) and loop.ports == PortRange(2000, 2001)
    finally:
        loop.close()
