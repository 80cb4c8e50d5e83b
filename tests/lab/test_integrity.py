"""The bulk check fails loudly when one byte is changed on the wire inside the lab."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab

FLIP_TABLE = "ptlflip"


def flip_ruleset(bridge: str, port: int) -> str:
    """Change one payload byte of the first large bridge→client segment.

    The first rule marks that one segment; the next two make sure the byte at
    payload offset 500 really changes whatever its value was.
    """
    return f"""table inet {FLIP_TABLE} {{
  chain flip {{
    type filter hook forward priority -200; policy accept;
    ip saddr {bridge} tcp sport {port} meta length > 1200 limit rate 1/hour burst 1 packets \
meta mark set 0x77
    meta mark 0x77 @ih,4000,8 0x5a @ih,4000,8 set 0xa5 meta mark set 0x78 counter name flipped
    meta mark 0x77 @ih,4000,8 set 0x5a counter name flipped
  }}
  counter flipped {{}}
}}
"""


def flipped_packets(lab) -> int:
    out = lab.exec("censor", ["nft", "-j", "list", "counter", "inet", FLIP_TABLE, "flipped"])
    for item in json.loads(out.stdout)["nftables"]:
        if "counter" in item:
            return item["counter"]["packets"]
    raise AssertionError("no flip counter")


def test_one_flipped_byte_on_the_wire_is_an_integrity_error(lab):
    from ptlab.plugins.direct import BRIDGE_PORT

    before = len(lab.runner.integrity_failures)
    lab.lab.nft("censor", flip_ruleset(lab.lab.addr("bridge"), BRIDGE_PORT))
    try:
        row = lab.run_cell("direct", "none")
        assert flipped_packets(lab.lab) == 1  # exactly one packet was changed in transit
    finally:
        lab.lab.exec("censor", ["nft", "delete", "table", "inet", FLIP_TABLE])
    assert row.status == "ERROR"
    assert row.error.startswith("INTEGRITY FAILURE: sha256")
    assert len(lab.runner.integrity_failures) == before + 1
    # Without the flip the same cell is clean again (and the baseline is restored).
    clean = lab.run_cell("direct", "none")
    assert clean.status == "reachable", clean.error
    del lab.runner.integrity_failures[before:]
