"""The censor's flow table: what a flow keeps, and what it makes only when asked."""

from __future__ import annotations

from censor_sim.flows import FlowTable
from tests.support.flows import tcp_flow


def test_payloads_are_kept_up_to_the_cap_and_joined_on_demand():
    fed = tcp_flow()
    fed.table = FlowTable(lambda: 1000.0, buffer_cap=10)
    fed.add(True, b"abcdef")
    assert fed.flow.c2s == b"abcdef" and fed.flow.s2c == b""
    fed.add(True, b"ghijkl")  # crosses the cap: the chunk is kept whole, the bytes capped
    fed.add(True, b"mnop")  # past the cap: not kept
    fed.add(False, b"XY")
    flow = fed.flow
    assert flow.c2s_payloads == [b"abcdef", b"ghijkl"]
    assert flow.c2s == b"abcdefghij" and flow.c2s_bytes == 10
    assert flow.s2c == b"XY" and flow.s2c_payloads == [b"XY"]
    assert flow.c2s_data_packets == 3 and flow.packets == 4


def test_a_flow_makes_its_containers_at_first_use():
    table = FlowTable(lambda: 1000.0, record_stats=False)
    fed = tcp_flow()
    fed.table = table
    fed.add(True, b"")  # no payload yet
    flow = fed.flow
    assert flow.stats is None  # no inspector asked for per-packet sizes
    assert flow.c2s_payloads == [] and flow._state is None
    flow.state["seen"] = 1
    assert flow.state == {"seen": 1}
    other = tcp_flow()
    other.table, other.client_port = table, other.client_port + 1
    other.add(True, b"")
    assert other.flow.state == {}  # no flow's scratch state is another's
    fed.add(True, b"data")
    assert other.flow.c2s_payloads == [] and fed.flow.c2s_payloads == [b"data"]


def test_stats_are_recorded_when_an_inspector_reads_them():
    fed = tcp_flow()
    fed.table = FlowTable(lambda: 1000.0, record_stats=True)
    fed.add(True, b"hello")
    fed.add(False, b"")
    assert fed.flow.stats.lengths == [5, 0] and fed.flow.stats.directions == [1, -1]
    assert set(fed.flow.stats.first_payload) == {1}


def test_release_frees_the_buffers_and_keeps_the_count():
    fed = tcp_flow()
    fed.add(True, b"hello")
    fed.flow.state["x"] = 1
    fed.table.release(fed.flow)
    fed.flow.decided = "accept"
    fed.add(True, b"more")
    flow = fed.flow
    assert flow.c2s == b"" and flow.c2s_payloads == [] and flow.state == {}
    assert flow.packets == 2 and flow.c2s_data_packets == 2
