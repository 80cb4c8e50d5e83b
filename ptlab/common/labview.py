"""What the rest of ``ptlab`` may ask of a lab and of the processes in it.

Two labs implement these: the namespace lab on this machine
(:class:`netns.lab.Lab`) and the three machines (:class:`ptlab.vm.layout.VmLab`,
with :class:`ptlab.vm.hosts.Host` processes). Plugins, lab services and
workloads are written against these protocols, so none of them imports a lab
that sits above it (docs/architecture.md §2.3).
"""

from __future__ import annotations

from typing import Any, Protocol

from netns.errors import LabError
from netns.lab import Lab


class LabView(Protocol):
    """A lab, as a row or a lab service sees it: where each role is."""

    def addr(self, role: str, v6: bool = False) -> str: ...


def namespace_lab(lab: LabView, who: str) -> Lab:
    """`lab` as the namespace lab, for what only runs there (a proxy pool, a
    private Tor network); a clear error on the three machines."""
    if not isinstance(lab, Lab):
        raise LabError(f"{who} runs only in the namespace lab, not on the three machines")
    return lab


class Process(Protocol):
    """A long-running lab process, wherever it runs: it logs, it can be waited on
    (its readiness line) and stopped."""

    name: str
    argv: list[str]

    def running(self) -> bool: ...
    def stop(self, timeout: float = 3.0) -> int | None: ...
    def log_text(self, this_run_only: bool = False) -> str: ...
    def wait_log(self, pattern: str, timeout: float = 10.0, what: str | None = None,
                 hint: str = "") -> None: ...
    def cpu_seconds(self) -> float | None: ...


class Stoppable(Protocol):
    """A packet capture: started for a cell, stopped when it ends; its log holds
    tcpdump's closing counts."""

    def stop(self) -> Any: ...

    def log_text(self, this_run_only: bool = False) -> str: ...
