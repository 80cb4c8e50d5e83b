"""The declared transport interface: roles, and the two kinds of server factory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from transports import base


class _Undeclared(base.Transport):
    pass


def test_register_refuses_a_transport_without_declared_roles():
    with pytest.raises(base.TransportError, match="must declare its roles"):
        base.register(_Undeclared("undeclared"))
    assert "undeclared" not in base.names()


class _Odd(base.Transport):
    roles = frozenset({"relay"})  # type: ignore[assignment]  # deliberately not a Role


def test_register_refuses_unknown_roles():
    with pytest.raises(base.TransportError, match="must declare its roles"):
        base.register(_Odd("odd"))


@pytest.mark.parametrize("name", base.names())
def test_every_shipped_transport_declares_roles_it_implements(name, tmp_path: Path):
    transport = base.get(name)
    assert transport.roles and transport.roles <= base.BOTH_ROLES
    if "server" not in transport.roles:
        with pytest.raises(base.TransportError, match="no server side"):
            transport.server_factory(tmp_path, {})


def test_shipped_server_factories_are_one_of_the_two_declared_kinds(tmp_path: Path):
    kinds = {}
    for name in ("direct", "obfs4", "scramblesuit", "meek", "snowflake"):
        args = {"password": "A" * 32} if name == "scramblesuit" else {}
        state = tmp_path / name
        state.mkdir()
        factory = base.get(name).server_factory(state, args)
        assert isinstance(factory.smethod_args(), dict)
        kinds[name] = ("listens" if isinstance(factory, base.ListeningServerFactory)
                       else "wraps" if isinstance(factory, base.StreamServerFactory) else None)
    assert kinds == {"direct": "wraps", "obfs4": "wraps", "scramblesuit": "wraps",
                     "meek": "listens", "snowflake": "listens"}


async def test_a_listening_factory_hands_streams_over():
    factory = base.get("snowflake").server_factory(None, {})
    assert isinstance(factory, base.ListeningServerFactory)

    async def handoff(inner: base.Streams, client_addr: str) -> None:
        inner[1].close()

    listening = await factory.listen("127.0.0.1", 0, handoff)
    try:
        assert listening.port > 0
    finally:
        listening.close()
        await asyncio.sleep(0)
