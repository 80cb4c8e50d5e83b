"""Censor profiles load, cite sources, and refuse overrides that name nothing."""

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
