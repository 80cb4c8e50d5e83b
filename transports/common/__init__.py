"""Primitives and helpers shared by more than one transport.

Crypto and randomness (``ntor``, ``elligator2``, ``drbg``, ``probdist``,
``replayfilter``) and stream/HTTP plumbing (``pipes``, ``relay``, ``hostport``,
``silence``, ``weblisten``, ``fronting``, ``httpbody``, ``servertls``), and what
a server holds under hostile load (``budget``: the descriptor budget and quiet
resource errors; ``httpguard``: deadlines and caps for HTTP servers). Nothing
here knows about a particular transport's wire format.
"""
