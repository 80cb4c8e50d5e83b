"""The volunteer's systemd unit: valid for systemd, and without privileges."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent.parent / "contrib" / "ptlab-snowflake-proxy.service"


def test_the_unit_runs_unprivileged():
    text = UNIT.read_text()
    for key in ("DynamicUser=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n",
                "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
                "ExecStart=/opt/ptlab/.venv/bin/ptlab snowflake-proxy\n"):
        assert key in text, key
    assert "User=root" not in text and "--unsafe-logging" not in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_accepts_the_unit():
    r = subprocess.run(["systemd-analyze", "verify", str(UNIT)], capture_output=True,
                       text=True, timeout=60)
    problems = [line for line in (r.stdout + r.stderr).splitlines()
                if line.strip() and "is not executable" not in line]
    assert not problems, problems
