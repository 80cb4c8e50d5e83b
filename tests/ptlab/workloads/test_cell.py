"""The client's measurement crosses machines as JSON: it round-trips, and junk is refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptlab.workloads.benign import BenignResult
from ptlab.workloads.bulk import BulkResult
from ptlab.workloads.cell import Measurement, main


def sample() -> Measurement:
    return Measurement(
        0.12, [BulkResult(True, 10, 10, 0.5, "ab", "ab"),
               BulkResult(False, 10, 4, 4.0, None, "ab", error="TimeoutError")],
        [1.5, 2.0], [BenignResult("ssh", "198.18.101.20:22", True, None, 0.3)])


def test_a_measurement_round_trips_through_json():
    m = sample()
    assert Measurement.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    none = Measurement(None, [], [], None)
    assert Measurement.from_dict(json.loads(json.dumps(none.to_dict()))) == none


@pytest.mark.parametrize("mutate, complaint", [
    (lambda d: d.pop("bulks"), "keys"),
    (lambda d: d.update(bulks="x"), "bulks: expected a list"),
    (lambda d: d["bulks"][0].update(received="10"), "BulkResult.received"),
    (lambda d: d["bulks"][0].update(ok=1), "BulkResult.ok"),
    (lambda d: d["bulks"][0].update(size=True), "BulkResult.size"),
    (lambda d: d.update(bootstrap_s="0.1"), "bootstrap_s"),
    (lambda d: d["benign"][0].pop("kind"), "BenignResult"),
    (lambda d: d.update(latency_samples=[None]), "latency_samples"),
])
def test_a_malformed_measurement_is_refused_by_name(mutate, complaint):
    d = sample().to_dict()
    mutate(d)
    with pytest.raises(ValueError, match=complaint):
        Measurement.from_dict(d)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, st.fixed_dictionaries(
    {"bootstrap_s": json_values, "bulks": json_values, "latency_samples": json_values,
     "benign": json_values})))
def test_any_json_gives_a_measurement_or_a_value_error(value):
    try:
        m = Measurement.from_dict(value)
    except ValueError as exc:
        assert str(exc).startswith("not a cell measurement")
    else:
        assert isinstance(m, Measurement)


def test_the_client_command_says_what_is_wrong_with_its_config(tmp_path, capsys):
    bad = tmp_path / "w.json"
    bad.write_text("{not json")
    assert main([str(bad)]) == 2
    assert "bad config" in capsys.readouterr().err
    bad.write_text(json.dumps({"endpoint": {}, "plan": {}}))
    assert main([str(bad)]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2


def test_the_benign_targets_survive_the_client_hosts_config():
    """A VM's client host gets the mix as JSON: every class must come back (the QUIC
    flow was once dropped on the way)."""
    import dataclasses

    from ptlab.workloads.benign import BenignTargets
    from ptlab.workloads.cell import _targets

    t = BenignTargets(https=[("198.18.4.2", 443, "www.benign.lab", "/ca.pem")],
                      http=[("198.18.7.2", 80, "web.lab")], dns=("198.18.8.2", 53),
                      ssh=("198.18.7.2", 22), binary=("198.18.7.2", 7000),
                      udp=("198.18.7.2", 7001), binary_extra=[("198.18.6.9", 7000)],
                      quic=[("198.18.7.2", 443, "web.lab", "/ca.pem")])
    assert _targets(json.loads(json.dumps(dataclasses.asdict(t)))) == t
