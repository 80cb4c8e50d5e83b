"""The real peers of ``scripts/setup --peers`` as tests ask for them.

A test that needs a peer that is not built skips, and its reason names the peer
and the command that builds it (docs/lab/peers.md §1).
"""

from __future__ import annotations

import pytest

from ptlab.common import peers


def path_or_none(tool: str) -> str | None:
    """The built peer's path, or None."""
    found = peers.locate(tool)
    return found[0] if found else None


def needs(tool: str) -> pytest.MarkDecorator:
    """A skip mark for when peer ``tool`` is not built."""
    return pytest.mark.skipif(path_or_none(tool) is None, reason=str(peers.ToolMissing(tool)))


def require(tool: str) -> str:
    """The built peer's path; skips the calling test when it is absent."""
    path = path_or_none(tool)
    if path is None:
        pytest.skip(str(peers.ToolMissing(tool)))
    return path


def version(tool: str) -> str:
    """``module@version`` of a built peer, for test output."""
    found = peers.locate(tool)
    return found[1].removeprefix("peers ") if found else "not built"
