"""Censor profiles: named censor models in TOML, with overrides from a spec.

A profile declares its detectors with their parameters, its policy (which
detection triggers which action, with what probability), its action and
prober parameters, and ``source``, the publication it models. Experiment
specs may override any parameter that exists; an override naming a parameter
that does not exist is an error naming the full key path, so a typo never
silently runs the default.
"""

from __future__ import annotations

import copy
import hashlib
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ptcommon.suggest import did_you_mean

TOP_KEYS = {"name", "description", "source", "detectors", "policy", "actions", "prober",
            "datapath"}
KNOWN_ACTIONS = {"drop", "rst", "residual", "throttle", "freeze", "loss", "none", "probe",
                 "inject_dns", "block_server", "detector"}


class ProfileError(ValueError):
    """A bad profile or override, with the key path in the message."""


@dataclass
class Profile:
    name: str
    description: str
    source: str
    detectors: dict[str, dict[str, Any]]
    policy: dict[str, Any]
    actions: dict[str, dict[str, Any]]
    prober: dict[str, Any]
    datapath: dict[str, Any]
    path: Path | None = None
    sha256: str = ""

    @property
    def probes(self) -> bool:
        """Whether a policy rule sends suspects to the active prober."""
        return any("probe" in (r["action"] if isinstance(r["action"], list) else [r["action"]])
                   for r in self.policy.get("rules", []))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "source": self.source,
            "detectors": self.detectors, "policy": self.policy, "actions": self.actions,
            "prober": self.prober, "datapath": self.datapath,
        }


def profiles_dir() -> Path:
    return Path(str(resources.files("censor_sim.profiles")))


def available() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.toml"))


def profile_path(name: str) -> Path:
    p = Path(name)
    if p.suffix == ".toml" and p.exists():
        return p
    cand = profiles_dir() / f"{name}.toml"
    if not cand.exists():
        raise ProfileError(f"unknown censor profile {name!r}{did_you_mean(name, available())} "
                           f"(known: {', '.join(available())})")
    return cand


# In-path (NFQUEUE: the packet waits for the verdict) or on-path (NFLOG copies:
# the tap, batched by `tap_batch` copies or `tap_wait_ms`). Either way, a censor
# whose inspectors read only clients' payloads leaves TCP SYNs in the kernel unless
# `watch_births` is false (censor_sim/queueplan.py, docs/lab/censor.md §1). The
# engine's tables are bounded: flows idle past `flow_idle_s` are forgotten, and at
# most `max_flows` flows and `max_residuals` blocked triples are kept. On-path,
# `fast_path = "ebpf"` runs the detector in the kernel instead of copying packets
# to the engine (censor_sim/bpf; FET only; docs/lab/censor.md §1).
DATAPATH_DEFAULTS: dict[str, Any] = {"mode": "in-path", "tap_batch": 1, "tap_wait_ms": 0,
                                     "watch_births": True, "flow_idle_s": 120,
                                     "max_flows": 65536, "max_residuals": 65536,
                                     "fast_path": None}


def merge_overrides(base: dict[str, Any], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """Deep-merge `overrides` into a copy of `base`; every key must already exist."""
    out = copy.deepcopy(base)
    for key, val in overrides.items():
        path = f"{where}.{key}"
        if key not in out:
            known = ", ".join(sorted(out)) or "none"
            raise ProfileError(f"{path}: unknown parameter{did_you_mean(key, out)} "
                               f"(known here: {known})")
        if isinstance(out[key], dict):
            if not isinstance(val, dict):
                raise ProfileError(f"{path}: expected a table")
            out[key] = merge_overrides(out[key], val, path)
        else:
            if out[key] is not None and not _same_kind(out[key], val):
                raise ProfileError(
                    f"{path}: expected {type(out[key]).__name__}, got {type(val).__name__}")
            out[key] = val
    return out


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return True
    return type(a) is type(b)


def load_profile(name: str, overrides: dict[str, Any] | None = None,
                 where: str | None = None) -> Profile:
    """Load profile `name` (or a path) and apply `overrides`.

    `where` is the key path errors name (a spec's ``censors.<column>``).
    """
    path = profile_path(name)
    raw_bytes = path.read_bytes()
    try:
        raw = tomllib.loads(raw_bytes.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"profile {path.name}: {exc}") from exc
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise ProfileError(f"profile {path.name}: unknown key {sorted(unknown)[0]!r}")
    for req in ("name", "source"):
        if not raw.get(req):
            raise ProfileError(f"profile {path.name}: missing {req!r} (models cite a source)")
    full = {k: raw.get(k, {}) for k in ("detectors", "policy", "actions", "prober", "datapath")}
    if isinstance(full["datapath"], dict):
        # How the censor sees packets is every profile's to choose, so a spec can
        # override these on any profile (docs/lab/censor.md §5).
        full["datapath"] = {**DATAPATH_DEFAULTS, **full["datapath"]}
    if overrides:
        full = merge_overrides(full, overrides, where or f"censors.{raw['name']}")
    prof = Profile(raw["name"], raw.get("description", ""), raw["source"], path=path,
                   sha256=hashlib.sha256(raw_bytes).hexdigest(), **full)
    _validate_policy(prof, where or f"censors.{prof.name}")
    return prof


def _validate_policy(prof: Profile, base: str) -> None:
    for i, rule in enumerate(prof.policy.get("rules", [])):
        where = f"{base}.policy.rules[{i}]"
        if rule.get("detector") not in prof.detectors:
            raise ProfileError(f"{where}.detector: no detector {rule.get('detector')!r}")
        acts = rule.get("action")
        for act in acts if isinstance(acts, list) else [acts]:
            if act not in KNOWN_ACTIONS:
                raise ProfileError(f"{where}.action: unknown action {act!r}")
        p = rule.get("probability", 1.0)
        if not isinstance(p, int | float) or not 0 <= p <= 1:
            raise ProfileError(f"{where}.probability: must be between 0 and 1")
