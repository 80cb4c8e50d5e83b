"""The ``ptlab`` command groups, one module each.

Each module defines its group's handlers and ``add_parser(sub)``, which builds
the group's subparser beside the code it runs; :mod:`ptlab.cli` only assembles
them. Handlers import the lab's modules when they run, not when the parser is
built: ``ptlab pt`` and ``ptlab snowflake-proxy`` run from the base install,
without the lab extra (scapy, rich, matplotlib), which tests/test_packaging.py
checks.
"""
