"""A pytest plugin: blocking-resistance tests in a few lines.

    import pytest

    @pytest.mark.lab
    def test_blocklist_blocks_direct(lab):
        row = lab.run_cell("direct", "ip-blocklist")
        assert row.status == "blocked"

The ``lab`` fixture brings one real lab (namespaces plus lab services) up per
test session and runs cells in it; ``run_cell`` returns the same result row
``ptlab run`` writes. Tests marked ``lab`` are skipped, with the reason, when
the machine cannot run a lab (not root, or a tool missing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from netns.errors import LabError
from netns.sh import require_root, require_tools

from .common.results import Row
from .experiment.spec import Spec, TopologyOptions, Workloads

LAB_TOOLS = ("ip", "nft", "tc", "tcpdump")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab: needs root and network namespaces (a real lab)")


def lab_unavailable() -> str | None:
    """Why this machine cannot run a lab, or None."""
    try:
        require_root()
        require_tools(*LAB_TOOLS)
    except LabError as exc:
        return str(exc)
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("lab") and (why := lab_unavailable()):
        pytest.skip(why)


class LabFixture:
    """One lab for the session; run cells in it."""

    def __init__(self, out_dir: Path) -> None:
        from .experiment.runner import LabRunner

        self.spec = Spec(path=None, name="pytest", repetitions=1,
                         workloads=Workloads(bulk_size=500_000, latency_count=3,
                                             benign=False, bootstrap_timeout_s=5.0,
                                             idle_timeout_s=2.0, bulk_timeout_s=15.0),
                         # Two proxy nodes, so Snowflake rows can run in the shared lab.
                         topology=TopologyOptions(proxies=2))
        self.out_dir = out_dir
        # Every registered plugin's topology extension (phantom space, proxy nodes...),
        # so tests can add any row to the shared lab.
        self.runner = LabRunner(self.spec, out_dir, capture=True, log=lambda *a: None,
                                extend_for_all=True)

    def start(self) -> LabFixture:
        self.runner.start()
        return self

    @property
    def lab(self):
        return self.runner.lab

    def run_cell(self, transport: str, censor: str = "none",
                 overrides: dict[str, Any] | None = None, **workloads: Any) -> Row:
        """Run `transport` under censor profile `censor` and return its row.

        `overrides` change the profile's parameters (as a spec's [censors.X]
        table does); keyword arguments change workload settings, e.g.
        ``bulk_size=2_000_000`` or ``benign=True``.
        """
        saved = self.spec.workloads
        self.spec.workloads = replace(saved, **workloads)
        try:
            return self.runner.run_cell(transport, censor, overrides)
        finally:
            self.spec.workloads = saved

    def stop(self) -> None:
        self.runner.stop()


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFixture]:
    """A running lab shared by the session's lab tests."""
    if why := lab_unavailable():
        pytest.skip(why)
    out = tmp_path_factory.mktemp("ptlab-lab")
    fixture = LabFixture(out).start()
    try:
        yield fixture
    finally:
        fixture.stop()
        if not os.environ.get("PTLAB_KEEP_RESULTS"):
            shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="session")
def tor_network(lab: LabFixture):
    """The lab's private Tor network (3 authorities, 2 exits on the ``tornet`` node),
    started once; ``tor_network.client(datadir)`` and ``.bridge(datadir)`` plan more
    nodes, and ``.process(node)`` runs one in its namespace."""
    from .tor.network import shared

    return shared(lab.lab, lab.lab.state_dir / "tor")

