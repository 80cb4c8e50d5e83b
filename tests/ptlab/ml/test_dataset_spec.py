"""Dataset specs: every key checked, errors name their path."""

from __future__ import annotations

import pytest

from ptlab.ml.dataset import load_dataset_spec, parse_dataset_spec, scaled
from ptlab.spec import SpecError

GOOD = {"dataset": {"name": "t", "seed": 3, "window": 20},
        "settings": {"lan": {}, "tun": {"mtu": 1380, "delay_ms": 20}},
        "transports": {"obfs4": {"flows": 10}}, "benign": {"sessions": 5}}


def test_good_spec_and_the_shipped_one(request):
    ds = parse_dataset_spec(GOOD)
    assert [s.name for s in ds.settings] == ["lan", "tun"]
    assert ds.settings[1].mtu == 1380 and ds.window == 20
    assert ds.transports["obfs4"]["flows"] == 10
    quick = scaled(ds, 0.1)
    assert quick.transports["obfs4"]["flows"] == 2 and ds.transports["obfs4"]["flows"] == 10
    shipped = load_dataset_spec(request.config.rootpath / "experiments" / "ml-dataset.toml")
    total = sum(t["flows"] for t in shipped.transports.values()) + shipped.benign_sessions
    assert total * len(shipped.settings) >= 2000


@pytest.mark.parametrize("change,message", [
    ({"dataset": {"sede": 1}}, "dataset.sede: unknown key"),
    ({"settings": {}}, "at least one link setting"),
    ({"settings": {"x": {"mtu": 500}}}, "settings.x.mtu"),
    ({"settings": {"x": {"loss_pct": 80}}}, "settings.x.loss_pct"),
    ({"transports": {"nope": {}}}, "transports.nope: unknown transport"),
    ({"transports": {"obfs4": {"flows": 0}}}, "transports.obfs4.flows"),
    ({"transports": {"obfs4": {"options": {"iat_mode": 7}}}}, "transports.obfs4.options"),
    ({"benign": {"sessions": "many"}}, "benign.sessions"),
])
def test_bad_specs_name_the_key(change, message):
    spec = {**GOOD, **change}
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        parse_dataset_spec(spec)
