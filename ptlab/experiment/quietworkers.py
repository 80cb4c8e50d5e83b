"""Local Dask workers (``--jobs N``) leave Ctrl-C to the run.

Ctrl-C at a terminal signals the whole foreground process group: the run and
every worker process its LocalCluster started. The run stops in one line
("ptlab: interrupted", exit 130) and closes its cluster, which stops the
workers; a worker that took the SIGINT itself printed a ``KeyboardInterrupt``
traceback from Dask's nanny on the way down. So the workers ignore SIGINT:
from their start (:func:`interrupts_ignored`, a disposition a new process
inherits), and, through :class:`IgnoreInterrupt`, a worker the nanny restarts
later too. SIGTERM and SIGKILL reach them as before.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


def ignore_interrupt() -> None:
    """SIGINT ignored in this process (only the main thread may set it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class IgnoreInterrupt(WorkerPlugin):
    """Each worker, started now or restarted later, ignores SIGINT."""

    name = "ptlab-ignore-interrupt"

    def setup(self, worker: Any) -> None:
        ignore_interrupt()


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    """SIGINT ignored here while the block starts processes, then restored. A
    Ctrl-C in the block is lost (Python does not queue an ignored signal): the
    block is the few seconds a LocalCluster takes to start."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
