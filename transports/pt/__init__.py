"""Tor pluggable-transport plumbing: the SOCKS5 front and (later) managed mode."""
