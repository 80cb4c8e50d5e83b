"""A two-node lab (one link) for tests that need a namespace of their own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def pair_lab(role: str, peer: str = "peer") -> Iterator:
    """A lab of ``role`` linked to ``peer`` (a host needs exactly one link)."""
    from netns.lab import Lab
    from netns.topology import Topology

    t = Topology()
    t.add_node(role, role[0])
    t.add_node(peer, peer[0])
    t.add_link(role, peer)
    with Lab(t) as lab:
        yield lab


def default_lab_or_skip(proxies: int) -> Iterator:
    """The default topology with ``proxies`` proxy nodes, up for as long as the
    generator runs (a fixture's body); skips, with the reason, where no lab can
    be made (no root, no namespaces)."""
    import pytest

    from netns.lab import Lab
    from netns.topology import default_topology
    from ptlab.pytest_plugin import lab_unavailable

    if why := lab_unavailable():
        pytest.skip(why)
    lab = Lab(default_topology(proxies=proxies)).up()
    try:
        yield lab
    finally:
        lab.down()
