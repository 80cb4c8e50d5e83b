"""Snowflake: broker client, WebRTC proxy, client and bridge with Turbo Tunnel.

Wire-compatible with Tor's Snowflake 2.5.x (proxy-broker protocol 1.3, client-broker 1.0).
"""
