"""Bring-your-own-tool rows in the shared lab: the curated rows of an experiment
file, and one cell of a row run from its table (tests of ptlab.plugins.external)."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from ptlab import plugins
from ptlab.experiment.spec import parse_spec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def curated(name: str, spec_file: str = "proxies.toml") -> dict:
    """Row ``name``'s table in experiments/<spec_file>."""
    return tomllib.loads((EXPERIMENTS / spec_file).read_text())["transports"][name]


def run_row(lab, name: str, options: dict, censor: str = "none",
            overrides: dict | None = None, tools: dict | None = None, **workloads):
    """Run external row ``name`` (its ``options`` a [transports.X] table; ``tools``
    a spec's [tools] table) in the shared lab; skipped, with the reason, when one
    of its binaries is not installed."""
    parse_spec({"transports": {name: options}, "censors": {"none": {}},
                **({"tools": tools} if tools else {})})  # registers it
    if missing := [b for b in plugins.get(name).peer_binaries() if shutil.which(b) is None]:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/setup installs them)")
    lab.spec.transports[name] = options
    try:
        return lab.run_cell(name, censor, overrides, **workloads)
    finally:
        lab.spec.transports.pop(name)


def capture_drops(lab, cell) -> dict[str, int]:
    """Packets the kernel dropped from each of ``cell``'s captures (the runner's
    capture_dropped events): why a byte count taken from its pcaps came up short."""
    import json

    name = Path(cell.cell_dir).name
    events = [json.loads(x) for x in (lab.out_dir / "events.jsonl").read_text().splitlines()]
    return {e["pcap"]: e["packets"] for e in events
            if e.get("cell") == name and e.get("event") == "capture_dropped"}
