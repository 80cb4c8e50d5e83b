"""``ptlab dataset SPEC OUT/``: labelled per-flow features from the lab, with their pcaps.

For every link setting in the spec the lab comes up with that shaping (rate,
loss, delay on the path past the censor), and then, with no censor running:

* each transport runs its ``flows`` connections (:func:`.traffic.transport_flow`);
* the benign mix runs its ``sessions`` (:func:`.traffic.benign_session`).

Each of those is a *cell* with its own capture on the censor's client-side
interface. Every TCP flow in a cell's capture gets the cell's label (the
transport's name, or ``benign``) and an ``app`` (the transport, or the benign
session kind by server port), and its features are computed from the pcap by
the censor's own code (:mod:`censor_sim.pcapflows`,
:mod:`censor_sim.detectors.ml.features`). The output directory holds

* ``flows.csv`` - one row per flow: id, label, app, setting, cell, endpoints,
  the pcap it came from, then the features in schema order;
* ``pcaps/<setting>__<cell>.pcap`` - the captures;
* ``dataset.json`` - the spec, the schema, counts per label and setting, the
  CSV's SHA-256 (models trained on it record that hash).

``flows.csv`` may be gzipped (``flows.csv.gz``; the hash is of the CSV), as
the dataset the shipped models were trained on is in ``datasets/``.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import gzip
import hashlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from censor_sim.detectors.ml import features
from censor_sim.pcapflows import flows_from_pcap

from .. import plugins
from ..common.specfile import Checker, SpecError, read_toml
from ..common.wellknown import WEB_HTTPS
from ..experiment.spec import parse_spec
from . import traffic

FORMAT = "ptlab-dataset/1"
META_COLUMNS = ("flow_id", "label", "app", "setting", "cell", "client", "server",
                "server_port", "server_role", "packets", "pcap")
#: The benign session kind of a flow, by its server port.
APPS_BY_PORT = {443: "https", 80: "http", 22: "ssh", 53: "dns", 7000: "binary"}


@dataclass
class Setting:
    name: str
    rate_mbit: float = 0.0
    delay_ms: float = 0.0
    loss_pct: float = 0.0
    # The client's access-link MTU (0 = the lab's 1500): tunnels, PPPoE and mobile
    # links carry smaller packets, which moves every size feature.
    mtu: int = 0


@dataclass
class DatasetSpec:
    name: str
    seed: int
    window: int
    settings: list[Setting]
    transports: dict[str, dict[str, Any]]  # name -> {"flows": n, "options": {...}}
    benign_sessions: int
    concurrency: int = 4
    snaplen: int = 2200
    flow_timeout_s: float = 15.0
    raw: dict[str, Any] = field(default_factory=dict)


def parse_dataset_spec(data: dict[str, Any], where: str = "spec") -> DatasetSpec:
    """Validate a dataset spec; every error names its key path."""
    c = Checker(where)
    check, num = c.table, c.number

    check(data, "", {"dataset", "settings", "transports", "benign"})
    ds = check(data.get("dataset", {}), "dataset",
               {"name", "description", "seed", "window", "concurrency", "snaplen",
                "flow_timeout_s", "rows_from"})
    settings = []
    for name, st in check(data.get("settings", {}), "settings", set(data.get("settings", {}))
                          ).items():
        st = check(st, f"settings.{name}", {"rate_mbit", "delay_ms", "loss_pct", "mtu"})
        mtu = num(st, "mtu", f"settings.{name}", 0, 0, 9000, True)
        if mtu and not 1280 <= mtu <= 9000:
            raise SpecError(f"{where}: settings.{name}.mtu: must be 0 or in [1280, 9000] "
                            f"(IPv6 needs 1280)")
        settings.append(Setting(name, float(num(st, "rate_mbit", f"settings.{name}", 0, 0, 1e5)),
                                float(num(st, "delay_ms", f"settings.{name}", 0, 0, 5000)),
                                float(num(st, "loss_pct", f"settings.{name}", 0, 0, 50)), mtu))
    if not settings:
        raise SpecError(f"{where}: settings: at least one link setting is needed")
    known = plugins.available()
    transports: dict[str, dict[str, Any]] = {}
    for name, t in check(data.get("transports", {}), "transports",
                         set(data.get("transports", {}))).items():
        t = check(t, f"transports.{name}", {"flows", "options", "inner"})
        opts = t.get("options", {})
        if not isinstance(opts, dict):
            raise SpecError(f"{where}: transports.{name}.options: expected a table")
        if opts.get("kind") == "external":  # a bring-your-own-tool row: register it
            parse_spec({"transports": {name: opts}, "censors": {"none": {}}})
        elif name not in known:
            raise SpecError(f"{where}: transports.{name}: unknown transport "
                            f"(known: {', '.join(known)})")
        inner = t.get("inner", "http")
        if inner not in ("http", "https"):
            raise SpecError(f"{where}: transports.{name}.inner: {inner!r} is not supported "
                            "(supported: http, https)")
        try:
            plugins.get(name).check_options(opts)
        except (KeyError, ValueError) as exc:
            raise SpecError(f"{where}: transports.{name}.options: {exc}") from None
        transports[name] = {"flows": num(t, "flows", f"transports.{name}", 50, 1, 100_000,
                                         True), "options": opts, "inner": inner}
    if not transports:
        raise SpecError(f"{where}: transports: at least one transport is needed")
    ben = check(data.get("benign", {}), "benign", {"sessions"})
    name = ds.get("name", "dataset")
    if not isinstance(name, str):
        raise SpecError(f"{where}: dataset.name: expected a string")
    return DatasetSpec(
        name, num(ds, "seed", "dataset", 1, 0, 2**63, True),
        num(ds, "window", "dataset", features.DEFAULT_WINDOW, 1, 1000, True), settings,
        transports, num(ben, "sessions", "benign", 100, 0, 100_000, True),
        num(ds, "concurrency", "dataset", 4, 1, 64, True),
        num(ds, "snaplen", "dataset", 2200, 200, 262144, True),
        float(num(ds, "flow_timeout_s", "dataset", 15.0, 1, 600)), data)


def load_dataset_spec(path: Path) -> DatasetSpec:
    """A dataset spec from its file. ``dataset.rows_from = "proxies.toml"`` (beside it)
    lends that experiment's rows to transports that give no ``options`` of their own,
    so a dataset of bring-your-own-tool rows does not copy their definitions."""
    data = read_toml(path)
    src = data.get("dataset", {}).get("rows_from") if isinstance(data, dict) else None
    if src is not None:
        if not isinstance(src, str):
            raise SpecError(f"{Path(path).name}: dataset.rows_from: expected a file name")
        rows = read_toml(Path(path).parent / src).get("transports", {})
        for name, t in data.get("transports", {}).items():
            if isinstance(t, dict) and "options" not in t and isinstance(rows.get(name), dict):
                t["options"] = rows[name]
    return parse_dataset_spec(data, Path(path).name)


def scaled(spec: DatasetSpec, factor: float) -> DatasetSpec:
    """The same spec with `factor` times the flows and sessions (a quick run)."""
    import copy

    out = copy.deepcopy(spec)
    for t in out.transports.values():
        t["flows"] = max(2, int(t["flows"] * factor))
    out.benign_sessions = max(2, int(out.benign_sessions * factor))
    return out


def _lab_spec(ds: DatasetSpec, setting: Setting):
    return parse_spec({
        "experiment": {"name": f"{ds.name}-{setting.name}", "seed": ds.seed},
        "topology": {"rate_mbit": setting.rate_mbit, "delay_ms": setting.delay_ms,
                     "loss_pct": setting.loss_pct},
        "transports": {n: t["options"] for n, t in ds.transports.items()},
        "censors": {"none": {}}})


def collect(ds: DatasetSpec, out: Path, log=print, lab_id: str | None = None) -> dict[str, Any]:
    """Run the spec in the lab and write the dataset to `out`; returns the manifest."""
    from ..experiment.runner import LabRunner

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = features.feature_names(ds.window)
    rows: list[list[Any]] = []
    failures: Counter[str] = Counter()
    t0 = time.monotonic()
    for setting in ds.settings:
        runner = LabRunner(_lab_spec(ds, setting), out / "lab" / setting.name, lab_id=lab_id,
                           capture=False, log=log)
        with runner:
            assert runner.lab and runner.services
            lab = runner.lab
            clients = lab.topology.addresses("client")
            if setting.mtu:
                for role, peer in (("client", "censor"), ("censor", "client")):
                    lab.exec(role, ["ip", "link", "set", "dev", lab.iface(role, peer), "mtu",
                                    str(setting.mtu)])
            cells: list[tuple[str, str | None]] = [(t, t) for t in ds.transports]
            cells.append(("benign", None))
            for cell, transport in cells:
                rng = random.Random(f"{ds.seed}/{setting.name}/{cell}")
                pcap = out / "pcaps" / f"{setting.name}__{cell}.pcap"
                with runner.traffic_session(transport, f"{setting.name}__{cell}",
                                            pcap, ds.snaplen) as ep:
                    if transport is not None:
                        n = ds.transports[transport]["flows"]
                        if ds.transports[transport]["inner"] == "https" and runner.services.ca:
                            # HTTPS to the web node inside the transport (docs/censors/
                            # tlsintls.md §2.1): the tunnel carries the user's handshake.
                            ep = dataclasses.replace(
                                ep, target_port=WEB_HTTPS,
                                inner_tls_ca=str(runner.services.ca.ca_path))
                        jobs = [_transport_job(lab.ns("client"), ep, traffic.plan(rng),
                                               ds.flow_timeout_s) for _ in range(n)]
                    else:
                        targets = runner.services.benign_targets()
                        edge_v6 = lab.addr("cdn", v6=True)
                        jobs = [traffic.benign_session(k, lab.ns("client"), targets, rng,
                                                       runner.services.sshd,
                                                       ds.flow_timeout_s, edge_v6)
                                for k in traffic.pick_kinds(rng, ds.benign_sessions)]
                    errors = asyncio.run(traffic.run_limited(jobs, ds.concurrency,
                                                             ds.flow_timeout_s))
                    failed = sum(e is not None for e in errors)
                    failures[f"{setting.name}/{cell}"] = failed
                    if failed:
                        first = next(e for e in errors if e is not None)
                        log(f"{setting.name}/{cell}: {failed} of {len(jobs)} flows failed "
                            f"({type(first).__name__}: {first})")
                for flow in flows_from_pcap(pcap, clients, ds.window):
                    role = lab.topology.role_of_addr(flow.server) or "?"
                    app = transport or APPS_BY_PORT.get(flow.server_port, f"tcp/{flow.server_port}")
                    if transport is None and flow.server_port == 443 and role == "cdn":
                        app = "https-edge"
                    rows.append([len(rows), cell, app, setting.name, f"{setting.name}__{cell}",
                                 flow.client, flow.server, flow.server_port, role,
                                 flow.packets, str(pcap.relative_to(out)),
                                 *(_fmt(v) for v in features.extract(flow.log, ds.window))])
            log(f"setting {setting.name}: {len(rows)} flows so far "
                f"({time.monotonic() - t0:.0f} s)")
    csv_path = out / "flows.csv"
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*META_COLUMNS, *names])
        w.writerows(rows)
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r[1], {}).setdefault(r[3], 0)
        counts[r[1]][r[3]] += 1
    manifest = {
        "format": FORMAT, "name": ds.name, "seed": ds.seed, "window": ds.window,
        "schema": {"version": features.SCHEMA_VERSION, "names": names},
        "settings": [vars(s) for s in ds.settings],
        "transports": ds.transports, "benign_sessions": ds.benign_sessions,
        "flows": len(rows), "counts": counts, "failed_flows": dict(failures),
        "csv_sha256": hashlib.sha256(csv_path.read_bytes()).hexdigest(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - t0, 1), "spec": ds.raw,
    }
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _transport_job(ns: str, ep: Any, p: traffic.Plan, timeout: float):
    return lambda: traffic.transport_flow(ns, ep, p, timeout)


def _fmt(v: float) -> str:
    """Features as text that reads back to the same float (repr round-trips)."""
    return repr(float(v)) if v != int(v) else str(int(v))


@dataclass
class Dataset:
    """A dataset read back: metadata rows and feature vectors, in file order."""

    manifest: dict[str, Any]
    names: list[str]
    meta: list[dict[str, str]]
    X: list[list[float]]
    path: Path

    @property
    def labels(self) -> list[str]:
        return [m["label"] for m in self.meta]

    @property
    def settings(self) -> list[str]:
        return [m["setting"] for m in self.meta]


def load_dataset(path: Path) -> Dataset:
    """Read ``flows.csv`` and ``dataset.json`` from a dataset directory, checking the
    CSV against the manifest's hash and this code's feature schema."""
    path = Path(path)
    man_path, csv_path = path / "dataset.json", path / "flows.csv"
    if not csv_path.exists() and (path / "flows.csv.gz").exists():
        csv_path = path / "flows.csv.gz"  # a dataset kept small (the repository's)
    if not man_path.exists() or not csv_path.exists():
        raise SpecError(f"{path}: not a dataset directory (no dataset.json / flows.csv)")
    try:
        manifest = json.loads(man_path.read_text())
    except json.JSONDecodeError as exc:
        raise SpecError(f"{man_path}: bad JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise SpecError(f"{man_path}: not a {FORMAT} manifest")
    raw = csv_path.read_bytes()
    if csv_path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise SpecError(f"{csv_path}: {exc}") from None
    if hashlib.sha256(raw).hexdigest() != manifest.get("csv_sha256"):
        raise SpecError(f"{csv_path}: does not match the manifest's SHA-256 (edited?)")
    lines = list(csv.reader(raw.decode().splitlines()))
    header, body = lines[0], lines[1:]
    k = len(META_COLUMNS)
    names = header[k:]
    window = int(manifest.get("window", features.DEFAULT_WINDOW))
    if names != features.feature_names(window):
        raise SpecError(f"{csv_path}: feature columns differ from this version's schema "
                        f"({features.SCHEMA_VERSION}); collect the dataset again")
    meta, X = [], []
    for n, r in enumerate(body, start=2):
        if len(r) != len(header):
            raise SpecError(f"{csv_path}:{n}: {len(r)} columns, the header has {len(header)}")
        try:
            X.append([float(v) for v in r[k:]])
        except ValueError as exc:
            raise SpecError(f"{csv_path}:{n}: {exc}") from None
        meta.append(dict(zip(META_COLUMNS, r[:k], strict=True)))
    return Dataset(manifest, names, meta, X, path)
