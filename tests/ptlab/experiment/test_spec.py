"""Specs are checked key by key; a bad key is named by its path."""

import tomllib
from pathlib import Path

import pytest

from ptlab.experiment.spec import SpecError, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[3]
GOOD = """
[experiment]
name = "t"
repetitions = 2
[transports.direct]
[censors.none]
[censors.block-web]
profile = "ip-blocklist"
detectors.ip_blocklist.addresses = ["role:web"]
[workloads.bulk]
size = 1000
[[expect]]
transport = "direct"
censor = "none"
status = "reachable"
"""


def parse(text, **kw):
    return parse_spec(tomllib.loads(text), Path("x.toml"), ["direct"], ["none", "ip-blocklist"])


def test_good_spec():
    s = parse(GOOD)
    assert s.cells() == [("direct", "none"), ("direct", "block-web")]
    assert s.censor_profile("block-web") == (
        "ip-blocklist", {"detectors": {"ip_blocklist": {"addresses": ["role:web"]}}})
    assert s.workloads.bulk_size == 1000 and s.repetitions == 2
    assert s.expect[0].status == "reachable"


def test_the_full_matrix_has_every_shipped_profile_and_plugin():
    from censor_sim.profile import available
    from ptlab import plugins
    from ptlab.common import peers

    spec = load_spec(REPO / "experiments" / "full.toml", plugins.available(), available())
    assert {spec.censor_profile(c)[0] for c in spec.censors} == set(available())
    # Every row but those that run a peer scripts/setup --peers builds: full.toml
    # runs after the README's first command, and experiments/peers*.toml have those.
    built = {tool for pin in peers.load_pins() for tool in pin.packages}
    needs_built = {name for name in plugins.available()
                   if set(plugins.get(name).needed_binaries({})) & built}
    assert needs_built >= {"lyrebird", "webtunnel-tor-server", "tor+webtunnel-tor-server",
                           "snowflake-upstream-proxy", "conjure-refraction"}
    assert set(spec.transports) == set(plugins.available()) - needs_built
    in_peers = set()
    for path in sorted((REPO / "experiments").glob("peers*.toml")):
        in_peers |= set(load_spec(path, plugins.available(), available()).transports)
    assert in_peers >= needs_built


@pytest.mark.parametrize("edit, msg", [
    (("size = 1000", "szie = 1000"), "x.toml: workloads.bulk.szie: unknown key"),
    (("repetitions = 2", 'repetitions = "2"'), "experiment.repetitions: expected int, got str"),
    (("repetitions = 2", "repetitions = 0"), "experiment.repetitions: must be between"),
    (("[transports.direct]", "[transports.obfs9]"), "transports.obfs9: unknown transport"),
    (('profile = "ip-blocklist"', 'profile = "gfw"'), "censors.block-web: unknown censor profile"),
    (('status = "reachable"', 'status = "fine"'), r"expect\[0\].status: must be one of"),
    (('censor = "none"\nstatus', 'censor = "nope"\nstatus'), r"expect\[0\].censor: 'nope'"),
    (("[experiment]", "[experimen]"), "experimen: unknown key"),
    (("repetitions = 2", "repetitions = 2\ncapture_snaplen = 95"),
     r"experiment.capture_snaplen: must be 0 \(whole packets\) or between 96 and 262144 "
     "bytes, got 95"),
    (("repetitions = 2", "repetitions = 2\ncapture_snaplen = 262145"),
     "experiment.capture_snaplen: must be 0"),
    (("repetitions = 2", "repetitions = 2\ncapture_snaplen = -1"),
     "experiment.capture_snaplen: must be 0"),
    (("repetitions = 2", 'repetitions = 2\ncapture_snaplen = "all"'),
     "experiment.capture_snaplen: expected int, got str"),
    (("repetitions = 2", "repetitions = 2\ncapture_snapln = 0"),
     "experiment.capture_snapln: unknown key \\(did you mean 'capture_snaplen'\\?\\)"),
])
def test_bad_keys_are_named_by_path(edit, msg):
    with pytest.raises(SpecError, match=msg):
        parse(GOOD.replace(*edit))


@pytest.mark.parametrize(("line", "snaplen"), [
    ("", 262144),  # whole packets by default
    ("capture_snaplen = 0", 262144),  # tcpdump's -s 0: its largest
    ("capture_snaplen = 96", 96),  # the shortest that keeps IPv6 and TCP headers
    ("capture_snaplen = 262144", 262144),
    ("capture_snaplen = 1500", 1500)])
def test_capture_snap_length(line, snaplen):
    assert parse(GOOD.replace("repetitions = 2", f"repetitions = 2\n{line}")
                 ).capture_snaplen == snaplen


def test_unparsable_and_missing_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[experiment\n")
    with pytest.raises(SpecError, match="bad.toml: not valid TOML"):
        load_spec(bad)
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.toml")


def experiment_specs() -> list[str]:
    """The experiment specs in experiments/ (the dataset and scale specs have their own
    loaders and tests)."""
    return sorted(p.name for p in (REPO / "experiments").glob("*.toml")
                  if "experiment" in tomllib.loads(p.read_text()))


@pytest.mark.parametrize("name", experiment_specs())
def test_shipped_specs_are_valid(name):
    """Every experiment spec in experiments/ loads against the installed plugins and
    profiles."""
    from censor_sim.profile import available
    from ptlab import plugins

    spec = load_spec(REPO / "experiments" / name, plugins.available(), available())
    assert spec.cells()


@pytest.mark.parametrize("edit, msg", [
    (("detectors.ip_blocklist.addresses", "detectors.ip_blocklist.adresses"),
     r"censors\.block-web\.detectors\.ip_blocklist\.adresses: unknown parameter"),
    (('detectors.ip_blocklist.addresses = ["role:web"]',
      'detectors.ip_blocklist.addresses = ["role:web"]\n'
      'policy.rules = [{detector = "ip_blocklist", action = "rst", probability = 1.0}]'),
     r"censors\.block-web\.policy\.rules\[0\]: ip_blocklist -> rst is not implemented"),
    (('detectors.ip_blocklist.addresses = ["role:web"]',
      'detectors.ip_blocklist.addresses = ["role:web"]\n'
      'policy.rules = [{detector = "ip_blocklist", action = "drop", probability = 0.3}]'),
     r"probability: only 1\.0 is implemented"),
])
def test_censor_overrides_are_checked_when_the_spec_loads(edit, msg):
    with pytest.raises(SpecError, match=msg):
        parse(GOOD.replace(*edit))


def test_error_is_not_an_expectation():
    with pytest.raises(SpecError, match="must be one of reachable, blocked"):
        parse(GOOD.replace('status = "reachable"', 'status = "ERROR"'))


def test_a_star_expects_every_row_or_column_and_a_named_cell_overrides_it():
    from ptlab.common.results import Row
    from ptlab.experiment.scoring import apply_expectations

    s = parse(GOOD + '[[expect]]\ntransport = "*"\ncensor = "*"\nstatus = "blocked"\n'
              '[[expect]]\ntransport = "direct"\ncensor = "none"\nstatus = "reachable"\n')
    got = {}
    for t, c in s.cells():
        row = apply_expectations(Row(transport=t, censor=c, status="blocked"), s.expect)
        got[(t, c)] = row.expectation
    assert got == {("direct", "none"): "reachable", ("direct", "block-web"): "blocked"}
    with pytest.raises(SpecError, match="'obfs9' is not in"):
        parse(GOOD + '[[expect]]\ntransport = "obfs9"\ncensor = "*"\nstatus = "blocked"\n')
