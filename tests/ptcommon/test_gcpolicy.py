"""The packet loops' collector policy, applied in a process of its own (it is
process-wide, and this test process must keep CPython's defaults)."""

from __future__ import annotations

import json
import subprocess
import sys

from ptcommon import gcpolicy


def test_it_freezes_start_up_and_makes_young_collections_rarer():
    code = ("import gc, json; from ptcommon import gcpolicy; before = gc.get_threshold(); "
            "gcpolicy.for_packet_loop(); "
            "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    before, after, frozen = json.loads(out)
    assert after == [gcpolicy.YOUNG_THRESHOLD, before[1], before[2]]
    assert gcpolicy.YOUNG_THRESHOLD > before[0]
    assert frozen > 1000  # the imported modules' objects, out of every collection
