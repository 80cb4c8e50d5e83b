"""The censor simulator: an in-path router that fingerprints, probes and blocks.

It sees only bytes on the wire, like a real censor: it never imports
``transports``. Censor models are named profiles in ``censor_sim/profiles``,
each citing the measurement it reproduces.
"""
