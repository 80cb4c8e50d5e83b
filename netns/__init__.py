"""The lab network: declarative topologies built from Linux network namespaces.

Nothing here knows about transports or censors; it only makes namespaces,
links, addresses and routes, runs processes inside them, shapes links,
captures packets, and removes all of it again (even after a crash).
"""
