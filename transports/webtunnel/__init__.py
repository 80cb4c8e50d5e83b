"""Tor's WebTunnel pluggable transport (client and server), wire-compatible with
Tor's webtunnel 0.0.3 and lyrebird's client (docs/transports/webtunnel.md).

One HTTP/1.1 upgrade exchange over TLS or plain TCP, then raw bytes both ways:
``httphead`` reads and parses HTTP heads, ``upgrade`` is the handshake itself,
``args`` the client's bridge-line arguments, ``tlsdial`` the client's TLS
(certificate checks and chain pinning), ``synthetic`` the server's announced
address and bridge line, ``client`` and ``server`` the factories.
"""
