"""``python -m censor_sim`` as a process: its contract with the lab's runner.

The loop it runs is :mod:`censor_sim.service` (tests/censor_sim/test_service.py);
what the entry point owns is the config file and the exit status: a config the
censor cannot run on is one line on stderr and status 2, before anything is
installed, so neither needs root.
"""

from __future__ import annotations

import json
import subprocess
import sys


def censor(tmp_path, config: dict) -> subprocess.CompletedProcess:
    path = tmp_path / "censor.json"
    path.write_text(json.dumps(config))
    return subprocess.run([sys.executable, "-m", "censor_sim", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_a_config_without_a_profile_is_one_line_and_status_2(tmp_path):
    proc = censor(tmp_path, {"seed": 1})
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "censor: config needs a 'profile' key\n")


def test_an_error_from_the_service_is_reported_the_same_way(tmp_path):
    proc = censor(tmp_path, {"profile": "gfw-fet-2021"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", "censor: profile gfw-fet-2021 inspects packets: the config needs 'inside' "
               "and 'outside' interfaces\n")
