"""Detectors: small modules of pure functions over bytes, one per protocol or rule set.

Each is testable without a network. The censor's engine (``censor_sim.engine``)
feeds them the first payloads of each flow and turns their matches into
actions according to the profile's policy. Nothing here imports ``transports``:
the censor only sees the wire.
"""


class NeedMore(Exception):  # noqa: N818 - a signal, not an error
    """The bytes so far are a valid prefix of what the detector parses; feed more.

    A modern TLS ClientHello (with post-quantum key shares) spans two TCP
    segments, so a parser must be able to say "not yet" instead of "no".
    """
