"""One cell's measurement from the client's side: bootstrap, bulk, latency, benign mix.

The ordinary lab measures in the runner's own process, with sockets made in the
client namespace. A run across machines (``ptlab vm run``) measures on the
client host instead: ``python -m ptlab.workloads.cell CONFIG.json`` runs the
same code there and prints the :class:`Measurement` as one JSON line. Both
runners turn a measurement into a result row with the same code
(:mod:`ptlab.experiment.runner`), so their rows can be compared field by field.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..plugins.base import Endpoint
from ..services.sshd import SshdFiles, sshd_files_in
from .benign import BenignResult, BenignTargets, run_benign_mix
from .bulk import BulkResult, bulk_download
from .latency import bootstrap, request_latency


@dataclass
class CellPlan:
    """What to measure in one cell (from the spec's [workloads])."""

    bootstrap_s: float  # the first request must get through within this
    repetitions: int
    bulk_size: int
    seed: int
    bulk_timeout_s: float
    idle_timeout_s: float
    latency_count: int  # 0: no latency samples (a baseline)
    benign: bool
    benign_timeout_s: float


@dataclass
class Measurement:
    """What the client saw. `benign` is None when the mix did not run."""

    bootstrap_s: float | None
    bulks: list[BulkResult]
    latency_samples: list[float]
    benign: list[BenignResult] | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Measurement:
        """Read one back (it came over the wire from another machine); anything
        malformed raises ValueError naming what is wrong."""
        try:
            keys = {f.name for f in dataclasses.fields(cls)}
            if not isinstance(d, dict) or set(d) != keys:
                raise ValueError(f"expected the keys {sorted(keys)}")
            benign = d["benign"]
            return cls(
                bootstrap_s=_number(d["bootstrap_s"], "bootstrap_s", optional=True),
                bulks=[_typed(BulkResult, b) for b in _list(d["bulks"], "bulks")],
                latency_samples=[_number(x, "latency_samples")
                                 for x in _list(d["latency_samples"], "latency_samples")],
                benign=None if benign is None else [_typed(BenignResult, b)
                                                    for b in _list(benign, "benign")])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a cell measurement: {exc}") from None


def _list(v: Any, what: str) -> list[Any]:
    if not isinstance(v, list):
        raise ValueError(f"{what}: expected a list, not {type(v).__name__}")
    return v


def _number(v: Any, what: str, optional: bool = False) -> Any:
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{what}: expected a number, not {v!r}")
    return float(v)


# The JSON type of each field of the results that cross machines.
_FIELD_TYPES: dict[type, dict[str, tuple[type, ...]]] = {
    BulkResult: {"ok": (bool,), "size": (int,), "received": (int,), "seconds": (int, float),
                 "sha256": (str, type(None)), "expected": (str,), "integrity_error": (bool,),
                 "error": (str, type(None)), "started": (int, float)},
    BenignResult: {"kind": (str,), "target": (str,), "ok": (bool,), "error": (str, type(None)),
                   "seconds": (int, float), "started": (int, float)},
}


def _typed(cls: type, d: Any) -> Any:
    types = _FIELD_TYPES[cls]
    if not isinstance(d, dict) or set(d) != set(types):
        raise ValueError(f"{cls.__name__}: expected the keys {sorted(types)}")
    for k, allowed in types.items():
        v = d[k]
        if not isinstance(v, allowed) or (isinstance(v, bool) and bool not in allowed):
            raise ValueError(f"{cls.__name__}.{k}: {v!r} has the wrong type")
    return cls(**d)


async def measure(ns: str | None, endpoint: Endpoint, plan: CellPlan,
                  targets: BenignTargets | None, ssh: SshdFiles | None) -> Measurement:
    """Bootstrap, then every one of `repetitions` bulk downloads (a censor that blocks
    by chance lets some through: the cell is k of n), latency samples when at
    least one download worked, then the benign mix. A corrupted download ends the
    measurement at once: nothing after it would mean anything."""
    boot = await bootstrap(ns, endpoint, plan.bootstrap_s)
    bulks: list[BulkResult] = []
    latency: list[float] = []
    if boot is not None:
        for r in range(plan.repetitions):
            res = await bulk_download(ns, endpoint, plan.bulk_size, plan.seed + r,
                                      timeout=plan.bulk_timeout_s,
                                      idle_timeout=plan.idle_timeout_s)
            bulks.append(res)
            if res.integrity_error:
                break
        if plan.latency_count and any(b.ok for b in bulks):
            latency = await request_latency(ns, endpoint, plan.latency_count)
    benign = None
    if plan.benign and targets is not None and not any(b.integrity_error for b in bulks):
        benign = await run_benign_mix(ns, targets, plan.benign_timeout_s, ssh=ssh)
    return Measurement(boot, bulks, latency, benign)


# --- the client host's command ---------------------------------------------------

def config_dict(endpoint: Endpoint, plan: CellPlan, targets: BenignTargets | None,
                ssh_dir: Path | None) -> dict[str, Any]:
    """The JSON config the client host's ``python -m ptlab.workloads.cell`` reads."""
    return {"endpoint": dataclasses.asdict(endpoint), "plan": dataclasses.asdict(plan),
            "targets": None if targets is None else dataclasses.asdict(targets),
            "ssh_dir": None if ssh_dir is None else str(ssh_dir)}


def _targets(d: dict[str, Any]) -> BenignTargets:
    def pairs(v):
        return None if v is None else tuple(v)

    return BenignTargets(https=[tuple(x) for x in d["https"]],
                         http=[tuple(x) for x in d["http"]],
                         dns=pairs(d["dns"]), dns_name=d["dns_name"], dns_type=d["dns_type"],
                         ssh=pairs(d["ssh"]), binary=pairs(d["binary"]), udp=pairs(d["udp"]),
                         binary_extra=[tuple(x) for x in d["binary_extra"]],
                         quic=[tuple(x) for x in d.get("quic", [])])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ptlab.workloads.cell",
                                description="Measure one cell from this host (the client) "
                                            "and print the measurement as JSON.")
    p.add_argument("config", help="JSON file written by the runner (config_dict)")
    args = p.parse_args(argv)
    try:
        cfg = json.loads(Path(args.config).read_text())
        endpoint = Endpoint(**cfg["endpoint"])
        plan = CellPlan(**cfg["plan"])
        targets = None if cfg["targets"] is None else _targets(cfg["targets"])
        ssh = None if cfg["ssh_dir"] is None else sshd_files_in(Path(cfg["ssh_dir"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cell: bad config {args.config}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    m = asyncio.run(measure(None, endpoint, plan, targets, ssh))
    print(json.dumps(m.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
