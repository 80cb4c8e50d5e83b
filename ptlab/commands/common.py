"""What every command shares: the exit rule and the checkout's paths.

A mistake a person can make ends in one line on stderr and status 2
(docs/architecture.md §3.1); SIGTERM unwinds like Ctrl-C so that a run's
finally-blocks take its lab down.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..common.exitcodes import (
    EXIT_CORRUPTED,
    EXIT_ERROR_CELL,
    EXIT_EXPECTATION,
    EXIT_OK,
    EXIT_USAGE,
)

if TYPE_CHECKING:
    from ..experiment.spec import Spec

REPO = Path(__file__).resolve().parents[2]

#: The exit statuses as ``ptlab run -h`` and ``ptlab vm run -h`` print them.
EXIT_HELP = """exit status:
  0    every cell ran and every expectation held
  1    a cell's status was not the one the spec expects ([[expect]])
  2    a mistake to fix before running: a bad spec, not root, a missing tool or binary
  3    a bulk download's bytes were corrupted on the way (a transport bug)
  4    a cell could not be measured (status ERROR), or the run could not write its
       results (a full disk: it stops, and --resume finishes it): the lab or the
       machine failed, not the transport
  130  interrupted
When several apply, the first of 3, 4, 1 is the status."""
DEFAULT_SPEC = REPO / "experiments" / "default.toml"

#: What each group's ``add_parser`` is handed: the top-level parser's subcommands.
Subparsers = argparse._SubParsersAction  # argparse exposes no public name for it


def results_root() -> Path:
    """Where runs go unless --results says otherwise: results/ under the directory
    the command runs in (not the checkout's: a researcher's runs stay with their
    work, and a shared checkout is not written to)."""
    return Path.cwd() / "results"


def new_run_dir(prefix: str = "") -> Path:
    """A fresh results directory for a run: results/<prefix><timestamp>."""
    from datetime import datetime

    return results_root() / f"{prefix}{datetime.now().strftime('%Y%m%d-%H%M%S')}"


@contextlib.contextmanager
def no_empty_run_dir(out: Path) -> Iterator[None]:
    """Remove ``out`` again if the run fails before writing anything into it (the
    VMs were not up, the lab could not start): no empty results directory is
    left behind to be taken for a run."""
    existed = out.exists()
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            if not existed and out.is_dir() and not any(out.iterdir()):
                out.rmdir()
        raise


def die(msg: str, code: int = EXIT_USAGE) -> int:
    """Say what went wrong in one line and give the exit status."""
    print(f"ptlab: {msg}", file=sys.stderr)
    return code


def term_to_exit() -> None:
    """SIGTERM unwinds like Ctrl-C, so finally-blocks take the lab down."""
    def handler(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


#: What ``--quick`` caps: one repetition, at most 1 MB of bulk, 3 latency samples.
QUICK_CAPS = {"experiment.repetitions": 1, "workloads.bulk.size": 1_000_000,
              "workloads.latency.count": 3}


def make_quick(spec: Spec) -> None:
    """``--quick``: the spec's settings capped by :data:`QUICK_CAPS`, each change
    recorded as the option's doing."""
    settings = spec.settings()
    for key, cap in QUICK_CAPS.items():
        spec.override(key, min(settings[key], cap), "--quick")


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



def write_junit(outcome: Any, spec: Spec, path: str | None) -> None:
    """``--junit FILE``: the run's cells as JUnit XML, one test case each."""
    if path is None:
        return
    from ..output.junit import write_junit as write

    write(outcome.results, spec.name, Path(path), outcome.corrupted_cells)


def run_exit_status(outcome: Any) -> int:
    """Say on stderr, one line each, what went wrong in a finished run, and return
    its exit status (see EXIT_*): corrupted bytes, then ERROR cells, then failed
    expectations."""
    for line in outcome.integrity_failures:
        print(f"ptlab: {line}", file=sys.stderr)
    for line in outcome.error_cells:
        print(f"ptlab: ERROR {line}", file=sys.stderr)
    for line in outcome.failed_expectations:
        print(f"ptlab: expectation failed: {line}", file=sys.stderr)
    if outcome.integrity_failures:
        return EXIT_CORRUPTED
    if outcome.error_cells:
        return EXIT_ERROR_CELL
    if outcome.failed_expectations:
        return EXIT_EXPECTATION
    return EXIT_OK
