"""The test suite; a package so that tests and benchmarks can import :mod:`tests.support`."""
