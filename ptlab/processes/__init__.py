"""Programs the lab runs inside its namespaces for a cell (``python -m ptlab.processes.X``).

Tor's parent role for a pluggable transport (``ptparent``), several Snowflake
proxies in one process (``proxypool``), a bring-your-own tool's launcher
(``extlaunch``) and its tunnel routes (``tunroute``). Each is its own process,
under the contract of docs/architecture.md §3.1.
"""
