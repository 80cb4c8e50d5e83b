"""A lab cell's capture replayed through the offline censor (censor_sim.offline).

Live tests use it to show that ``ptlab censor --pcap`` gives the verdict the live
censor gave: the cell's client-side capture holds every packet the censor judged.
"""

from __future__ import annotations

from typing import Any

from censor_sim.offline import FlowVerdict, replay
from censor_sim.profile import load_profile


def replayed(lab: Any, row: Any, profile: str, overrides: dict | None = None,
             server: str | None = None) -> list[FlowVerdict]:
    """The verdicts on the cell's flows to ``server`` (default: every flow)."""
    pcap = lab.out_dir / next(p for p in row.pcaps if "censor-client" in p)
    out = list(replay(load_profile(profile, overrides), pcap))
    return [v for v in out if server is None or v.flow["server"] == server]
