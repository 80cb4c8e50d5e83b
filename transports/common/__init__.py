"""Primitives and helpers shared by more than one transport.

Crypto and randomness (``ntor``, ``elligator2``, ``drbg``, ``probdist``,
``replayfilter``) and stream/HTTP plumbing (``pipes``, ``relay``, ``hostport``,
``silence``, ``weblisten``, ``fronting``, ``httpbody``). Nothing here knows
about a particular transport's wire format.
"""
