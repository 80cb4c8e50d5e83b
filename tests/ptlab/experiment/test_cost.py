"""`ptlab run --check`'s estimate: earlier runs of a cell where they measured the same
workloads, the workloads' arithmetic otherwise."""

from __future__ import annotations

import pytest

from ptlab.common.results import write_results
from ptlab.experiment import cost
from ptlab.experiment.spec import parse_spec
from tests.support.rows import reachable_row, results_of


def spec():
    return parse_spec({"transports": {"obfs4": {}, "meek": {}}, "censors": {"none": {}},
                       "workloads": {"benign": {"enabled": False},
                                     "bulk": {"size": 6_250_000}}})


def test_from_the_workloads_alone():
    s = spec()
    # 3 repetitions of 50 Mbit at the assumed rate, 10 latency samples, the overhead.
    one = cost.CELL_OVERHEAD_S + 3 * 1.0 + 10 * cost.LATENCY_SAMPLE_S
    assert cost.workload_seconds(s, 3) == pytest.approx(one)
    est = cost.estimate(s, [("obfs4", "none"), ("meek", "none")], baselines=[])
    assert est.seconds == pytest.approx(cost.LAB_UP_S + 2 * one)
    assert (est.from_history, est.from_workloads) == (0, 2)


def test_earlier_runs_of_the_same_cells_and_workloads_are_used(tmp_path):
    s = spec()
    same = results_of([reachable_row(cell_seconds=12.0), reachable_row(cell_seconds=14.0,
                                                                        censor="gfw")],
                      settings=s.settings())
    write_results(same, tmp_path / "r1")
    other = results_of([reachable_row(cell_seconds=99.0)],
                       settings=s.settings() | {"workloads.bulk.size": 1})
    write_results(other, tmp_path / "r2")  # other workloads: its times do not apply
    again = results_of([reachable_row(cell_seconds=16.0)], settings=s.settings())
    write_results(again, tmp_path / "r3")
    est = cost.estimate(s, [("obfs4", "none"), ("meek", "none")], ["meek"], tmp_path)
    assert est.per_cell[("obfs4", "none")] == 14.0  # the median of 12 and 16
    assert (est.from_history, est.from_workloads) == (1, 1)
    assert "1 cells from earlier runs, 1 from the workloads" in est.text()
