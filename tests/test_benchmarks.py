"""The benchmarks still run: a tiny run of each cheap one, so a refactor that
breaks a benchmark fails here rather than when someone needs the figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_primitives_prints_each_row_with_its_yardstick(capsys):
    assert load("primitives").main(["--runs", "1", "--payload-mb", "1", "--handshakes", "1"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split()[0] for r in rows] == ["payload", "obfs4", "obfs4"]
    assert all("ratio" in r for r in rows)


def test_primitives_refuses_a_zero_count(capsys):
    with pytest.raises(SystemExit) as e:
        load("primitives").main(["--runs", "0"])
    assert e.value.code == 2
    assert "at least 1" in capsys.readouterr().err
