"""The layer rules (docs/architecture.md §2.2), checked on every import in the tree.

Function-level imports count as much as module-level ones: a lazy import of the
censor from a transport is the same dependency, only hidden. ``TYPE_CHECKING``
blocks count too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("ptcommon", "transports", "broker", "censor_sim", "netns", "ptlab")

#: package -> the packages of ours it must never import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "netns": frozenset(OURS) - {"netns"},
    "censor_sim": frozenset({"transports", "ptlab"}),
    "transports": frozenset({"censor_sim", "ptlab"}),
    "broker": frozenset({"ptlab", "censor_sim"}),
    "ptcommon": frozenset(OURS) - {"ptcommon"},
}


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, relative ones resolved.

    ``module`` is the dotted name of the file (``transports.obfs4.packet``;
    a package's ``__init__`` is the package itself).
    """
    tree = ast.parse(source)
    is_package = module.endswith(".__init__")
    parts = module.removesuffix(".__init__").split(".")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return out


def violations(package: str, source: str, module: str) -> list[str]:
    """The imports in ``source`` (a file of ``package``) that break its rule."""
    bad = []
    for line, name in imported_modules(source, module):
        top = name.split(".")[0]
        if top in FORBIDDEN[package]:
            bad.append(f"{module}:{line} imports {name}")
        elif package == "ptcommon" and top not in sys.stdlib_module_names | {"ptcommon",
                                                                             "__future__"}:
            bad.append(f"{module}:{line} imports {name} (ptcommon is standard library only)")
    return bad


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layer_rule_holds(package: str):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources under {package}/"
    bad = [v for f in files for v in violations(package, f.read_text(), _module_name(f))]
    assert not bad, f"{package} breaks its layer rule (docs/architecture.md §2.2):\n" + \
        "\n".join(bad)


@pytest.mark.parametrize(("package", "module", "source"), [
    ("transports", "transports.meek.fingerprint", "from censor_sim.detectors import tls\n"),
    ("transports", "transports.meek.fingerprint", "def f():\n    import ptlab.experiment.runner\n"),
    ("censor_sim", "censor_sim.detectors.__init__",
     "from ..x import y\nfrom transports import a\n"),
    ("netns", "netns.delayline", "from ptcommon.events import EventLog\n"),
    ("broker", "broker.app", "from ptlab import results\n"),
    ("ptcommon", "ptcommon.events", "import aiohttp\n"),
])
def test_the_checker_catches_each_kind_of_violation(package, module, source):
    assert violations(package, source, module)


def test_relative_imports_resolve_to_their_package():
    src = "from . import a\nfrom .. import b\nfrom ..common.relay import relay\n"
    names = [n for _, n in imported_modules(src, "transports.pt.managed")]
    assert names == ["transports.pt", "transports", "transports.common.relay"]
    assert [n for _, n in imported_modules("from . import x\n", "broker.__init__")] == ["broker"]


def test_allowed_imports_pass():
    assert not violations("transports", "from ptcommon.tlshello import ja3\n",
                          "transports.meek.fingerprint")
    assert not violations("censor_sim", "from ptcommon import events\nimport scapy\n",
                          "censor_sim.engine")
