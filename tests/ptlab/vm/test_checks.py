"""What the three-machine layout cannot run is refused in one line, before anything starts."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ptlab.experiment.spec import SpecError, parse_spec
from ptlab.vm.runner import check_spec

REPO = Path(__file__).resolve().parents[3]


def spec(**tables):
    data = {"experiment": {"name": "t", "seed": 1}, "transports": {"direct": {}},
            "censors": {"none": {}}}
    data.update(tables)
    return parse_spec(data)


def test_the_vm_spec_is_accepted():
    data = tomllib.loads((REPO / "experiments" / "vm.toml").read_text())
    s = parse_spec(data)
    check_spec(s)
    assert set(s.transports) == {"direct", "obfs4"}
    assert set(s.censors) == {"none", "ip-blocklist"}


@pytest.mark.parametrize("tables, complaint", [
    ({"transports": {"meek": {}}}, "transports.meek: not available on the three-machine"),
    ({"transports": {"snowflake": {}}}, "transports.snowflake: not available"),
    ({"topology": {"rate_mbit": 10}}, "link shaping"),
    ({"censors": {"p": {"profile": "gfw-prober"}}}, "no prober machine"),
])
def test_what_the_layout_lacks_is_refused(tables, complaint):
    with pytest.raises(SpecError, match=complaint):
        check_spec(spec(**tables))
