"""Experiment specs (TOML): what to run, under which censors, measured how.

A spec names its transports (lab plugins) and censor profiles; the runner
expands the matrix and records one row per cell. Every key is checked: an
unknown or mistyped key is a :class:`SpecError` naming its path
(``workloads.bulk.szie: unknown key``), so a typo never silently runs a default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns.capture import WHOLE_PACKETS
from ptcommon.suggest import did_you_mean

from .. import plugins
from ..common.specfile import SpecError, flatten_keys, read_toml
from ..plugins.base import LabPlugin
from ..plugins.external import ExternalPlugin, TemplateError
from .selection import Selection

# What a spec may expect of a cell (ERROR is never an expectation: it means the lab failed).
EXPECTABLE = ("reachable", "blocked")


@dataclass
class TopologyOptions:
    proxies: int = 0
    rate_mbit: float = 0.0
    loss_pct: float = 0.0
    delay_ms: float = 0.0


@dataclass
class Workloads:
    bulk_size: int = 2_000_000
    bulk_timeout_s: float = 30.0
    idle_timeout_s: float = 4.0
    latency_count: int = 10
    benign: bool = True
    benign_timeout_s: float = 3.0
    bootstrap_timeout_s: float = 8.0
    # The workloads' requests go over HTTPS inside the transport, as a browser's do
    # (the web node's port 443, trusting the lab CA): the tunnel then carries the
    # user's own TLS handshake (docs/censors/tlsintls.md §2.4).
    inner_tls: bool = False


@dataclass
class Expectation:
    transport: str
    censor: str
    status: str


#: The shortest snap length a spec may ask for, tcpdump's old IPv6 default: the
#: Ethernet and IPv6 headers and a TCP header with timestamps (14 + 40 + 32) fit;
#: shorter would cut headers, not only payloads.
MIN_SNAPLEN = 96


@dataclass
class Spec:
    path: Path | None
    name: str
    description: str = ""
    seed: int = 1
    repetitions: int = 3
    budget_s: float = 600.0
    # Bytes of each packet the cell pcaps keep: whole packets unless the spec says
    # otherwise (docs/lab/results.md §8).
    capture_snaplen: int = WHOLE_PACKETS
    topology: TopologyOptions = field(default_factory=TopologyOptions)
    transports: dict[str, dict[str, Any]] = field(default_factory=dict)
    censors: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: Workloads = field(default_factory=Workloads)
    expect: list[Expectation] = field(default_factory=list)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # [tools.NAME]
    raw: dict[str, Any] = field(default_factory=dict)
    # Things that are allowed but probably not meant, shown before a run.
    warnings: list[str] = field(default_factory=list)
    # Settings changed after the spec was read, by key path: what changed them
    # ("--quick", "--repetitions"), so results say where each value came from.
    overridden: dict[str, str] = field(default_factory=dict)
    # Which cells a run runs (-t, -c, -k, --shard): all by default.
    selection: Selection = field(default_factory=Selection)

    def cells(self) -> list[tuple[str, str]]:
        """Every cell of the matrix, whatever the selection."""
        return [(t, c) for t in self.transports for c in self.censors]

    def selected_cells(self) -> list[tuple[str, str]]:
        """The cells a run of this spec runs, in order: the selection's."""
        profiles = {c: self.censor_profile(c)[0] for c in self.censors}
        return self.selection.cells(list(self.transports), list(self.censors), profiles)

    def settings(self) -> dict[str, Any]:
        """Every experiment, topology and workload setting this spec runs with, by its
        key path in a spec (``workloads.bulk.size``): the effective values, defaults
        and command-line overrides included, so a run records what it really did."""
        w, t = self.workloads, self.topology
        return {
            "experiment.seed": self.seed, "experiment.repetitions": self.repetitions,
            "experiment.budget_s": self.budget_s,
            "experiment.capture_snaplen": self.capture_snaplen,
            "topology.proxies": t.proxies, "topology.rate_mbit": t.rate_mbit,
            "topology.loss_pct": t.loss_pct, "topology.delay_ms": t.delay_ms,
            "workloads.bulk.size": w.bulk_size, "workloads.bulk.timeout_s": w.bulk_timeout_s,
            "workloads.bulk.idle_timeout_s": w.idle_timeout_s,
            "workloads.latency.count": w.latency_count,
            "workloads.benign.enabled": w.benign, "workloads.benign.timeout_s": w.benign_timeout_s,
            "workloads.bootstrap_timeout_s": w.bootstrap_timeout_s,
            "workloads.inner_tls": w.inner_tls,
        }

    def setting_origins(self) -> dict[str, str]:
        """Where each of :meth:`settings` came from: "spec" (written in it), "default",
        or the command-line option that overrode it."""
        written = flatten_keys({k: v for k, v in self.raw.items()
                                if k in ("experiment", "topology", "workloads")})
        return {key: self.overridden.get(key, "spec" if key in written else "default")
                for key in self.settings()}

    def override(self, key: str, value: Any, origin: str) -> None:
        """Set setting `key` (a key path of :meth:`settings`) from the command line."""
        section, _, name = key.partition(".")
        target: Any = {"experiment": self, "topology": self.topology,
                       "workloads": self.workloads}[section]
        attr = _SETTING_ATTRIBUTES.get(key, name)
        if getattr(target, attr) != value:
            setattr(target, attr, value)
            self.overridden[key] = origin

    def row(self, name: str) -> TransportRow:
        """Transport `name` as a row of this spec: its plugin and its options (none for
        a transport the spec does not list, which a shared lab may still run)."""
        return TransportRow(name, plugins.get(name), self.transports.get(name, {}))

    def rows(self) -> list[TransportRow]:
        """The spec's rows, in its order."""
        return [self.row(name) for name in self.transports]

    def censor_profile(self, censor: str) -> tuple[str, dict[str, Any]]:
        """(profile name, overrides) for a censor column."""
        opts = dict(self.censors[censor])
        return opts.pop("profile", censor), opts


#: Setting key paths whose attribute is named otherwise on Spec, TopologyOptions or
#: Workloads.
_SETTING_ATTRIBUTES = {
    "workloads.bulk.size": "bulk_size", "workloads.bulk.timeout_s": "bulk_timeout_s",
    "workloads.bulk.idle_timeout_s": "idle_timeout_s",
    "workloads.latency.count": "latency_count", "workloads.benign.enabled": "benign",
    "workloads.benign.timeout_s": "benign_timeout_s",
}


@dataclass(frozen=True)
class TransportRow:
    """One row of the matrix: a transport's name, the lab plugin that runs it, and
    the spec's ``[transports.NAME]`` options. A cell carries this, so nothing
    below the runner looks a plugin up by name again."""

    name: str
    plugin: LabPlugin
    options: dict[str, Any]

    def check(self) -> None:
        """The options, checked by the plugin: a SpecError naming the key path."""
        try:
            self.plugin.check_options(self.options)
        except (KeyError, ValueError) as exc:
            raise SpecError(f"transports.{self.name}: {exc}") from None

    def check_installed(self) -> None:
        """What the row runs is on this machine: a SpecError naming what is missing."""
        if (missing := self.plugin.missing(self.options)) is not None:
            raise SpecError(f"transports.{self.name}: {missing}")


def _external_row(name: str, options: dict[str, Any],
                  tool_settings: dict[str, dict[str, Any]]) -> None:
    """A row the spec declares by command lines: checked now (a bad template fails
    at load, with its key path) and registered as the plugin of that name."""
    try:
        plugins.register(name, ExternalPlugin(name, options, tool_settings))
    except TemplateError as exc:
        raise SpecError(str(exc)) from None


def _check(table: Any, where: str, allowed: dict[str, type | tuple[type, ...]]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: expected a table")
    for key, val in table.items():
        path = f"{where}.{key}" if where else key
        if key not in allowed:
            raise SpecError(f"{path}: unknown key{did_you_mean(key, allowed)} "
                            f"(allowed: {', '.join(sorted(allowed))})")
        want = allowed[key]
        if isinstance(val, bool) and want is not bool and bool not in (
                want if isinstance(want, tuple) else (want,)):
            raise SpecError(f"{path}: expected {_tname(want)}, got a boolean")
        if not isinstance(val, want):
            raise SpecError(f"{path}: expected {_tname(want)}, got {type(val).__name__}")
    return table


def _tname(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


NUM = (int, float)

#: Fewer repetitions than this give intervals too wide to read; the loader warns.
MIN_REPETITIONS_FOR_INTERVALS = 3


def parse_spec(data: dict[str, Any], path: Path | None = None,
               known_transports: list[str] | None = None,
               known_profiles: list[str] | None = None) -> Spec:
    """Validate a spec's TOML data and build a :class:`Spec`."""
    where = path.name if path else "spec"
    try:
        return _parse(data, path, known_transports, known_profiles)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


#: Top-level tables that mark another of ptlab's TOML formats, and the command that
#: reads it: a dataset spec or a scale spec given to `ptlab run` says where it goes.
OTHER_FORMATS = {"dataset": "a dataset spec: collect it with 'ptlab dataset SPEC OUT'",
                 "scale": "a scale spec: export it with 'ptlab export shadow SPEC OUT'"}


def _parse(data: dict[str, Any], path: Path | None, known_transports: list[str] | None,
           known_profiles: list[str] | None) -> Spec:
    for table, what in OTHER_FORMATS.items():
        if table in data and "experiment" not in data:
            raise SpecError(f"not an experiment spec but {what}")
    _check(data, "", {"experiment": dict, "topology": dict, "transports": dict,
                      "censors": dict, "workloads": dict, "expect": list, "tools": dict})
    exp = _check(data.get("experiment", {}), "experiment", {
        "name": str, "description": str, "seed": int, "repetitions": int, "budget_s": NUM,
        "capture_snaplen": int})
    spec = Spec(path=path, name=exp.get("name", path.stem if path else "experiment"), raw=data)
    spec.description = exp.get("description", "")
    spec.seed = exp.get("seed", 1)
    spec.repetitions = exp.get("repetitions", 3)
    if not 1 <= spec.repetitions <= 100:
        raise SpecError("experiment.repetitions: must be between 1 and 100")
    if spec.repetitions < MIN_REPETITIONS_FOR_INTERVALS:
        spec.warnings.append(
            f"experiment.repetitions = {spec.repetitions}: intervals need at least "
            f"{MIN_REPETITIONS_FOR_INTERVALS} repetitions (with 2 the t factor is 12.7); "
            "the report shows the repetitions' points instead")
    spec.budget_s = float(exp.get("budget_s", 600))
    if spec.budget_s <= 0:
        raise SpecError("experiment.budget_s: must be positive")
    snaplen = exp.get("capture_snaplen", WHOLE_PACKETS)
    if snaplen != 0 and not MIN_SNAPLEN <= snaplen <= WHOLE_PACKETS:
        raise SpecError(f"experiment.capture_snaplen: must be 0 (whole packets) or between "
                        f"{MIN_SNAPLEN} and {WHOLE_PACKETS} bytes, got {snaplen}")
    spec.capture_snaplen = snaplen or WHOLE_PACKETS  # tcpdump's -s 0 is its largest

    topo = _check(data.get("topology", {}), "topology", {
        "proxies": int, "rate_mbit": NUM, "loss_pct": NUM, "delay_ms": NUM})
    spec.topology = TopologyOptions(**{k: topo[k] for k in topo})
    if not 0 <= spec.topology.loss_pct < 100:
        raise SpecError("topology.loss_pct: must be in [0, 100)")
    for k in ("rate_mbit", "delay_ms"):
        if getattr(spec.topology, k) < 0:
            raise SpecError(f"topology.{k}: must not be negative")

    # [tools.NAME]: where a tool that rows name as {tool.NAME} is (ptlab/common/tools.py).
    for name, opts in data.get("tools", {}).items():
        _check(opts, f"tools.{name}", {"path": str, "version_args": list})
        if not all(isinstance(a, str) for a in opts.get("version_args", [])):
            raise SpecError(f"tools.{name}.version_args: expected a list of strings")
    spec.tools = data.get("tools", {})

    transports = data.get("transports", {})
    if not transports:
        raise SpecError("transports: at least one transport is needed")
    for name, opts in transports.items():
        if isinstance(opts, dict) and opts.get("kind") == "external":
            _external_row(name, opts, spec.tools)
            continue
        if known_transports is not None and name not in known_transports:
            raise SpecError(f"transports.{name}: unknown transport"
                            f"{did_you_mean(name, known_transports)} "
                            f"(known: {', '.join(known_transports)})")
        if not isinstance(opts, dict):
            raise SpecError(f"transports.{name}: expected a table")
    spec.transports = transports

    censors = data.get("censors", {})
    if not censors:
        raise SpecError("censors: at least one censor profile is needed")
    for name, opts in censors.items():
        if not isinstance(opts, dict):
            raise SpecError(f"censors.{name}: expected a table")
        prof = opts.get("profile", name)
        if known_profiles is not None and prof not in known_profiles:
            raise SpecError(f"censors.{name}: unknown censor profile {prof!r}"
                            f"{did_you_mean(prof, known_profiles)} "
                            f"(known: {', '.join(known_profiles)})")
    spec.censors = censors
    if known_profiles is not None:
        _check_censor_columns(spec)

    wl = _check(data.get("workloads", {}), "workloads", {
        "bulk": dict, "latency": dict, "benign": dict, "bootstrap_timeout_s": NUM,
        "inner_tls": bool})
    w = Workloads()
    bulk = _check(wl.get("bulk", {}), "workloads.bulk", {
        "size": int, "timeout_s": NUM, "idle_timeout_s": NUM})
    w.bulk_size = bulk.get("size", w.bulk_size)
    if not 1 <= w.bulk_size <= 4 << 30:
        raise SpecError("workloads.bulk.size: must be between 1 byte and 4 GiB")
    w.bulk_timeout_s = float(bulk.get("timeout_s", w.bulk_timeout_s))
    w.idle_timeout_s = float(bulk.get("idle_timeout_s", w.idle_timeout_s))
    lat = _check(wl.get("latency", {}), "workloads.latency", {"count": int})
    w.latency_count = lat.get("count", w.latency_count)
    ben = _check(wl.get("benign", {}), "workloads.benign", {"enabled": bool, "timeout_s": NUM})
    w.benign = ben.get("enabled", w.benign)
    w.benign_timeout_s = float(ben.get("timeout_s", w.benign_timeout_s))
    w.bootstrap_timeout_s = float(wl.get("bootstrap_timeout_s", w.bootstrap_timeout_s))
    w.inner_tls = wl.get("inner_tls", w.inner_tls)
    spec.workloads = w

    for i, e in enumerate(data.get("expect", [])):
        _check(e, f"expect[{i}]", {"transport": str, "censor": str, "status": str})
        for k in ("transport", "censor", "status"):
            if k not in e:
                raise SpecError(f"expect[{i}].{k}: missing")
        # "*" stands for every row (or column); a later entry naming a cell wins.
        if e["transport"] != "*" and e["transport"] not in spec.transports:
            raise SpecError(f"expect[{i}].transport: {e['transport']!r} is not in [transports]")
        if e["censor"] != "*" and e["censor"] not in spec.censors:
            raise SpecError(f"expect[{i}].censor: {e['censor']!r} is not in [censors]")
        if e["status"] not in EXPECTABLE:
            raise SpecError(f"expect[{i}].status: must be one of {', '.join(EXPECTABLE)}")
        for t in (spec.transports if e["transport"] == "*" else [e["transport"]]):
            for c in (spec.censors if e["censor"] == "*" else [e["censor"]]):
                spec.expect.append(Expectation(t, c, e["status"]))
    return spec


def _check_censor_columns(spec: Spec) -> None:
    """Apply each column's overrides now, so a typo fails before any lab is built."""
    from censor_sim.engine import unsupported
    from censor_sim.profile import ProfileError, load_profile

    for column in spec.censors:
        name, overrides = spec.censor_profile(column)
        where = f"censors.{column}"
        try:
            prof = load_profile(name, overrides, where=where)
        except ProfileError as exc:
            raise SpecError(str(exc)) from None
        if why := unsupported(prof):
            raise SpecError(f"{where}.{why}")


def load_spec(path: Path, known_transports: list[str] | None = None,
              known_profiles: list[str] | None = None) -> Spec:
    return parse_spec(read_toml(path), Path(path), known_transports, known_profiles)
