"""The proxy's log setup: aioice's and aiortc's per-candidate lines only with -verbose."""

from __future__ import annotations

import logging

import pytest

from transports.snowflake.proxylogging import quiet_libraries

NOISY = ("aioice", "aiortc")


@pytest.fixture
def library_levels():
    saved = {name: logging.getLogger(name).level for name in NOISY}
    for name in NOISY:
        logging.getLogger(name).setLevel(logging.NOTSET)
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_without_verbose_the_libraries_log_warnings_only(library_levels):
    quiet_libraries(verbose=False)
    assert [logging.getLogger(n).level for n in NOISY] == [logging.WARNING] * 2


def test_with_verbose_the_libraries_are_left_alone(library_levels):
    quiet_libraries(verbose=True)
    assert [logging.getLogger(n).level for n in NOISY] == [logging.NOTSET] * 2
