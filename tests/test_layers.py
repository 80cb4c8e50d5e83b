"""The layer rules (docs/architecture.md §2.2), ptlab's floors (§2.3) and the ban on
import cycles, checked on every import in the tree.

Function-level imports count as much as module-level ones: a lazy import of the
censor from a transport is the same dependency, only hidden. ``TYPE_CHECKING``
blocks count too.
"""

from __future__ import annotations

import ast
import re
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


def imports(source: str, module: str) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module name, names taken from it) of every import in ``source``,
    relative ones resolved; ``import a.b`` takes no names.

    ``module`` is the dotted name of the file (``transports.obfs4.packet``;
    a package's ``__init__`` is the package itself).
    """
    tree = ast.parse(source)
    is_package = module.endswith(".__init__")
    parts = module.removesuffix(".__init__").split(".")
    out: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts if is_package else parts[:-1]
                base = base[:len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((node.lineno, name, [alias.name for alias in node.names]))
    return out


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``."""
    return [(line, name) for line, name, _ in imports(source, module)]


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


# --- Inside ptlab: floors (docs/architecture.md §2.3) and no cycles anywhere (§2.2) ----

ARCHITECTURE = ROOT / "docs" / "architecture.md"
FLOOR_ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|", re.M)


def ptlab_floors(text: str) -> dict[str, int]:
    """Room -> floor, from §2.3's table: a room is a subpackage (``common``) or a
    module at ptlab's top (``cli``)."""
    start = text.index("### 2.3 Inside `ptlab`: floors")
    end = text.index("\n## ", start)
    floors: dict[str, int] = {}
    for number, rooms in FLOOR_ROW.findall(text[start:end]):
        for room in re.findall(r"`([\w.]+)/?`", rooms):
            floors[room.removesuffix(".py")] = int(number)
    return floors


def module_names() -> dict[str, Path]:
    """Every module of ours by dotted name (a package by its own name)."""
    out = {}
    for package in OURS:
        for f in sorted((ROOT / package).rglob("*.py")):
            out[_module_name(f).removesuffix(".__init__")] = f
    return out


def import_edges(source: str, module: str, known: set[str] | dict[str, Path]) -> set[str]:
    """The modules of ours that ``source`` (module ``module``) imports: ``from X import a``
    names module X.a when there is one, else X itself."""
    out: set[str] = set()
    for _, name, names in imports(source, module):
        if not names:
            out.add(name)
        for taken in names:
            sub = f"{name}.{taken}"
            out.add(sub if sub in known else name)
    out.discard(module.removesuffix(".__init__"))
    return {m for m in out if m in known}


def import_graph() -> dict[str, set[str]]:
    known = module_names()
    return {name: import_edges(path.read_text(), _module_name(path), known)
            for name, path in known.items()}


def room_of(module: str) -> str | None:
    """The ptlab room a module lives in (None outside ptlab)."""
    parts = module.split(".")
    if parts[0] != "ptlab":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    """Imports inside ptlab from a room to a room on a higher floor, and modules whose
    room the table does not place."""
    bad = []
    for module, targets in sorted(graph.items()):
        room = room_of(module)
        if room is None:
            continue
        if room not in floors:
            bad.append(f"{module}: room {room!r} is on no floor of docs/architecture.md §2.3")
            continue
        for target in sorted(targets):
            other = room_of(target)
            if other in floors and floors[other] > floors[room]:
                bad.append(f"{module} (floor {floors[room]}, {room}) imports {target} "
                           f"(floor {floors[other]}, {other})")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_every_room_of_ptlab_imports_only_its_floor_and_below():
    floors = ptlab_floors(ARCHITECTURE.read_text())
    assert {"common", "cli", "experiment"} <= set(floors)
    bad = upward_imports(import_graph(), floors)
    assert not bad, "ptlab imports upward (docs/architecture.md §2.3):\n" + "\n".join(bad)


def test_every_room_the_table_names_exists():
    floors = ptlab_floors(ARCHITECTURE.read_text())
    missing = [r for r in floors
               if not (ROOT / "ptlab" / r).is_dir() and not (ROOT / "ptlab" / f"{r}.py").exists()]
    assert not missing, f"docs/architecture.md §2.3 names rooms ptlab lacks: {missing}"


def test_no_import_cycle_in_the_tree():
    found = cycles(import_graph())
    assert not found, "import cycles (function-level imports count):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


FLOOR_TABLE = """### 2.3 Inside `ptlab`: floors

| floor | rooms | what |
| --- | --- | --- |
| 3 | `cli.py` | top |
| 2 | `experiment/`, `output/` | middle |
| 1 | `common/` | floor |

## 3. Next
"""


def test_the_floor_table_is_read_as_written():
    assert ptlab_floors(FLOOR_TABLE) == {"cli": 3, "experiment": 2, "output": 2, "common": 1}


@pytest.mark.parametrize(("graph", "bad"), [
    ({"ptlab.common.x": {"ptlab.experiment.y"}}, 1),  # the floor imports a room above
    ({"ptlab.output.r": {"ptlab.common.x", "ptlab.cli"}}, 1),
    ({"ptlab.experiment.s": {"ptlab.output.r", "ptlab.common.x"}}, 0),  # same floor, below
    ({"ptlab.cli": {"ptlab.experiment.s"}}, 0),
    ({"ptlab.newroom.x": set()}, 1),  # a room the table does not place
])
def test_the_floor_check_catches_an_upward_import(graph, bad):
    assert len(upward_imports(graph, ptlab_floors(FLOOR_TABLE))) == bad


def test_the_cycle_check_finds_function_level_and_long_circles():
    lazy = "def f():\n    from .b import g\n"
    known = {"p.a", "p.b", "p.c"}
    assert import_edges(lazy, "p.a", known) == {"p.b"}
    assert import_edges("from . import b, c\n", "p.__init__", {"p", *known}) == {"p.b", "p.c"}
    assert import_edges("from p import b\n", "p.a", {"p", *known}) == {"p.b"}
    assert cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "q": {"p.a"}}) == \
        [["p.a", "p.b", "p.c"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []
