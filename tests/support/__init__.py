"""Code only tests and benchmarks use: vectors, toy servers, lab rigs.

Production packages never import it. Tests import it as ``tests.support.x``
(pytest puts the repository root on ``sys.path``: ``pythonpath`` in pyproject.toml);
benchmarks run as ``python benchmarks/x.py`` insert the root themselves.
"""
