"""The result schema: one row per cell, written as results.json and results.csv.

docs/architecture.md §3.5, the result row and results.json. A run's numbers are only
worth something if someone can tell later what produced them, so every
results.json carries a schema version and provenance (git SHA, kernel, peer
versions, profile hashes, seeds). Readers refuse a schema they do not know
instead of guessing at field meanings.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from . import peers as built_peers

SCHEMA_VERSION = 4
#: Versions this ptlab reads: 1 lacks the fields 2 added, which then keep defaults;
#: 3 adds the status "skipped"; 4 records the run's effective settings and their
#: origins, its cell selection, each cell's wall time, the benign classes that
#: failed with no censor, and names goodput goodput_mbit_s (was goodput_mbps).
READABLE_SCHEMAS = (1, 2, 3, 4)

RESULTS_JSON = "results.json"
RESULTS_CSV = "results.csv"

#: "skipped": the row cannot run with the tools found (a build tag it needs is
#: missing); its error field gives the reason, and no cell of it ran.
STATUSES = ("reachable", "blocked", "ERROR", "skipped")
EXPECTATIONS = ("reachable", "blocked")

#: Peer binaries whose versions provenance records by default.
PEER_BINARIES = ("obfs4proxy", "snowflake-proxy", "snowflake-client", "tor")
#: ptlab's Python dependencies whose versions change measured behaviour.
PYTHON_DEPS = ("aiortc", "scapy", "cryptography", "aiohttp")

_CI_FIELDS = ("goodput_ci95", "latency_ci95", "reachability_ci95")
#: Row fields under the names schemas before 4 gave them: goodput is in Mbit/s
#: everywhere now, and named so (the CSV always said goodput_mbit_s).
_RENAMED = {"goodput_mbps": "goodput_mbit_s"}


@dataclass
class Row:
    """One cell of the transports x censors matrix."""

    transport: str
    censor: str
    status: str  # "reachable" | "blocked" | "ERROR" | "skipped"
    error: str | None = None  # ERROR's cause, or why the row was skipped
    repetitions: int = 0  # n: bulk repetitions planned (and run, unless bootstrap failed)
    repetitions_ok: int | None = None  # k: how many got through, byte-exact
    reachability_ci95: tuple[float, float] | None = None  # Wilson interval of k/n
    # One dict per repetition: repetition, ok, goodput_mbit_s, seconds, bytes, error, started.
    repetition_outcomes: list[dict[str, Any]] = field(default_factory=list)
    bootstrap_s: float | None = None
    goodput_mbit_s: float | None = None  # geometric mean of the repetitions that got through
    goodput_ci95: tuple[float, float] | None = None  # log-scale t interval; None below 2
    goodput_samples: list[float] = field(default_factory=list)
    latency_ms: float | None = None  # median
    latency_ci95: tuple[float, float] | None = None  # the median's order-statistic interval
    latency_ci_level: float | None = None  # the coverage that interval reaches
    latency_samples: list[float] = field(default_factory=list)
    bytes_before_block: int | None = None
    # The transport's own flows: the first acted-on detection, and every one per detector.
    detector: str | None = None
    time_to_detection_s: float | None = None  # from the transport client's start
    action: str | None = None
    detection_data_packet: int | None = None  # 1: fired on the flow's first data packet
    detection_after_first_byte_s: float | None = None
    detections: dict[str, int] = field(default_factory=dict)  # acted-on detections per detector
    # Acted-on detections of other flows: benign class -> count, and of the prober's.
    collateral_detections: dict[str, int] = field(default_factory=dict)
    probe_detections: int = 0
    infra_detections: int = 0  # of the lab's own services' flows (DNS resolver, STUN)
    probes_sent: int = 0
    probe_verdicts: dict[str, int] = field(default_factory=dict)
    # Probes the censor sent after flows that were not the transport's (the benign
    # mix's random-looking binary protocol draws the GFW's prober too).
    collateral_probes: int = 0
    benign_total: int = 0
    benign_blocked: int = 0
    collateral: float | None = None  # share of benign flows blocked, 0..1
    benign_detail: dict[str, dict[str, int]] = field(default_factory=dict)
    censor_cpu_per_flow_ms: float | None = None
    # CPU seconds the transport's own processes used while the workloads ran, by
    # side ("client", "server": what plugin.clients() and servers() started).
    cpu_s: dict[str, float] = field(default_factory=dict)
    censor_counters: dict[str, int] = field(default_factory=dict)
    rtt_ms: float | None = None
    expectation: str | None = None  # "reachable" | "blocked", declared by the spec
    expectation_met: bool | None = None
    notes: list[str] = field(default_factory=list)
    pcaps: list[str] = field(default_factory=list)  # censor-side captures, relative paths
    cell_dir: str | None = None  # the cell's logs and state, relative to the results
    cell_seconds: float | None = None  # the cell's wall time, from its start to its stop
    # Benign classes that failed with no censor (in this row's transport's baseline):
    # a lab failure, class -> flows failed, never collateral. In a censored cell
    # these classes are not judged (the baseline could not show they work).
    benign_lab_failures: dict[str, int] = field(default_factory=dict)
    benign_unjudged: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"row status must be one of {STATUSES}, got {self.status!r}")
        if self.expectation is not None and self.expectation not in EXPECTATIONS:
            raise ValueError(
                f"row expectation must be one of {EXPECTATIONS} or None, got {self.expectation!r}"
            )
        # JSON has no tuples: normalise CIs read back as lists.
        for name in _CI_FIELDS:
            ci = getattr(self, name)
            if ci is not None:
                lo, hi = ci
                setattr(self, name, (float(lo), float(hi)))

    @property
    def cell(self) -> str:
        """The cell's display name."""
        return f"{self.transport} × {self.censor}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (CIs become two-element lists)."""
        d = dataclasses.asdict(self)
        for name in _CI_FIELDS:
            if d[name] is not None:
                d[name] = list(d[name])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        """Rebuild a row; unknown or missing required fields are schema errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        d = {_RENAMED.get(k, k): v for k, v in d.items()}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"result row has unknown fields: {', '.join(unknown)}")
        try:
            return cls(**d)
        except TypeError as exc:
            raise ValueError(f"result row is malformed: {exc}") from None


def now_iso() -> str:
    """The current UTC time as ISO 8601, the format of Results.started/finished."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Results:
    """A whole run: the spec it ran, where and with what, and its rows."""

    started: str  # ISO 8601
    finished: str  # ISO 8601
    spec_path: str
    spec: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION
    # Every experiment, topology and workload setting the run used, by key path
    # (``workloads.bulk.size``), defaults and command-line overrides included; and
    # where each came from ("spec", "default", "--quick", ...).
    settings: dict[str, Any] = field(default_factory=dict)
    setting_origins: dict[str, str] = field(default_factory=dict)
    # Which cells the run ran, when not all (-t, -c, -k, --shard): a partial run
    # must not pass for a whole one.
    selection: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, schema version first so a reader sees it at once."""
        return {
            "schema_version": self.schema_version,
            "started": self.started,
            "finished": self.finished,
            "spec_path": self.spec_path,
            "spec": self.spec,
            "settings": self.settings,
            "setting_origins": self.setting_origins,
            "selection": self.selection,
            "provenance": self.provenance,
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Results:
        """Rebuild results, refusing any schema version but ours."""
        if not isinstance(d, dict):
            raise ValueError("results.json is not a JSON object")
        version = d.get("schema_version")
        if version is None:
            raise ValueError("results.json has no schema_version")
        if version not in READABLE_SCHEMAS:
            raise ValueError(
                f"results.json has schema_version {version!r}; this ptlab reads "
                f"{', '.join(map(str, READABLE_SCHEMAS))}"
            )
        try:
            return cls(
                schema_version=version,
                started=d["started"],
                finished=d["finished"],
                spec_path=d["spec_path"],
                spec=d.get("spec", {}),
                settings=d.get("settings", {}),
                setting_origins=d.get("setting_origins", {}),
                selection=d.get("selection", {}),
                provenance=d.get("provenance", {}),
                rows=[Row.from_dict(r) for r in d.get("rows", [])],
            )
        except KeyError as exc:
            raise ValueError(f"results.json lacks field {exc.args[0]!r}") from None

    def rtts_ms(self) -> list[float]:
        """The distinct RTTs the rows ran with, sorted (every report must state them)."""
        return sorted({r.rtt_ms for r in self.rows if r.rtt_ms is not None})


#: The long CSV: one line per cell x repetition (a cell with no repetition run,
#: one line with an empty repetition). Units are in the names; no cell holds JSON.
#: docs/lab/results.md §4 describes every column.
CSV_COLUMNS = (
    "schema_version", "run_started", "git_sha", "transport", "censor",
    "cell_status", "cell_repetitions_ok", "cell_repetitions",
    "cell_reachability_ci95_lo", "cell_reachability_ci95_hi",
    "repetition", "repetition_ok", "goodput_mbit_s", "transfer_s", "bytes_received",
    "repetition_error", "bootstrap_s",
    "cell_goodput_geomean_mbit_s", "cell_goodput_ci95_lo_mbit_s", "cell_goodput_ci95_hi_mbit_s",
    "latency_median_ms", "latency_ci95_lo_ms", "latency_ci95_hi_ms", "latency_samples_n",
    "detector", "action", "detection_data_packet", "time_to_detection_s",
    "collateral_fraction", "benign_flows", "benign_blocked", "probes_sent", "rtt_ms",
    "expectation", "expectation_met", "cell_error",
)


def setting_column(key: str) -> str:
    """The CSV column of a setting's key path: ``workloads.bulk.size`` is
    ``setting_workloads_bulk_size``."""
    return "setting_" + key.replace(".", "_")


def csv_columns(results: Results | None = None) -> list[str]:
    """The long CSV's columns: the fixed ones, then one per recorded setting."""
    return list(CSV_COLUMNS) + [setting_column(k) for k in (results.settings if results else {})]


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def long_records(results: Results) -> list[dict[str, Any]]:
    """The long CSV's lines as dicts (column -> value)."""
    out = []
    for row in results.rows:
        r_lo, r_hi = row.reachability_ci95 or (None, None)
        g_lo, g_hi = row.goodput_ci95 or (None, None)
        l_lo, l_hi = row.latency_ci95 or (None, None)
        cell = {
            "schema_version": SCHEMA_VERSION, "run_started": results.started,
            "git_sha": results.provenance.get("git_sha"),
            "transport": row.transport, "censor": row.censor, "cell_status": row.status,
            "cell_repetitions_ok": row.repetitions_ok, "cell_repetitions": row.repetitions,
            "cell_reachability_ci95_lo": r_lo, "cell_reachability_ci95_hi": r_hi,
            "bootstrap_s": row.bootstrap_s, "cell_goodput_geomean_mbit_s": row.goodput_mbit_s,
            "cell_goodput_ci95_lo_mbit_s": g_lo, "cell_goodput_ci95_hi_mbit_s": g_hi,
            "latency_median_ms": row.latency_ms, "latency_ci95_lo_ms": l_lo,
            "latency_ci95_hi_ms": l_hi, "latency_samples_n": len(row.latency_samples),
            "detector": row.detector, "action": row.action,
            "detection_data_packet": row.detection_data_packet,
            "time_to_detection_s": row.time_to_detection_s,
            "collateral_fraction": row.collateral, "benign_flows": row.benign_total,
            "benign_blocked": row.benign_blocked, "probes_sent": row.probes_sent,
            "rtt_ms": row.rtt_ms, "expectation": row.expectation,
            "expectation_met": row.expectation_met, "cell_error": row.error,
        }
        cell |= {setting_column(k): v for k, v in results.settings.items()}
        reps = row.repetition_outcomes or [{}]
        for rep in reps:
            out.append(cell | {
                "repetition": rep.get("repetition"), "repetition_ok": rep.get("ok"),
                "goodput_mbit_s": rep.get("goodput_mbit_s"), "transfer_s": rep.get("seconds"),
                "bytes_received": rep.get("bytes"), "repetition_error": rep.get("error")})
    return out


def _atomic_write(path: Path, text: str) -> None:
    # A crash mid-write must not leave a truncated results file that looks complete.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_results(results: Results, directory: Path | str) -> None:
    """Write results.json (indent 2, everything) and results.csv (long: one line per
    cell x repetition) into directory.

    NaN/inf are refused (ValueError) rather than written as invalid JSON.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        text = json.dumps(results.to_dict(), indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise ValueError("results contain NaN or infinity, which JSON cannot carry") from None

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    columns = csv_columns(results)
    writer.writerow(columns)
    for record in long_records(results):
        writer.writerow([_csv_cell(record[c]) for c in columns])

    _atomic_write(directory / RESULTS_JSON, text)
    _atomic_write(directory / RESULTS_CSV, buf.getvalue())


def load_results(directory: Path | str) -> Results:
    """Read results.json from directory; ValueError on an unknown schema or bad JSON."""
    path = Path(directory) / RESULTS_JSON
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return Results.from_dict(data)


# --- provenance -----------------------------------------------------------------------------


def _run(argv: Sequence[str], cwd: Path | None = None, timeout: float = 3.0) -> str | None:
    """stdout+stderr of a command, or None if it failed, timed out or is missing.

    The command gets its own session so a timeout kills it and any children it
    forked; otherwise a child holding the pipe open would hang us past the timeout.
    """
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    if proc.returncode != 0:
        return None
    return out.decode("utf-8", "replace")


def _first_line(text: str | None) -> str | None:
    if text is None:
        return None
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return None


def git_state(path: Path | None = None) -> tuple[str, bool | None]:
    """(HEAD SHA, dirty) of the checkout holding ptlab; ("unknown", None) outside git."""
    where = path if path is not None else Path(__file__).resolve().parent.parent
    sha = _first_line(_run(["git", "rev-parse", "HEAD"], cwd=where))
    if sha is None:
        return "unknown", None
    # Read-only: GIT_OPTIONAL_LOCKS=0 stops status from refreshing the index.
    # Untracked files count: new, uncommitted code also makes HEAD an incomplete record.
    status = _run(["git", "status", "--porcelain"], cwd=where)
    dirty = None if status is None else bool(status.strip())
    return sha, dirty


def binary_version(binary: str, timeout: float = 3.0) -> str:
    """First output line of `<bin> --version` (or `-version`, Go style); "not installed".
    A peer built by scripts/setup --peers is found as ptlab.common.tools finds it."""
    built = built_peers.locate(binary)
    exe = built[0] if built else shutil.which(binary)
    if exe is None:
        return "not installed"
    for flag in ("--version", "-version"):
        line = _first_line(_run([exe, flag], timeout=timeout))
        if line:
            return line
    # A built peer with no version flag (Tor's webtunnel-server) is its pin.
    return built[1].removeprefix("peers ") if built else "unknown"


def python_dep_versions(names: Iterable[str] = PYTHON_DEPS) -> dict[str, str]:
    """Installed distribution versions, "not installed" when absent."""
    out: dict[str, str] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance(
    seeds: dict[str, Any],
    profile_files: Iterable[Path],
    peer_binaries: Iterable[str] = PEER_BINARIES,
) -> dict[str, Any]:
    """Everything needed to tell later what produced a run's numbers."""
    sha, dirty = git_state()
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "kernel": os.uname().release,
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "seeds": dict(seeds),
        "profiles": {str(p): built_peers.sha256_file(Path(p)) for p in profile_files},
        "peers": {b: binary_version(b) for b in peer_binaries},
        # The real peers built from their Go modules (scripts/setup --peers):
        # module, version, module sum, Go version, tags and SHA-256 of each binary
        # (docs/lab/peers.md §1.3), and those the module proxy kept from being built.
        "built_peers": built_peers.provenance(),
        "peers_not_built": built_peers.failures(),
        "python_deps": python_dep_versions(),
    }
