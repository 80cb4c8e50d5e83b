"""The run's exit statuses: one per outcome a pipeline must tell apart, in a fixed
order of precedence; and --quick's overrides, recorded as its doing."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ptlab.commands.common import make_quick, run_exit_status
from ptlab.common.exitcodes import EXIT_CORRUPTED, EXIT_ERROR_CELL, EXIT_EXPECTATION, EXIT_OK
from ptlab.experiment.spec import parse_spec


@dataclass
class Outcome:
    integrity_failures: list[str] = field(default_factory=list)
    error_cells: list[str] = field(default_factory=list)
    failed_expectations: list[str] = field(default_factory=list)


@pytest.mark.parametrize(("outcome", "status"), [
    (Outcome(), EXIT_OK),
    (Outcome(failed_expectations=["a × b: expected reachable, got blocked"]), EXIT_EXPECTATION),
    (Outcome(error_cells=["a × b: bridge not ready"]), EXIT_ERROR_CELL),
    (Outcome(integrity_failures=["a × b: INTEGRITY FAILURE"]), EXIT_CORRUPTED),
    # Precedence: a corrupted byte, then an ERROR cell, then an expectation.
    (Outcome(["x"], ["y"], ["z"]), EXIT_CORRUPTED),
    (Outcome([], ["y"], ["z"]), EXIT_ERROR_CELL),
])
def test_each_outcome_has_its_status(outcome, status, capsys):
    assert run_exit_status(outcome) == status
    err = capsys.readouterr().err.splitlines()
    assert len(err) == sum(map(len, (outcome.integrity_failures, outcome.error_cells,
                                     outcome.failed_expectations)))
    assert all(line.startswith("ptlab: ") for line in err)


def test_the_statuses_are_distinct():
    assert len({EXIT_OK, EXIT_EXPECTATION, 2, EXIT_CORRUPTED, EXIT_ERROR_CELL}) == 5


def test_quick_caps_the_settings_and_says_so():
    spec = parse_spec({"experiment": {"repetitions": 5},
                       "workloads": {"latency": {"count": 2}},
                       "transports": {"direct": {}}, "censors": {"none": {}}})
    make_quick(spec)
    settings, origins = spec.settings(), spec.setting_origins()
    assert (settings["experiment.repetitions"], origins["experiment.repetitions"]) == \
        (1, "--quick")
    assert (settings["workloads.bulk.size"], origins["workloads.bulk.size"]) == \
        (1_000_000, "--quick")
    # Already below the cap: the spec's own value stands, and the origin says so.
    assert (settings["workloads.latency.count"], origins["workloads.latency.count"]) == \
        (2, "spec")
    assert origins["workloads.bulk.timeout_s"] == "default"
