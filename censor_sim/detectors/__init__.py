"""Detectors: small modules of pure functions over bytes, one per protocol or rule set.

Each is testable without a network. The censor's engine (``censor_sim.engine``)
feeds them the first payloads of each flow and turns their matches into
actions according to the profile's policy. Nothing here imports ``transports``:
the censor only sees the wire.
"""

# The stream parsers' "not yet" signal is ptcommon's class itself, not a copy:
# the TLS parser there raises it and the engine catches it here.
from ptcommon.tlshello import NeedMore

__all__ = ["NeedMore"]
