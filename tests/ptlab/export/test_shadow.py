"""ptlab export shadow: the scale spec as a Shadow config, checked structurally."""

from __future__ import annotations

import copy
import json

import pytest

from ptlab.experiment.spec import SpecError
from ptlab.export import shadow
from ptlab.export.scalespec import load_scale_spec, parse_scale_spec


@pytest.fixture(scope="module")
def spec(request):
    return load_scale_spec(request.config.rootpath / "experiments" / "snowflake-scale.toml")


@pytest.fixture(scope="module")
def exported(spec, tmp_path_factory):
    out = tmp_path_factory.mktemp("shadow")
    path = shadow.write(spec, out)
    return json.loads(path.read_text().split("\n", 1)[1]), out


def test_the_shipped_spec_exports_and_passes_the_structural_checks(exported):
    cfg, out = exported
    assert shadow.structural_errors(cfg) == []
    assert (out / "bridges.jsonl").exists()
    assert cfg["general"]["stop_time"] == "1800000 ms"


def test_host_and_process_counts(spec, exported):
    cfg, _ = exported
    hosts = cfg["hosts"]
    assert {"broker", "bridge", "web", "stun"} <= set(hosts)
    clients = [h for h in hosts if h.startswith("client")]
    proxies = [h for h in hosts if h.startswith("proxy")]
    assert len(clients) == spec.clients == 100 and len(proxies) == spec.proxies == 100
    assert all(len(hosts[c]["processes"]) == 2 for c in clients)  # the PT and the fetch loop
    stays = sum(len(hosts[p]["processes"]) for p in proxies)
    assert stays == sum(len(s) for s in shadow.churn_schedule(spec)) > spec.proxies
    # Every address is IPv4 in the lab's range, and none is used twice.
    ips = [h["ip_addr"] for h in hosts.values()]
    assert len(set(ips)) == len(ips) and all(ip.startswith("198.1") for ip in ips)


def test_the_churn_schedule(spec, exported):
    cfg, _ = exported
    lo, hi = spec.proxy_lifetime_s
    seconds = shadow._seconds
    for i in range(spec.proxies):
        procs = cfg["hosts"][f"proxy{i}"]["processes"]
        for a, b in zip(procs, procs[1:], strict=False):
            # Each stay ends with SIGTERM, lasted lo..hi, and the next volunteer
            # comes rejoin_gap_s later.
            stay = seconds(a["shutdown_time"]) - seconds(a["start_time"])
            assert lo - 0.002 <= stay <= hi + 0.002
            assert a["shutdown_signal"] == "SIGTERM"
            assert a["expected_final_state"] == {"exited": 0}
            gap = seconds(b["start_time"]) - seconds(a["shutdown_time"])
            assert gap == pytest.approx(spec.rejoin_gap_s, abs=0.002)
        last = procs[-1]
        if "shutdown_time" in last:  # the last volunteer left, and the next came too late
            assert seconds(last["shutdown_time"]) + spec.rejoin_gap_s >= spec.duration_s
        else:
            assert last["expected_final_state"] == "running"
    # Seeded: the same spec, the same schedule; another seed, another one.
    assert shadow.churn_schedule(spec) == shadow.churn_schedule(spec)
    other = copy.deepcopy(spec)
    other.seed += 1
    assert shadow.churn_schedule(other) != shadow.churn_schedule(spec)


@pytest.mark.parametrize("mutate, message", [
    (lambda c: c["hosts"]["web"].update(network_node_id=7), "no graph node 7"),
    (lambda c: c["hosts"]["web"]["processes"][0].update(path="python3"), "must be absolute"),
    (lambda c: c["hosts"]["stun"].update(ip_addr="2001:db8::1"), "IPv4-only"),
    (lambda c: c["hosts"]["stun"].update(ip_addr="198.18.0.10"), "used twice"),
    (lambda c: c["hosts"]["stun"].update(ip_addr="10.0.0.1"), "outside the lab"),
    (lambda c: c["hosts"]["web"]["processes"][0].update(start_time="5"), "a number and a unit"),
    (lambda c: c["general"].update(stop_time="30"), "general.stop_time"),
    (lambda c: c["network"]["graph"].update(
        inline=c["network"]["graph"]["inline"].replace("source 1 target 2", "source 1 target 9")),
     "unknown node"),
    (lambda c: c["hosts"]["proxy0"]["processes"].insert(
        1, dict(c["hosts"]["proxy0"]["processes"][0])), "before the previous stay ended"),
    (lambda c: c["hosts"].update(Bad_Name=c["hosts"]["web"]), "host names"),
])
def test_broken_configs_are_caught(exported, mutate, message):
    cfg = copy.deepcopy(exported[0])
    mutate(cfg)
    errors = shadow.structural_errors(cfg)
    assert any(message in e for e in errors), errors


def test_shadows_own_types_when_they_can_be_imported(exported):
    why = shadow.shadowtools_check(exported[0])
    if why is not None:
        pytest.skip(why)


@pytest.mark.parametrize("data, message", [
    ({"scale": {"clients": 0}}, "scale.clients"),
    ({"churn": {"proxy_lifetime_s": [600, 300]}}, "churn.proxy_lifetime_s"),
    ({"network": {"moon": {}}}, "network.moon: unknown key"),
    ({"network": {"clients": {"loss": 0.9}}}, "network.clients.loss"),
    ({"workload": {"size": 1}}, "workload.size: unknown key"),
])
def test_bad_scale_specs_name_the_key(data, message):
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        parse_scale_spec(data)
