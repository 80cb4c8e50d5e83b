"""Censor profiles load, cite sources, and refuse overrides that name nothing."""

import random

import pytest

from censor_sim.datapath import Blocklist, DatapathError, ruleset
from censor_sim.profile import ProfileError, available, load_profile


def test_every_profile_loads_and_cites_its_source():
    assert {"none", "ip-blocklist"} <= set(available())
    for name in available():
        prof = load_profile(name)
        assert prof.source.strip(), name
        assert len(prof.sha256) == 64


def test_overrides_apply():
    prof = load_profile("ip-blocklist", {"detectors": {"ip_blocklist": {
        "addresses": ["198.18.3.2"], "ports": [443]}}})
    assert prof.detectors["ip_blocklist"]["addresses"] == ["198.18.3.2"]
    assert prof.detectors["ip_blocklist"]["ports"] == [443]


@pytest.mark.parametrize("over, msg", [
    ({"detectors": {"ip_blocklist": {"adresses": []}}},
     "censors.ip-blocklist.detectors.ip_blocklist.adresses: unknown parameter"),
    ({"detectors": {"ip_blocklist": {"ports": "443"}}}, "expected list, got str"),
    ({"detectorz": {}}, "censors.ip-blocklist.detectorz: unknown parameter"),
])
def test_bad_overrides_name_their_path(over, msg):
    with pytest.raises(ProfileError, match=msg.replace(".", r"\.")):
        load_profile("ip-blocklist", over)


def test_unknown_profile():
    with pytest.raises(ProfileError, match="unknown censor profile 'gfw9000'"):
        load_profile("gfw9000")


def test_ruleset_renders_blocklist_and_counters():
    bl = Blocklist.from_params({"addresses": ["198.18.3.2", "2001:db8:0:3::2"], "ports": []})
    text = ruleset(bl)
    assert "198.18.3.2/32" in text and "2001:db8:0:3::2/128" in text
    assert "counter name blocklist_drop drop" in text
    assert "blocklist_drop drop" not in ruleset(None).split("chain pre")[1]


def test_blocklist_refuses_unresolved_roles_and_junk():
    with pytest.raises(DatapathError, match="unresolved"):
        Blocklist.from_params({"addresses": ["role:bridge"]})
    with pytest.raises(DatapathError, match="bad blocklist address"):
        Blocklist.from_params({"addresses": ["not-an-ip"]})
    with pytest.raises(DatapathError, match="bad blocklist port"):
        Blocklist.from_params({"addresses": [], "ports": [70000]})


def test_every_profile_can_be_run_as_a_tap_by_override():
    from censor_sim.engine import unsupported

    for name in ("gfw-fet-2021", "sni-blocklist", "ip-blocklist"):
        prof = load_profile(name, {"datapath": {"mode": "on-path", "tap_batch": 64,
                                                "tap_wait_ms": 10}})
        assert prof.datapath["mode"] == "on-path" and prof.datapath["tap_batch"] == 64
        assert unsupported(prof) is None
    plain = load_profile("gfw-fet-2021")
    assert (plain.datapath["mode"], plain.datapath["tap_batch"],
            plain.datapath["tap_wait_ms"]) == ("in-path", 1, 0)


@pytest.mark.parametrize(("key", "value"), [("tap_batch", 0), ("tap_batch", 1025),
                                            ("tap_wait_ms", -1), ("tap_wait_ms", 1001)])
def test_a_tap_batch_or_wait_out_of_range_is_refused_in_one_line(key, value):
    from censor_sim.engine import unsupported

    why = unsupported(load_profile("gfw-fet-2021", {"datapath": {key: value}}))
    assert why is not None and why.startswith(f"datapath.{key}: must be a whole number")


@pytest.mark.parametrize(("key", "value"), [("tap_batch", 1), ("tap_batch", 1024),
                                            ("tap_wait_ms", 0), ("tap_wait_ms", 1000)])
def test_tap_settings_at_their_bounds_are_taken(key, value):
    from censor_sim.engine import unsupported

    assert unsupported(load_profile("gfw-fet-2021", {"datapath": {key: value}})) is None


def test_a_tap_batch_of_the_wrong_type_is_refused():
    with pytest.raises(ProfileError, match="tap_batch: expected int"):
        load_profile("gfw-fet-2021", {"datapath": {"tap_batch": "64"}})


def test_the_tap_rules_log_copies_in_the_configured_batches():
    from censor_sim.datapath import QueueConfig, queue_rules

    tap = queue_rules(QueueConfig("in0", "out0", 8, mechanism="tap", tap_batch=64))
    assert all(r[-6:] == ["-j", "NFLOG", "--nflog-group", r[-3], "--nflog-threshold", "64"]
               for r in tap)
    assert [r[-3] for r in tap] == ["10", "11"]
    queue = queue_rules(QueueConfig("in0", "out0", 8))
    assert [r[-4:] for r in queue] == [["-j", "NFQUEUE", "--queue-num", "10"],
                                       ["-j", "NFQUEUE", "--queue-num", "11"]]


def test_a_censor_that_reads_only_clients_gets_only_the_client_side():
    from censor_sim.datapath import QueueConfig, queue_rules

    both = queue_rules(QueueConfig("in0", "out0", 8))
    client = queue_rules(QueueConfig("in0", "out0", 8, client_side_only=True))
    assert [r[2:4] for r in both] == [["-i", "in0"], ["-i", "out0"]]
    assert client == both[:1]


def test_which_inspectors_read_the_server_side():
    from censor_sim.engine import Engine

    def reads(name: str) -> set[bool]:
        import random

        eng = Engine(load_profile(name), clock=lambda: 0.0, rng=random.Random(0))
        return {i.reads_server for i in eng.inspectors}

    assert reads("gfw-fet-2021") == {False}  # the first client payload
    assert reads("sni-blocklist") == {False}  # the client's ClientHello
    assert reads("gfw-quic-sni-2024") == {True}  # inbound Initials count too


def test_watching_births_leaves_syns_in_the_kernel_and_copies_only_connections_it_saw_born():
    from censor_sim.datapath import MARK_BORN, MARK_MASK, QueueConfig, queue_rules

    text = ruleset(None, skip_empty_tcp=True, watch_births=True)
    pre = text.split("chain pre")[1].split("chain post")[0]
    born = ("ct state new meta l4proto tcp tcp flags & (syn | ack) == syn "
            f"ct mark set ct mark or {MARK_BORN:#x}")
    assert born in pre
    # A bare SYN now counts as a segment with no payload (it stays in the kernel) ...
    assert "tcp flags & (syn | ack) != syn" not in pre
    # ... where without watch_births it goes to the censor, which starts the flow on it.
    assert "tcp flags & (syn | ack) != syn" in ruleset(None, skip_empty_tcp=True)
    assert "ct mark or 0x400" not in ruleset(None, skip_empty_tcp=True)
    # The marking comes before the vmap that decides what is empty.
    assert pre.index(born) < pre.index("tcp doff vmap")

    q = QueueConfig("in0", "out0", 8, skip_empty_tcp=True, mechanism="tap",
                    client_side_only=True, watch_births=True)
    tcp_rule, other_rule = queue_rules(q)
    assert tcp_rule[4:7] == ["-p", "tcp", "-m"]
    assert f"{MARK_BORN:#x}/{MARK_MASK | MARK_BORN:#x}" in tcp_rule
    assert other_rule[4:7] == ["!", "-p", "tcp"]
    assert f"0/{MARK_MASK:#x}" in other_rule and f"{MARK_BORN:#x}" not in " ".join(other_rule)
    assert tcp_rule[-6:] == other_rule[-6:] and tcp_rule[-3] == "10"


def test_only_the_protocols_some_inspector_reads_leave_the_kernel():
    from censor_sim.datapath import QueueConfig, queue_rules

    tcp_only = queue_rules(QueueConfig("in0", "out0", 8, protocols=(6,)))
    # The client side's rule, then the server side's (which names both interfaces).
    assert [r[4:6] for r in tcp_only] == [["-p", "tcp"], ["-o", "in0"]]
    assert tcp_only[1][6:8] == ["-p", "tcp"]
    both = queue_rules(QueueConfig("in0", "out0", 8, protocols=(17, 6), client_side_only=True,
                                   mechanism="tap", skip_empty_tcp=True, watch_births=True))
    assert [r[4:6] for r in both] == [["-p", "tcp"], ["-p", "udp"]]
    assert "0x400/0x470" in both[0] and "0x400/0x470" not in both[1]
    # None: every protocol, as before (a packet censor such as Geneva's).
    assert all("-p" not in r for r in queue_rules(QueueConfig("in0", "out0", 8)))


@pytest.mark.parametrize(("key", "good", "bad", "message"), [
    ("max_flows", 1, 0, "datapath.max_flows: must be a whole number from 1"),
    ("max_residuals", 1 << 24, (1 << 24) + 1, "datapath.max_residuals: must be a whole number"),
    ("flow_idle_s", 0.5, 0, "datapath.flow_idle_s: must be a number of seconds above 0"),
    ("flow_idle_s", 86400, 86401, "datapath.flow_idle_s: must be a number of seconds above 0"),
])
def test_the_engines_table_bounds_are_overridable_within_limits(key, good, bad, message):
    from censor_sim.engine import Engine, unsupported

    prof = load_profile("gfw-fet-2021", {"datapath": {key: good}})
    assert unsupported(prof) is None
    eng = Engine(prof, clock=lambda: 0.0, rng=random.Random(0))
    assert {"max_flows": eng.flows.max_flows, "max_residuals": eng.max_residuals,
            "flow_idle_s": eng.flows.idle_s}[key] == good
    assert unsupported(load_profile("gfw-fet-2021", {"datapath": {key: bad}})).startswith(
        message)
