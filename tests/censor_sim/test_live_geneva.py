"""Geneva's twelve lab censors on the real datapath: every packet through NFQUEUE.

The exchange is Geneva's echo plugin in miniature (docs/censors/geneva.md §1.2): connect,
send the forbidden word, expect it echoed. Every censor must stop it, the
dropping ones by silence, the RST ones by a reset, and let the same exchange
without the word through.
"""

from __future__ import annotations

import pytest

from censor_sim.detectors import geneva

pytestmark = pytest.mark.lab

DROPPERS = {"censor1", "censor4", "censor6", "censor7", "censor8", "censor9"}


@pytest.mark.parametrize("name", sorted(geneva.CENSORS))
def test_every_geneva_censor_censors_the_keyword_exchange(name, censor_lab, run_censor, echo,
                                                         tcp):
    srv = censor_lab.addr("bridge")
    port = 7400 + sorted(geneva.CENSORS).index(name)
    echo([port])
    censor = run_censor(f"geneva-{name}", {"detectors": {"geneva": {"port": port}}})
    if name != "censor9":  # censor9 would track only this first connection (below)
        assert tcp(srv, port, [b"hello", b"world"]) == "ok"
    got = tcp(srv, port, [b"GET /ultrasurf HTTP/1.1\r\n\r\n"], timeout=1.5)
    assert got == ("timeout" if name in DROPPERS else "reset"), got
    dets = censor.events("detection")
    assert dets and dets[0]["detector"] == "geneva"
    ev = dets[0]["evidence"]
    assert ev["censor"] == name and ev["reason"] == "keyword"
    assert ev["packet"]["src"] == censor_lab.addr("client") and ev["packet"]["dport"] == port
    if name not in DROPPERS:
        assert censor.stop()["injected"] >= 5


def test_censor9_never_tracks_a_second_connection(censor_lab, run_censor, echo, tcp):
    """Live, Linux closes with FIN/ACK, which is not censor9's teardown: the first
    connection keeps its only TCB, so the keyword on the next one goes through."""
    srv = censor_lab.addr("bridge")
    echo([7420])
    censor = run_censor("geneva-censor9", {"detectors": {"geneva": {"port": 7420}}})
    assert tcp(srv, 7420, [b"hello"]) == "ok"
    assert tcp(srv, 7420, [b"GET /ultrasurf HTTP/1.1\r\n\r\n"]) == "ok"
    assert not censor.events("detection")
