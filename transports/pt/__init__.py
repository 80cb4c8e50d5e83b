"""Tor pluggable-transport plumbing: managed mode (environment, messages, SOCKS5, Extended ORPort)."""
