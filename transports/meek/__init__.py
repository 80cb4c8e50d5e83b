"""meek: a TCP stream tunnelled through HTTP POSTs, domain-fronted through a CDN.

Wire-compatible with Tor's meek-server and with obfs4proxy's ``meek_lite``
client (docs/transports/meek.md §2).
"""
