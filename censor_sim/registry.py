"""Detector kinds by name: the built-in ones and those other packages add.

A profile's ``[detectors.NAME]`` table names its ``kind`` (the table's name
when it has none). The kind is looked up here: first among the built-in
inspectors, then in the ``ptlab.detectors`` entry-point group, so a package
can add a detector without editing ``censor_sim`` (docs/lab/extending.md
§3)::

    [project.entry-points."ptlab.detectors"]
    ssh_banner = "mypkg.detector:SshBannerInspector"

An entry point names a class built as ``cls(name, params)``. There are two
shapes the engine knows:

* an :class:`~censor_sim.inspectors.Inspector` subclass, asked about the first
  packets of each flow (most detectors, built-in or not);
* a *packet censor*: a class with ``whole_packets = True``, a
  ``process(pkt, from_client) -> Verdict`` method and a ``detections`` list that only grows.
  It sees every packet of every flow and decides itself, as Geneva's lab
  censors do; a profile may have one, and nothing else that inspects.

A built-in kind cannot be replaced by a plugin of the same name: a profile
that says ``kind = "fet"`` means Wu et al.'s rules, whatever is installed.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from .actions import Verdict
from .detectors.gfw443 import Gfw443Rst
from .inspectors import INSPECTORS
from .packet import Packet

GROUP = "ptlab.detectors"
# Enforced by nftables alone, with no per-packet code.
KERNEL_ONLY = frozenset({"ip_blocklist", "ip_allowlist"})


class GenevaDetector:
    """One of Geneva's lab censors as a packet censor (``kind = "geneva"``)."""

    kind = "geneva"
    whole_packets = True
    # Its censors keep TCB state that the live drops shape; a capture's later
    # packets were never dropped, so a replay would judge a different connection.
    no_offline = "a Geneva censor acts on every packet of a live connection"

    def __init__(self, name: str, params: dict[str, Any]) -> None:
        from .detectors import geneva  # only Geneva's profiles pay for its import

        self.name = name
        try:
            self.censor = geneva.make(params["censor"],
                                      keyword=params.get("keyword", b"ultrasurf"),
                                      port=params.get("port") or None,
                                      censor_ip=params.get("censor_ip"))
        except KeyError:
            raise ValueError(f"detectors.{name}.censor: which Geneva censor "
                             "(censor1 … censor11, censor8b)") from None
        self.detections = self.censor.detections

    def process(self, pkt: Packet, from_client: bool) -> Verdict:
        return self.censor.process(pkt)  # Geneva's censors tell sides apart by port


BUILTIN: dict[str, type] = {**INSPECTORS, GenevaDetector.kind: GenevaDetector,
                            Gfw443Rst.kind: Gfw443Rst}


@cache
def _plugins() -> dict[str, Any]:
    """The group's entry points by name (not loaded: a broken plugin harms only
    the profiles that use it)."""
    from importlib.metadata import entry_points  # only when a kind is not built in

    return {ep.name: ep for ep in entry_points(group=GROUP)}


def kinds() -> list[str]:
    """Every kind a profile may name."""
    return sorted(BUILTIN.keys() | _plugins().keys() | KERNEL_ONLY)


def detector_class(kind: str, where: str) -> type:
    """The class for `kind`; `where` (``detectors.NAME``) goes in any error."""
    if kind in BUILTIN:
        return BUILTIN[kind]
    ep = _plugins().get(kind)
    if ep is None:
        from ptcommon.suggest import did_you_mean

        raise ValueError(f"{where}: unknown detector kind {kind!r}"
                         f"{did_you_mean(kind, kinds())} (known: {', '.join(kinds())})")
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 - a plugin's import error, whatever it is
        raise ValueError(f"{where}: detector kind {kind!r} from {ep.value} "
                         f"failed to load: {type(exc).__name__}: {exc}") from None
    if not isinstance(cls, type) or not (hasattr(cls, "inspect") or
                                         getattr(cls, "whole_packets", False)):
        raise ValueError(f"{where}: {ep.value} is not a detector class "
                         "(an Inspector subclass, or a class with whole_packets = True)")
    return cls


def make(name: str, params: dict[str, Any]) -> Any:
    """The detector a profile's ``[detectors.NAME]`` table declares."""
    kind = params.get("kind", name)
    return detector_class(kind, f"detectors.{name}")(name, params)


def refresh() -> None:
    """Forget the entry points read so far (after installing a plugin at run time)."""
    _plugins.cache_clear()
