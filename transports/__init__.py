"""Pluggable transports: the stream API, the registry, and one subpackage per transport.

Transports never import ``censor_sim`` or ``ptlab``: each runs without the lab.
"""
