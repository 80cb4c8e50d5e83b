"""The README's pytest-plugin example runs, verbatim, as a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    text = README.read_text()
    section = text.split("## Blocking-resistance tests with pytest", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "the README lost its pytest example"
    return m.group(1)


def test_readme_example_is_a_marked_lab_test():
    code = readme_example()
    ns: dict = {}
    exec(compile(code, str(README), "exec"), ns)
    tests = [v for k, v in ns.items() if k.startswith("test_")]
    assert len(tests) == 1
    marks = [m.name for m in getattr(tests[0], "pytestmark", [])]
    assert "lab" in marks


@pytest.mark.lab
def test_readme_example_runs(lab):
    ns: dict = {}
    exec(compile(readme_example(), str(README), "exec"), ns)
    test = next(v for k, v in ns.items() if k.startswith("test_"))
    test(lab)
