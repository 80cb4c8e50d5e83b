"""Lab plugins: how each transport (ours or a real peer) takes its place in the lab.

The runner knows no transport by name; it asks the plugin registered under
the ``ptlab.lab_plugins`` entry-point group (docs/architecture.md §3.3).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from .base import CellContext, Endpoint, LabPlugin, Service

__all__ = ["CellContext", "Endpoint", "LabPlugin", "Service", "available", "get", "register"]

_cache: dict[str, LabPlugin] = {}


def available() -> list[str]:
    return sorted(ep.name for ep in entry_points(group="ptlab.lab_plugins"))


def register(name: str, plugin: LabPlugin) -> None:
    """A plugin a spec defines itself (a bring-your-own-tool row)."""
    _cache[name] = plugin


def get(name: str) -> LabPlugin:
    if name not in _cache:
        for ep in entry_points(group="ptlab.lab_plugins"):
            if ep.name == name:
                _cache[name] = ep.load()
                break
        else:
            raise KeyError(f"no lab plugin {name!r} (known: {', '.join(available())})")
    return _cache[name]
