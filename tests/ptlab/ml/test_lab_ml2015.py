"""The ml-2015 learning censor on the live datapath: blocks within its packet budget.

Wang et al.'s entropy/length test flags obfs4 (ours and obfs4proxy) at its
first data packet; the decision tree trained in the lab
(censor_sim/models/wang2015-meek-tree.json) flags meek through the edge at
its 30th packet. obfs4 with a split first segment evades the entropy test.
Benign flows pay for it: the report's collateral column counts them.
"""

from __future__ import annotations

import json

import pytest

from censor_sim.profile import load_profile
from tests.support.replay import replayed

pytestmark = pytest.mark.lab

BUDGET = load_profile("ml-2015").datapath["inspect_packets"]


def detections(lab, row, detector):
    """The censor's detection events of `row`'s cell for `detector`."""
    cell = f"{row.transport}__{row.censor}"
    events = [json.loads(line) for line in lab.runner.events_path.read_text().splitlines()]
    return [e for e in events if e.get("event") == "detection"
            and e.get("detector") == detector and str(e.get("cell", "")).startswith(cell)]


@pytest.mark.parametrize("transport", ["obfs4", "obfs4proxy"])
def test_obfs4_is_blocked_at_its_first_data_packet(lab, transport):
    row = lab.run_cell(transport, "ml-2015")
    assert row.status == "blocked", row.error
    assert row.detector == "entropy"
    ev = detections(lab, row, "entropy")[0]["evidence"]
    assert ev["packets"] <= 6 <= BUDGET  # SYN, SYN-ACK, ACK, then the hello
    assert ev["tested"] and ev["p_value"] >= 0.1 and ev["length"] >= 149
    # Offline, the cell's capture gives the same verdict (ptlab censor --pcap).
    first = replayed(lab, row, "ml-2015", server=lab.runner.lab.addr("bridge"))[0]
    assert (first.verdict != "pass", first.detector) == (True, "entropy")


def test_meek_is_caught_by_the_tree_within_the_budget(lab):
    row = lab.run_cell("meek", "ml-2015")
    assert row.status == "blocked", row.error
    assert row.detector == "meek"
    ev = detections(lab, row, "meek")[0]["evidence"]
    assert ev["packets"] == 30 <= BUDGET
    assert ev["model"] == "wang2015-meek-tree" and 1 <= ev["comparisons"] <= 8



def test_a_split_first_segment_evades_the_entropy_test(lab):
    row = lab.run_cell("obfs4-split", "ml-2015")
    assert row.status == "reachable", row.error
    assert detections(lab, row, "entropy") == []


def test_direct_passes_and_the_collateral_is_counted(lab):
    row = lab.run_cell("direct", "ml-2015", benign=True)
    assert row.status == "reachable", row.error
    assert row.benign_total and row.collateral is not None
    # The binary protocol's 1 KiB of random bytes looks like obfs4 to the test;
    # TLS, HTTP, SSH and DNS do not.
    assert row.benign_detail["binary"]["blocked"] >= 1
    assert row.benign_detail["https"]["blocked"] == 0
    assert row.benign_detail["ssh"]["blocked"] == 0
    assert row.collateral == pytest.approx(
        sum(d["blocked"] for d in row.benign_detail.values()) / row.benign_total)


def test_the_split_is_on_the_wire_and_costs_one_packet(lab):
    """In the capture: obfs4's first client payload is its whole first segment of
    the hello (141 bytes or more: 64 and at least 77 of padding, drawn uniformly up
    to 8,128, so under the test's 149 about once in 1,000 hellos); obfs4-split's is
    exactly 100 bytes, and the rest of the hello follows in the next client packet,
    before the server answers. The same hello bytes, one more packet."""
    from censor_sim.pcapflows import flows_from_pcap
    from transports.obfs4.handshake import CLIENT_MIN_HANDSHAKE_LENGTH, CLIENT_MIN_PAD_LENGTH

    bridge = lab.lab.addr("bridge")
    clients = lab.lab.topology.addresses("client")
    for transport in ("obfs4", "obfs4-split"):
        row = lab.run_cell(transport, "none")
        pcap = next(p for p in row.pcaps if p.endswith("censor-client.pcap"))
        flows = [f for f in flows_from_pcap(lab.runner.out / pcap, clients)
                 if f.server == bridge]
        assert flows, transport
        for f in flows:
            payload = [p for p in f.log.packets if p.length]
            hello = []
            for p in payload:
                if p.direction != 1:
                    break
                hello.append(p.length)
            if transport == "obfs4":
                assert hello[0] >= CLIENT_MIN_HANDSHAKE_LENGTH + CLIENT_MIN_PAD_LENGTH
            else:
                assert hello[0] == 100 and len(hello) >= 2
