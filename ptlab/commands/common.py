"""What every command shares: the exit rule and the checkout's paths.

A mistake a person can make ends in one line on stderr and status 2
(docs/architecture.md §3.1); SIGTERM unwinds like Ctrl-C so that a run's
finally-blocks take its lab down.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..experiment.spec import Spec

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "experiments" / "default.toml"

#: What each group's ``add_parser`` is handed: the top-level parser's subcommands.
Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it


def die(msg: str, code: int = 2) -> int:
    """Say what went wrong in one line and give the exit status."""
    print(f"ptlab: {msg}", file=sys.stderr)
    return code


def term_to_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so finally-blocks take the lab down."""
    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def make_quick(spec: Spec) -> None:
    """``--quick``: one repetition, at most 1 MB of bulk and 3 latency samples."""
    spec.repetitions = 1
    spec.workloads.bulk_size = min(spec.workloads.bulk_size, 1_000_000)
    spec.workloads.latency_count = min(spec.workloads.latency_count, 3)


def load_run_spec(path: str) -> Spec:
    """An experiment spec, checked against the registered rows and profiles."""
    from censor_sim.profile import available as profiles_available

    from .. import plugins
    from ..experiment.spec import load_spec

    return load_spec(Path(path), plugins.available(), profiles_available())


def wide_console() -> Any:
    """A rich console; a log file or CI gets a table wide enough to read, not 80
    squeezed columns."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 132)

