"""The runner's verdict rules on a real lab: ERROR is never reported as blocked."""

from __future__ import annotations

import json
import os
import signal

import pytest

from ptlab import plugins
from ptlab.plugins.base import CellContext, Endpoint, Service
from ptlab.plugins.direct import DirectPlugin

pytestmark = pytest.mark.lab

READY = json.dumps({"ts": 0, "component": "fake", "event": "ready"})


class DeadEnd(DirectPlugin):
    """A bridge that relays to a closed port: fails with no censor at all."""

    name = "deadend"

    def servers(self, ctx: CellContext) -> list[Service]:
        ctx = CellContext(ctx.lab, ctx.workdir, ctx.options, ctx.seed, (ctx.upstream[0], 1))
        return [Service(s.name.replace("direct", "deadend"), s.role, s.argv)
                for s in super().servers(ctx)]


class Crashy(DirectPlugin):
    """A server that says it is ready and exits."""

    name = "crashy"

    def servers(self, ctx: CellContext) -> list[Service]:
        return [Service("crashy-server", "bridge", [ctx.python, "-c", f"print({READY!r})"])]


class Buggy(DirectPlugin):
    name = "buggy"

    def endpoint(self, ctx: CellContext) -> Endpoint:
        raise ValueError("a bug in a plugin")


@pytest.fixture
def fake_plugins():
    for p in (DeadEnd(), Crashy(), Buggy()):
        plugins._cache[p.name] = p
    yield
    for name in ("deadend", "crashy", "buggy"):
        plugins._cache.pop(name, None)


def test_failing_without_a_censor_is_error_never_blocked(lab, fake_plugins):
    none = lab.run_cell("deadend", "none")
    assert none.status == "ERROR" and "fails with no censor" in none.error
    blocked_looking = lab.run_cell("deadend", "ip-blocklist")
    assert blocked_looking.status == "ERROR"
    assert "baseline (none censor) failed" in blocked_looking.error


def test_a_process_that_dies_makes_the_cell_error(lab, fake_plugins):
    row = lab.run_cell("crashy", "none")
    assert row.status == "ERROR"
    assert "died during the cell: crashy-server" in row.error


def test_a_plugin_bug_costs_one_cell_not_the_run(lab, fake_plugins):
    row = lab.run_cell("buggy", "none")
    assert row.status == "ERROR" and row.error.startswith("internal error: ValueError")
    assert lab.run_cell("direct", "none").status == "reachable"  # the lab carries on


def test_a_dead_lab_service_is_restarted_before_the_next_cell(lab):
    web = next(p for p in lab.runner.services.procs if p.name == "web-http")
    os.killpg(web.pid, signal.SIGKILL)
    web.proc.wait(5)
    assert lab.runner.services.dead() == ["web-http"]
    row = lab.run_cell("direct", "none")
    assert row.status == "reachable", row.error
    assert any("restarted lab services that had died: web-http" in n for n in row.notes)
    assert lab.runner.services.dead() == []
