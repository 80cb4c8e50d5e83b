"""Dataset specs: every key checked, errors name their path."""

from __future__ import annotations

import pytest

from ptlab.experiment.spec import SpecError
from ptlab.ml.dataset import load_dataset_spec, parse_dataset_spec, scaled

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
    ({"transports": {"obfs4": {"inner": "quic"}}}, "transports.obfs4.inner: 'quic' is not"),
])
def test_bad_specs_name_the_key(change, message):
    spec = {**GOOD, **change}
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        parse_dataset_spec(spec)


def test_external_rows_and_inner_https_borrowed_from_an_experiment(request):
    """The TLS-in-TLS dataset names rows of proxies.toml, which lends their
    definitions; its flows carry HTTPS inside the tools."""
    ds = load_dataset_spec(request.config.rootpath / "experiments" / "tlsintls-dataset.toml")
    assert set(ds.transports) == {"trojan", "vmess-ws-tls", "vmess", "shadowsocks"}
    for t in ds.transports.values():
        assert t["inner"] == "https" and t["options"]["kind"] == "external"
    assert parse_dataset_spec(GOOD).transports["obfs4"]["inner"] == "http"


def test_rows_from_must_name_a_file(tmp_path):
    spec = tmp_path / "d.toml"
    spec.write_text('[dataset]\nrows_from = 3\n[settings.lan]\n[transports.x]\n')
    with pytest.raises(SpecError, match="dataset.rows_from: expected a file name"):
        load_dataset_spec(spec)
