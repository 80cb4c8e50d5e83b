"""The three-machine experiment (experiments/vm.toml) in its quick form, for the tests
that run it on namespaces, on split namespaces and on qemu VMs."""

from __future__ import annotations

from pathlib import Path

from censor_sim.profile import available as profiles_available
from ptlab import plugins
from ptlab.experiment.spec import Spec, load_spec

REPO = Path(__file__).resolve().parents[2]


def quick_spec(transports: tuple[str, ...] | None = None) -> Spec:
    spec = load_spec(REPO / "experiments" / "vm.toml", plugins.available(),
                     profiles_available())
    spec.repetitions = 1
    spec.workloads.bulk_size = 1_000_000
    spec.workloads.latency_count = 3
    if transports:
        spec.transports = {t: spec.transports[t] for t in transports}
        spec.expect = [e for e in spec.expect if e.transport in transports]
    return spec


def by_cell(rows):
    return {(r.transport, r.censor): r for r in rows}
