"""The wheel ships every package of the tree (an editable install would hide a gap)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("ptcommon", "transports", "broker", "censor_sim", "netns", "ptlab")


def test_every_package_is_listed_for_setuptools():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in TOP for p in (ROOT / top).rglob("__init__.py")}
    assert found - listed == set(), "packages a wheel would leave out"
    assert listed - found == set(), "listed packages that do not exist"
