"""The real peers of ``scripts/setup --peers`` as tests ask for them.

A test that needs a peer that is not built skips, and its reason names the peer,
the command that builds it and, when its last build failed, why (the module the
proxy refused, with the proxy's answer; docs/lab/peers.md §1, §2.3).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ptlab.common import peers


def path_or_none(tool: str) -> str | None:
    """The built peer's path, or None."""
    found = peers.locate(tool)
    return found[0] if found else None


def needs(tool: str) -> pytest.MarkDecorator:
    """A skip mark for when peer ``tool`` is not built."""
    return pytest.mark.skipif(path_or_none(tool) is None, reason=peers.why_missing(tool))


def require(tool: str) -> str:
    """The built peer's path; skips the calling test when it is absent."""
    path = path_or_none(tool)
    if path is None:
        pytest.skip(peers.why_missing(tool))
    return path


def version(tool: str) -> str:
    """``module@version`` of a built peer, for test output."""
    found = peers.locate(tool)
    return found[1].removeprefix("peers ") if found else "not built"


def fake_manifest(directory: Path, tool: str, module: str, version: str,
                  body: str = "#!/bin/sh\nexit 0\n") -> Path:
    """A peers directory with one built tool (a script), as scripts/setup --peers
    leaves it; the tool's path."""
    binary = directory / "bin" / tool
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text(body)
    binary.chmod(0o755)
    entry = {"key": "0", "module": module, "version": version, "module_sum": "h1:fake=",
             "go": "go1.26.8", "tags": ["with_utls"], "ldflags": "", "replace": [],
             "tools": {tool: {"package": f"{module}/cmd/{tool}", "path": f"bin/{tool}",
                              "sha256": hashlib.sha256(body.encode()).hexdigest()}}}
    (directory / peers.MANIFEST).write_text(json.dumps(
        {"schema": peers.MANIFEST_SCHEMA, "peers": {tool: entry}, "failed": {}}))
    return binary


def pin(tool: str) -> peers.Pin:
    """The pin in scripts/peers.toml that builds ``tool``."""
    return next(p for p in peers.load_pins() if tool in p.packages)
