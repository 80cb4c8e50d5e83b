"""What one censor event line costs: the standard encoder against censor_sim.eventjson.

The censor writes a line per detection, so the encoder is on its per-flow path
(docs/lab/censor.md §5). The records are the censor's usual detection lines
as the lab logs them (the runner's cell and role taken off): a FET detection
(its evidence holds a None), a TLS SNI match, the entropy test, the meek tree,
and a detection no rule acts on (three None values). Each row is the best of
``--runs`` (15) timings of ``--number`` calls, in ns per line; a None value
costs the fast encoder a walk over the record (a None and a NaN are both
orjson's null), which the rows with one show.

Run: ``.venv/bin/python benchmarks/event_lines.py``.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from censor_sim import eventjson  # noqa: E402
from ptcommon import events  # noqa: E402

FLOW4 = {"client": "198.18.0.1", "server": "198.18.7.2", "proto": 6, "client_port": 64602,
         "server_port": 7000}
FLOW6 = {"client": "2001:db8::1", "server": "2001:db8:0:4::2", "proto": 6,
         "client_port": 44062, "server_port": 443}


def _detection(**fields: object) -> dict[str, object]:
    return {"ts": 1795870629.429216, "component": "censor", "event": "detection", **fields}


RECORDS = {
    "fet (a None)": _detection(
        detector="fet", flow=FLOW4,
        evidence={"rule": "not-exempt", "length": 1028, "popcount_per_byte": 3.937743190661479,
                  "leading_printable": 0, "printable_fraction": 0.34824902723735407,
                  "longest_printable_run": 5, "protocol": None},
        actions=["residual"], probability=1.0, data_packet=1, since_first_data_s=0.0),
    "tls": _detection(
        detector="tls", flow=FLOW6,
        evidence={"sni": "meek.lab", "alpn": ["http/1.1"], "matched": "meek.lab", "by": "sni"},
        actions=["rst", "residual"], probability=1.0, data_packet=1, since_first_data_s=0.0),
    "entropy": _detection(
        detector="entropy", flow=FLOW4,
        evidence={"model": "wang2015-entropy-length", "positive": "obfs4", "score": 1.0,
                  "packets": 4, "comparisons": 0, "length": 1448, "tested": True, "blocks": 181,
                  "ks_d": 0.00592, "p_value": 1.0, "random_looking": True},
        actions=["rst", "residual"], probability=1.0, data_packet=1, since_first_data_s=0.0),
    "meek tree": _detection(
        detector="meek", flow=FLOW6,
        evidence={"model": "wang2015-meek-tree", "positive": "meek", "score": 1.0,
                  "packets": 30, "comparisons": 2},
        actions=["rst", "residual"], probability=1.0, data_packet=4,
        since_first_data_s=0.023962),
    "no rule (3 None)": _detection(
        detector="fet", flow=FLOW4,
        evidence={"rule": "not-exempt", "length": 64, "popcount_per_byte": 4.01,
                  "leading_printable": 0, "printable_fraction": 0.3,
                  "longest_printable_run": 3, "protocol": None},
        actions=[], probability=None, data_packet=1, since_first_data_s=None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--number", type=int, default=20_000)
    args = ap.parse_args()
    if eventjson.orjson is None:
        sys.exit("orjson is not installed (the [lab] extra)")
    encoders = {"eventjson": eventjson.encode, "standard": events._std_encode}
    for name, record in RECORDS.items():  # the fast path, and the same text
        assert eventjson.encode(record) == events._std_encode(record), name
    print(f"{'record':18s}{'eventjson':>11s}{'standard':>10s}  ratio   (ns per line)")
    for name, record in RECORDS.items():
        best = {}
        for enc, fn in encoders.items():
            n = args.number if enc == "eventjson" else args.number // 4
            best[enc] = min(timeit.repeat(lambda fn=fn, record=record: fn(record), number=n,
                                          repeat=args.runs)) / n * 1e9
        print(f"{name:18s}{best['eventjson']:11.0f}{best['standard']:10.0f}"
              f"  {best['standard'] / best['eventjson']:5.1f}x")


if __name__ == "__main__":
    main()
