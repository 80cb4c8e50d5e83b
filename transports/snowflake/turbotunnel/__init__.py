"""Turbo Tunnel: the session layer that lets a Snowflake client outlive its proxies.

Each proxy connection starts with :data:`TOKEN` and the client's 8-byte
ClientID; after that it carries length-prefixed KCP packets
(:mod:`.encapsulation`), and smux v2 streams run inside KCP (docs/transports/turbotunnel.md §1).
"""

TOKEN = bytes.fromhex("1293605d278175f5")
CLIENT_ID_LEN = 8
