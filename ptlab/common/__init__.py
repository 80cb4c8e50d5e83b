"""What every part of the lab shares, and what imports nothing else of ``ptlab``.

The floor of the package (docs/architecture.md §2.3): the view of a lab that
plugins and services ask of it, the lab's well-known ports and names, the
result schema, statistics, flow roles, process events and tool look-up.
"""
