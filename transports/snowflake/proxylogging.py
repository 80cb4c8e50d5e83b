"""The Snowflake proxy's log setup, the same in the proxy and in each worker process.

A worker process (:mod:`.proxyworkers`) logs to the proxy's stderr, so it
must set up logging exactly as the command line (:mod:`.proxy_cli`) does;
both call :func:`configure_logging`, which sits below them so neither has to
import the other for it.
"""

from __future__ import annotations

import logging
import sys


def quiet_libraries(verbose: bool) -> None:
    """aioice and aiortc log every candidate pair at info: only with -verbose."""
    if not verbose:
        for noisy in ("aioice", "aiortc"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def configure_logging(verbose: bool) -> None:
    """Timestamped lines on stderr, debug with -verbose, without the libraries' chatter."""
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(message)s")
    quiet_libraries(verbose)
