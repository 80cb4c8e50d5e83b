"""Workloads: what the lab's user does through a transport, measured."""
