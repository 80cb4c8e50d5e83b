"""Tor pluggable-transport plumbing: managed mode, SOCKS5 and the Extended ORPort."""
